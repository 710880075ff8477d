//! The families `Metrics` holds itself (the others register in their own files), with
//! their label sets and latency buckets. Registered in a fixed order (`Metrics::with_limits`
//! calls the groups in turn): the exposition lists them in it.

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct DecisionLabels {
    pub domain: String,
    pub rule: String,
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct RuleLabels {
    pub domain: String,
    pub rule: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct StoreLabels {
    pub store: &'static str,
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct StoreName {
    pub store: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct ReplacedLabels {
    pub store: &'static str,
    pub reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct ResultLabel {
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct VersionLabel {
    pub version: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct LossyLabel {
    pub lossy: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct ReasonLabel {
    pub reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct DomainLabel {
    pub domain: String,
}

/// Boundaries added to the doubling series so that Envoy's default 20 ms filter timeout
/// (and half of it) can be read off the histograms exactly.
const ENVOY_TIMEOUT_BOUNDS: [f64; 2] = [0.01, 0.02];

/// Latency buckets: 50 µs doubling up to ~3.3 s, plus `ENVOY_TIMEOUT_BOUNDS`.
pub(super) fn latency_buckets() -> Vec<f64> {
    let mut bounds: Vec<f64> = exponential_buckets(0.000_05, 2.0, 17).chain(ENVOY_TIMEOUT_BOUNDS).collect();
    bounds.sort_by(f64::total_cmp);
    bounds.dedup();
    bounds
}

pub(super) fn latency_histogram() -> Histogram {
    Histogram::new(latency_buckets())
}

/// The operator's families: shadow mode's overrides, resets, the over-limit cache, and
/// when the config was last loaded.
#[derive(Debug)]
pub(super) struct Operator {
    pub shadow_overrides: Family<DomainLabel, Counter>,
    pub admin_resets: Family<DomainLabel, Counter>,
    pub over_limit_cache_hits: Family<StoreName, Counter>,
    pub config_last_attempt: Gauge<f64, AtomicU64>,
    pub config_last_success: Gauge<f64, AtomicU64>,
}

impl Operator {
    /// Creates the families and registers them, in this order.
    pub fn register(registry: &mut Registry) -> Operator {
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
        Operator {
            shadow_overrides,
            admin_resets,
            over_limit_cache_hits,
            config_last_attempt,
            config_last_success,
        }
    }
}

/// The families of the request path's guards: dropped series, replaced Redis connections,
/// oversized requests, local decisions, the breaker.
#[derive(Debug)]
pub(super) struct Guards {
    pub series_dropped: Family<DomainLabel, Counter>,
    pub connections_replaced: Family<ReplacedLabels, Counter>,
    pub oversized: Family<ReasonLabel, Counter>,
    pub local_decisions: Family<DomainLabel, Counter>,
    pub breaker_state: Family<StoreName, Gauge>,
    pub breaker_opens: Family<StoreName, Counter>,
    pub redis_client_cert_days_left: Family<StoreName, Gauge>,
}

impl Guards {
    /// Creates the families and registers them, in this order.
    pub fn register(registry: &mut Registry) -> Guards {
        let series_dropped = Family::<DomainLabel, Counter>::default();
        registry.register(
            "tollgate_metric_series_dropped",
            "Decisions counted under rule=\"<rule>:_other_\" because their domain had \
             --max-detailed-series value label sets already",
            series_dropped.clone(),
        );
        let connections_replaced = Family::<ReplacedLabels, Counter>::default();
        registry.register(
            "tollgate_redis_connections_replaced",
            "Redis connections taken out and made again, by reason: closed (by the server), failed, \
             readonly (a demoted master), no_reply (silent with commands outstanding), renewed",
            connections_replaced.clone(),
        );
        let oversized = Family::<ReasonLabel, Counter>::default();
        registry.register(
            "tollgate_oversized_requests",
            "Requests past --max-descriptors/--max-entries/--max-value-bytes, answered by failure policy",
            oversized.clone(),
        );
        let local_decisions = Family::<DomainLabel, Counter>::default();
        registry.register(
            "tollgate_failure_local_decisions",
            "Descriptors decided by the in-process limiter of failure_mode: local domains",
            local_decisions.clone(),
        );
        let breaker_state = Family::<StoreName, Gauge>::default();
        registry.register(
            "tollgate_breaker_state",
            "Store circuit breaker: 0 closed, 1 open, 2 half-open",
            breaker_state.clone(),
        );
        let breaker_opens = Family::<StoreName, Counter>::default();
        registry.register(
            "tollgate_breaker_opens",
            "Times the store circuit breaker opened",
            breaker_opens.clone(),
        );
        let redis_client_cert_days_left = Family::<StoreName, Gauge>::default();
        registry.register(
            "tollgate_redis_client_cert_days_left",
            "Whole days until the client certificate presented to Redis expires (negative: expired); only with one",
            redis_client_cert_days_left.clone(),
        );
        Guards {
            series_dropped,
            connections_replaced,
            oversized,
            local_decisions,
            breaker_state,
            breaker_opens,
            redis_client_cert_days_left,
        }
    }
}

/// The families of every answer: decisions, hits, latencies, store calls, config reloads.
#[derive(Debug)]
pub(super) struct Answers {
    pub decisions: Family<DecisionLabels, Counter>,
    pub hits: Family<RuleLabels, Counter>,
    pub request_duration: Histogram,
    pub store_requests: Family<StoreLabels, Counter>,
    pub store_duration: Family<StoreName, Histogram>,
    pub config_reloads: Family<ResultLabel, Counter>,
}

impl Answers {
    /// Creates the families and registers them, in this order.
    pub fn register(registry: &mut Registry) -> Answers {
        let decisions = Family::<DecisionLabels, Counter>::default();
        registry.register(
            "tollgate_decisions",
            "Descriptors decided, by domain, rule and result",
            decisions.clone(),
        );
        let hits = Family::<RuleLabels, Counter>::default();
        registry.register(
            "tollgate_hits",
            "Hits requested by decided descriptors, by domain and rule",
            hits.clone(),
        );
        let request_duration = latency_histogram();
        registry.register(
            "tollgate_request_duration_seconds",
            "Time to answer one ShouldRateLimit call",
            request_duration.clone(),
        );
        let store_requests = Family::<StoreLabels, Counter>::default();
        registry.register(
            "tollgate_store_requests",
            "Store calls, by store and outcome",
            store_requests.clone(),
        );
        let store_duration =
            Family::<StoreName, Histogram>::new_with_constructor(latency_histogram as fn() -> Histogram);
        registry.register("tollgate_store_duration_seconds", "Store call latency", store_duration.clone());
        let config_reloads = Family::<ResultLabel, Counter>::default();
        registry.register("tollgate_config_reloads", "Config reloads, by result", config_reloads.clone());
        Answers { decisions, hits, request_duration, store_requests, store_duration, config_reloads }
    }
}

/// The families of what the server holds: the config version, unknown domains, the
/// memory store.
#[derive(Debug)]
pub(super) struct Holding {
    pub config_info: Family<VersionLabel, Gauge>,
    pub unknown_domain: Counter,
    pub memory_keys: Gauge,
    pub memory_max_keys: Gauge,
    pub memory_evictions: Family<LossyLabel, Counter>,
    pub memory_at_limit_evictions: Counter,
    pub memory_reservation_records: Gauge,
    pub memory_unrecorded_reservations: Counter,
}

impl Holding {
    /// Creates the families and registers them, in this order.
    pub fn register(registry: &mut Registry) -> Holding {
        let config_info = Family::<VersionLabel, Gauge>::default();
        registry.register(
            "tollgate_config_info",
            "The serving config version (value 1)",
            config_info.clone(),
        );
        let unknown_domain = Counter::default();
        registry.register(
            "tollgate_unknown_domain_requests",
            "Requests for a domain with no policy",
            unknown_domain.clone(),
        );
        let memory_keys = Gauge::default();
        registry.register(
            "tollgate_memory_keys",
            "Buckets held in process memory (the memory store, or the failure_mode: local limiter)",
            memory_keys.clone(),
        );
        let memory_max_keys = Gauge::default();
        registry.register(
            "tollgate_memory_max_keys",
            "Cap on the buckets of tollgate_memory_keys (--memory-max-keys, rounded up to whole shards)",
            memory_max_keys.clone(),
        );
        let memory_evictions = Family::<LossyLabel, Counter>::default();
        registry.register(
            "tollgate_memory_evictions",
            "Memory store evictions; lossy=true evicted live state",
            memory_evictions.clone(),
        );
        let memory_at_limit_evictions = Counter::default();
        registry.register(
            "tollgate_memory_at_limit_evictions",
            "Memory store evictions of buckets at or over their limit (a free reset for their owner)",
            memory_at_limit_evictions.clone(),
        );
        let memory_reservation_records = Gauge::default();
        registry.register(
            "tollgate_memory_reservation_records",
            "Reservation records held in process memory (capped at tollgate_memory_max_keys)",
            memory_reservation_records.clone(),
        );
        let memory_unrecorded_reservations = Counter::default();
        registry.register(
            "tollgate_memory_reservations_unrecorded",
            "Reservation calls decided without keeping their record: the records were at the cap",
            memory_unrecorded_reservations.clone(),
        );
        Holding {
            config_info,
            unknown_domain,
            memory_keys,
            memory_max_keys,
            memory_evictions,
            memory_at_limit_evictions,
            memory_reservation_records,
            memory_unrecorded_reservations,
        }
    }
}
