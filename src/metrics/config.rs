//! The config's metrics: the serving version, reload attempts and their results, the
//! last attempt and success as Unix times (an alert compares them), and the rules whose
//! buckets a reload started afresh.

use crate::config::Snapshot;

use super::{Metrics, ResultLabel, VersionLabel};

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

    /// `rules` rules of `domain` whose buckets a reload started afresh (`crate::fresh`).
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
