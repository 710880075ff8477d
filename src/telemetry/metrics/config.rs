//! The config's metrics: the serving version, reload attempts and their results, the
//! last attempt and success as Unix times (an alert compares them), and the rules whose
//! buckets a reload started afresh.

use std::collections::HashSet;
use std::sync::PoisonError;

use crate::config::Snapshot;

use super::{DomainLabel, Metrics, ResultLabel, VersionLabel};

impl Metrics {
    /// Marks `version` as the serving config (call right after the swap, and after the
    /// startup load, which also counts as the last successful load).
    pub fn serving(&self, version: &str) {
        self.config_loaded(true);
        self.config_info.clear();
        self.config_info.get_or_create(&VersionLabel { version: version.to_string() }).set(1);
    }

    /// One reload attempt: `success` or `failure`.
    pub fn reload(&self, ok: bool) {
        let result = if ok { "success" } else { "failure" };
        self.config_reloads.get_or_create(&ResultLabel { result }).inc();
        self.config_loaded(ok);
    }

    /// Exports `tollgate_config_reload_fresh_rules_total` of every domain of `snapshot` (0 for
    /// a new one); call at each load.
    pub fn export_fresh_rules(&self, snapshot: &Snapshot) {
        for domain in snapshot.domains.keys() {
            self.fresh_rules.export(domain);
        }
    }

    /// Exports the per-domain counters of every configured domain at 0 (local decisions,
    /// shadow-mode overrides, dropped series, admin resets, the incident switch's), so that
    /// dashboards show 0 rather than "no data" and an `absent()` alert holds from startup;
    /// removes those of the domains `current` no longer has. Called with each snapshot
    /// installed (`counters_for`). Only configured domains reach a `domain` label here.
    pub(super) fn install_domains(&self, current: HashSet<&str>) {
        let mut installed = self.installed.domains.lock().unwrap_or_else(PoisonError::into_inner);
        for gone in installed.iter().filter(|d| !current.contains(d.as_str())) {
            let label = DomainLabel { domain: gone.clone() };
            self.local_decisions.remove(&label);
            self.shadow_overrides.remove(&label);
            self.series_dropped.remove(&label);
            self.admin_resets.remove(&label);
            self.overrides.remove_scope(gone);
        }
        for domain in &current {
            if installed.contains(*domain) {
                continue;
            }
            let label = DomainLabel { domain: domain.to_string() };
            self.local_decisions.get_or_create(&label).inc_by(0);
            self.shadow_overrides.get_or_create(&label).inc_by(0);
            self.series_dropped.get_or_create(&label).inc_by(0);
            self.admin_resets.get_or_create(&label).inc_by(0);
            self.overrides.export_scope(domain);
        }
        *installed = current.into_iter().map(str::to_string).collect();
    }

    /// `rules` rules of `domain` whose buckets a reload started afresh (`crate::sources::key_changes`).
    pub fn fresh_rules(&self, domain: &str, rules: usize) {
        self.fresh_rules.add(domain, rules);
    }

    /// Stamps the last attempt, and the last success when `ok`: an alert compares the two
    /// (a failing reload leaves the success behind the attempt).
    fn config_loaded(&self, ok: bool) {
        let now = unix_now();
        self.config_last_attempt.set(now);
        if ok {
            self.config_last_success.set(now);
        }
    }
}

/// Seconds since the Unix epoch, as Prometheus' `time()` reads them.
fn unix_now() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}
