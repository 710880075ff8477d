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
//! Layout: this file (`Metrics`: the registry and the families with their label sets;
//! `approx`, `lease`, `key_changes`, `hotkeys`, `overrides` and `trace` register their own), then the recorders by
//! what they count: `requests` (decisions and the request path), `store` (store calls,
//! gauges refreshed before a scrape), `config` (loads and reloads); below them `outcome`
//! (the closed `result` and `reason` values the service reports), `history` and `mirror`. Knows no
//! handler and no page: the service, the admin port and the wiring call in, never back.

mod approx;
mod config;
mod counters;
pub mod history;
mod hotkeys;
mod key_changes;
pub mod label;
mod lease;
mod mirror;
mod outcome;
mod overrides;
mod requests;
mod series;
mod store;
pub mod trace;
pub mod xds;

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

pub use self::counters::{RuleSeries, SeriesLimits, SnapshotCounters, DEFAULT_MAX_DETAILED_SERIES};
pub use self::outcome::{Outcome, Oversize};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DecisionLabels {
    domain: String,
    rule: String,
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RuleLabels {
    domain: String,
    rule: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StoreLabels {
    store: &'static str,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StoreName {
    store: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReplacedLabels {
    store: &'static str,
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabel {
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VersionLabel {
    version: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LossyLabel {
    lossy: &'static str,
}

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
    oversized: Family<ReasonLabel, Counter>,
    local_decisions: Family<DomainLabel, Counter>,
    breaker_state: Family<StoreName, Gauge>,
    breaker_opens: Family<StoreName, Counter>,
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
    leases: lease::LeaseMetrics,
    xds: xds::XdsMetrics,
    trace: trace::TraceMetrics,
    overrides: overrides::OverrideMetrics,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabel {
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DomainLabel {
    domain: String,
}

/// Boundaries added to the doubling series so that Envoy's default 20 ms filter timeout
/// (and half of it) can be read off the histograms exactly.
const ENVOY_TIMEOUT_BOUNDS: [f64; 2] = [0.01, 0.02];

/// Latency buckets: 50 µs doubling up to ~3.3 s, plus `ENVOY_TIMEOUT_BOUNDS`.
fn latency_buckets() -> Vec<f64> {
    let mut bounds: Vec<f64> = exponential_buckets(0.000_05, 2.0, 17).chain(ENVOY_TIMEOUT_BOUNDS).collect();
    bounds.sort_by(f64::total_cmp);
    bounds.dedup();
    bounds
}

fn latency_histogram() -> Histogram {
    Histogram::new(latency_buckets())
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
        let decisions = Family::<DecisionLabels, Counter>::default();
        let hits = Family::<RuleLabels, Counter>::default();
        let request_duration = latency_histogram();
        let store_requests = Family::<StoreLabels, Counter>::default();
        let store_duration =
            Family::<StoreName, Histogram>::new_with_constructor(latency_histogram as fn() -> Histogram);
        let config_reloads = Family::<ResultLabel, Counter>::default();
        let config_info = Family::<VersionLabel, Gauge>::default();
        let unknown_domain = Counter::default();
        let memory_keys = Gauge::default();
        let memory_max_keys = Gauge::default();
        let memory_evictions = Family::<LossyLabel, Counter>::default();
        let memory_at_limit_evictions = Counter::default();
        let oversized = Family::<ReasonLabel, Counter>::default();
        let local_decisions = Family::<DomainLabel, Counter>::default();
        let breaker_state = Family::<StoreName, Gauge>::default();
        let breaker_opens = Family::<StoreName, Counter>::default();
        let connections_replaced = Family::<ReplacedLabels, Counter>::default();
        let shadow_overrides = Family::<DomainLabel, Counter>::default();
        registry.register(
            "tollgate_shadow_overrides",
            "Answers whose OVER_LIMIT overall code --shadow-mode turned into OK, by domain",
            shadow_overrides.clone(),
        );
        let admin_resets = Family::<DomainLabel, Counter>::default();
        registry.register(
            "tollgate_admin_resets",
            "Descriptors reset through POST /v1/reset, by (configured) domain",
            admin_resets.clone(),
        );
        let series_dropped = Family::<DomainLabel, Counter>::default();
        let over_limit_cache_hits = Family::<StoreName, Counter>::default();
        registry.register(
            "tollgate_over_limit_cache_hits",
            "Charges answered by the over-limit cache without asking Redis (buckets it had \
             just denied), by store",
            over_limit_cache_hits.clone(),
        );
        let config_last_attempt = Gauge::<f64, AtomicU64>::default();
        registry.register(
            "tollgate_config_last_attempt_timestamp_seconds",
            "Unix time of the last config load or reload attempt, successful or not",
            config_last_attempt.clone(),
        );
        let config_last_success = Gauge::<f64, AtomicU64>::default();
        registry.register(
            "tollgate_config_last_success_timestamp_seconds",
            "Unix time of the last successful config load (startup) or reload",
            config_last_success.clone(),
        );
        registry.register(
            "tollgate_metric_series_dropped",
            "Decisions counted under rule=\"<rule>:_other_\" because their domain had \
             --max-detailed-series value label sets already",
            series_dropped.clone(),
        );
        registry.register(
            "tollgate_redis_connections_replaced",
            "Redis connections taken out and made again, by reason: closed (by the server), failed, \
             readonly (a demoted master), no_reply (silent with commands outstanding), renewed",
            connections_replaced.clone(),
        );
        registry.register(
            "tollgate_oversized_requests",
            "Requests past --max-descriptors/--max-entries/--max-value-bytes, answered by failure policy",
            oversized.clone(),
        );
        registry.register(
            "tollgate_failure_local_decisions",
            "Descriptors decided by the in-process limiter of failure_mode: local domains",
            local_decisions.clone(),
        );
        registry.register(
            "tollgate_breaker_state",
            "Store circuit breaker: 0 closed, 1 open, 2 half-open",
            breaker_state.clone(),
        );
        registry.register(
            "tollgate_breaker_opens",
            "Times the store circuit breaker opened",
            breaker_opens.clone(),
        );
        registry.register(
            "tollgate_decisions",
            "Descriptors decided, by domain, rule and result",
            decisions.clone(),
        );
        registry.register(
            "tollgate_hits",
            "Hits requested by decided descriptors, by domain and rule",
            hits.clone(),
        );
        registry.register(
            "tollgate_request_duration_seconds",
            "Time to answer one ShouldRateLimit call",
            request_duration.clone(),
        );
        registry.register(
            "tollgate_store_requests",
            "Store calls, by store and outcome",
            store_requests.clone(),
        );
        registry.register("tollgate_store_duration_seconds", "Store call latency", store_duration.clone());
        registry.register("tollgate_config_reloads", "Config reloads, by result", config_reloads.clone());
        registry.register(
            "tollgate_config_info",
            "The serving config version (value 1)",
            config_info.clone(),
        );
        registry.register(
            "tollgate_unknown_domain_requests",
            "Requests for a domain with no policy",
            unknown_domain.clone(),
        );
        registry.register(
            "tollgate_memory_keys",
            "Buckets held in process memory (the memory store, or the failure_mode: local limiter)",
            memory_keys.clone(),
        );
        registry.register(
            "tollgate_memory_max_keys",
            "Cap on the buckets of tollgate_memory_keys (--memory-max-keys, rounded up to whole shards)",
            memory_max_keys.clone(),
        );
        registry.register(
            "tollgate_memory_evictions",
            "Memory store evictions; lossy=true evicted live state",
            memory_evictions.clone(),
        );
        registry.register(
            "tollgate_memory_at_limit_evictions",
            "Memory store evictions of buckets at or over their limit (a free reset for their owner)",
            memory_at_limit_evictions.clone(),
        );
        // Closed label sets start at 0, so that the first failure is a step `rate()` sees
        // (a series that appears at 1 has no increase) and the families are exported from
        // the start.
        let hot_key_shares = hotkeys::HotKeyShares::register(&mut registry);
        let approx = approx::ApproxMetrics::register(&mut registry);
        let fresh_rules = key_changes::FreshRules::register(&mut registry);
        let leases = lease::LeaseMetrics::register(&mut registry);
        let xds = xds::XdsMetrics::register(&mut registry);
        let trace = trace::TraceMetrics::register(&mut registry);
        let overrides = overrides::OverrideMetrics::register(&mut registry);
        for result in ["success", "failure"] {
            config_reloads.get_or_create(&ResultLabel { result }).inc_by(0);
        }
        for oversize in [Oversize::Descriptors, Oversize::Entries, Oversize::ValueBytes] {
            oversized.get_or_create(&ReasonLabel { reason: oversize.as_str() }).inc_by(0);
        }
        Metrics {
            registry,
            decisions,
            hits,
            request_duration,
            store_requests,
            store_duration,
            config_reloads,
            config_info,
            unknown_domain,
            memory_keys,
            memory_max_keys,
            memory_evictions,
            memory_at_limit_evictions,
            oversized,
            local_decisions,
            breaker_state,
            breaker_opens,
            connections_replaced,
            shadow_overrides,
            series_dropped,
            admin_resets,
            over_limit_cache_hits,
            config_last_attempt,
            config_last_success,
            limits,
            installed: counters::Installed::default(),
            history: history::History::new(),
            hot_keys: crate::telemetry::hotkeys::HotKeys::default(),
            hot_key_shares,
            approx,
            fresh_rules,
            leases,
            xds,
            trace,
            overrides,
        }
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
