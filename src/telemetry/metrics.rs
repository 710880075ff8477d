//! Prometheus metrics: the families, their labels, and per-rule handles; and the server's
//! own one-minute history (`history`, not exported) that the status page reads.
//!
//! Names are a contract (docs/architecture.md#contracts). Labels are bounded: `domain` and `rule` come from the
//! config, never from requests, except for rules that opt in with `detailed_metric` or
//! `value_to_metric`; their values are escaped, cut to `--max-label-value-bytes` (`label`)
//! and capped at `--max-detailed-series` label sets per domain (`series`). Per-rule counters
//! are resolved once per config snapshot (`RuleCounters`), so the request path of other
//! rules increments pre-built handles and allocates nothing; a reload removes the series
//! of the rules it drops.
//!
//! Layout: this file (`Metrics`: the registry and its families, which `families` creates
//! with their label sets;
//! `approx`, `lease`, `key_changes`, `reservations`, `hotkeys`, `overrides`, `rlqs` and `trace` register their own), then the recorders by
//! what they count: `requests` (decisions and the request path), `store` (store calls,
//! gauges refreshed before a scrape), `config` (loads and reloads); below them `outcome`
//! (the closed `result` and `reason` values the service reports), `history` and `mirror`. Knows no
//! handler and no page: the service, the admin port and the wiring call in, never back.

mod approx;
mod config;
mod counters;
mod families;
pub mod history;
mod hotkeys;
mod key_changes;
pub mod label;
mod lease;
mod mirror;
mod outcome;
mod overrides;
mod requests;
mod reservations;
pub mod rlqs;
mod series;
mod store;
pub mod trace;
pub mod xds;

use std::sync::atomic::AtomicU64;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

pub use self::counters::{RuleSeries, SeriesLimits, SnapshotCounters, DEFAULT_MAX_DETAILED_SERIES};
pub use self::outcome::{Outcome, Oversize};

use self::families::{
    Answers, DecisionLabels, DomainLabel, Guards, Holding, LossyLabel, Operator, ReasonLabel, ReplacedLabels,
    ResultLabel, RuleLabels, StoreLabels, StoreName, VersionLabel,
};

/// Every metric Tollgate exports.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    decisions: Family<DecisionLabels, Counter>,
    hits: Family<RuleLabels, Counter>,
    request_duration: Histogram,
    store_requests: Family<StoreLabels, Counter>,
    store_duration: Family<StoreName, Histogram>,
    config_reloads: Family<ResultLabel, Counter>,
    config_info: Family<VersionLabel, Gauge>,
    unknown_domain: Counter,
    memory_keys: Gauge,
    memory_max_keys: Gauge,
    memory_evictions: Family<LossyLabel, Counter>,
    memory_at_limit_evictions: Counter,
    memory_reservation_records: Gauge,
    memory_unrecorded_reservations: Counter,
    oversized: Family<ReasonLabel, Counter>,
    local_decisions: Family<DomainLabel, Counter>,
    breaker_state: Family<StoreName, Gauge>,
    breaker_opens: Family<StoreName, Counter>,
    redis_client_cert_days_left: Family<StoreName, Gauge>,
    connections_replaced: Family<ReplacedLabels, Counter>,
    shadow_overrides: Family<DomainLabel, Counter>,
    series_dropped: Family<DomainLabel, Counter>,
    admin_resets: Family<DomainLabel, Counter>,
    over_limit_cache_hits: Family<StoreName, Counter>,
    config_last_attempt: Gauge<f64, AtomicU64>,
    config_last_success: Gauge<f64, AtomicU64>,
    limits: SeriesLimits,
    installed: counters::Installed,
    /// The status page's one-minute history (not exported to Prometheus).
    history: history::History,
    /// The hot-key sketches, and the gauge that shows their shape.
    hot_keys: crate::telemetry::hotkeys::HotKeys,
    hot_key_shares: hotkeys::HotKeyShares,
    approx: approx::ApproxMetrics,
    fresh_rules: key_changes::FreshRules,
    reservations: reservations::Reservations,
    leases: lease::LeaseMetrics,
    xds: xds::XdsMetrics,
    trace: trace::TraceMetrics,
    overrides: overrides::OverrideMetrics,
    rlqs: rlqs::RlqsMetrics,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Creates and registers every family, with the default series limits.
    pub fn new() -> Metrics {
        Metrics::with_limits(SeriesLimits::default())
    }

    /// Creates and registers every family.
    pub fn with_limits(limits: SeriesLimits) -> Metrics {
        let mut registry = Registry::default();
        let operator = Operator::register(&mut registry);
        let guards = Guards::register(&mut registry);
        let answers = Answers::register(&mut registry);
        let holding = Holding::register(&mut registry);
        // Closed label sets start at 0, so that the first failure is a step `rate()` sees
        // (a series that appears at 1 has no increase) and the families are exported from
        // the start.
        let hot_key_shares = hotkeys::HotKeyShares::register(&mut registry);
        let approx = approx::ApproxMetrics::register(&mut registry);
        let fresh_rules = key_changes::FreshRules::register(&mut registry);
        let reservations = reservations::Reservations::register(&mut registry);
        let leases = lease::LeaseMetrics::register(&mut registry);
        let xds = xds::XdsMetrics::register(&mut registry);
        let trace = trace::TraceMetrics::register(&mut registry);
        let overrides = overrides::OverrideMetrics::register(&mut registry);
        let rlqs = rlqs::RlqsMetrics::register(&mut registry);
        for result in ["success", "failure"] {
            answers.config_reloads.get_or_create(&ResultLabel { result }).inc_by(0);
        }
        for oversize in [Oversize::Descriptors, Oversize::Entries, Oversize::ValueBytes] {
            guards.oversized.get_or_create(&ReasonLabel { reason: oversize.as_str() }).inc_by(0);
        }
        Metrics {
            registry,
            decisions: answers.decisions,
            hits: answers.hits,
            request_duration: answers.request_duration,
            store_requests: answers.store_requests,
            store_duration: answers.store_duration,
            config_reloads: answers.config_reloads,
            config_info: holding.config_info,
            unknown_domain: holding.unknown_domain,
            memory_keys: holding.memory_keys,
            memory_max_keys: holding.memory_max_keys,
            memory_evictions: holding.memory_evictions,
            memory_at_limit_evictions: holding.memory_at_limit_evictions,
            memory_reservation_records: holding.memory_reservation_records,
            memory_unrecorded_reservations: holding.memory_unrecorded_reservations,
            oversized: guards.oversized,
            local_decisions: guards.local_decisions,
            breaker_state: guards.breaker_state,
            breaker_opens: guards.breaker_opens,
            redis_client_cert_days_left: guards.redis_client_cert_days_left,
            connections_replaced: guards.connections_replaced,
            shadow_overrides: operator.shadow_overrides,
            series_dropped: guards.series_dropped,
            admin_resets: operator.admin_resets,
            over_limit_cache_hits: operator.over_limit_cache_hits,
            config_last_attempt: operator.config_last_attempt,
            config_last_success: operator.config_last_success,
            limits,
            installed: counters::Installed::default(),
            history: history::History::new(),
            hot_keys: crate::telemetry::hotkeys::HotKeys::default(),
            hot_key_shares,
            approx,
            fresh_rules,
            reservations,
            leases,
            xds,
            trace,
            overrides,
            rlqs,
        }
    }

    /// The RLQS service's metrics (`crate::service::rlqs`).
    pub fn rlqs(&self) -> &rlqs::RlqsMetrics {
        &self.rlqs
    }

    /// The config source's and the xDS stream's metrics.
    pub fn xds(&self) -> &xds::XdsMetrics {
        &self.xds
    }

    /// Sets `tollgate_override_active` of every exported scope (`all` and the configured
    /// domains) from `active(scope, mode)`, `mode` being `shadow` or `open`.
    pub fn set_overrides_active(&self, active: impl Fn(&str, &str) -> bool) {
        self.overrides.set_active(active);
    }

    /// One request of a configured `domain` answered under an incident override in `mode`
    /// (`shadow` or `open`).
    pub fn override_request(&self, domain: &str, mode: &'static str) {
        self.overrides.request(domain, mode);
    }

    /// One override change (`set` or `end`) made while Redis was unreachable, refused when
    /// it was sent again: another instance had changed the scope since.
    pub fn override_replay_refused(&self, change: &'static str) {
        self.overrides.replay_refused(change);
    }

    /// Span export (`crate::telemetry::trace`).
    pub fn trace(&self) -> &trace::TraceMetrics {
        &self.trace
    }

    /// The one-minute history of decisions and store latency the status page shows.
    pub fn history(&self) -> &history::History {
        &self.history
    }

    /// The hot-key sketches of every domain (`crate::telemetry::hotkeys`).
    pub fn hot_keys(&self) -> &crate::telemetry::hotkeys::HotKeys {
        &self.hot_keys
    }

    /// `tollgate_hot_key_share`, refreshed before each scrape from the serving snapshot's
    /// sketches: per configured domain, the shares of its busiest buckets.
    pub fn set_hot_key_shares(&self, hot_keys: &crate::telemetry::hotkeys::SnapshotHotKeys) {
        self.hot_key_shares.set(&hot_keys.shares(self.history.now(), hotkeys::RANKS));
    }

    /// The text exposition format.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

#[cfg(test)]
mod tests;
