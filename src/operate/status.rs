//! The status page of the admin port: `GET /` (HTML) and `GET /v1/status` (JSON), one view.
//!
//! Layout: this file (`Status`: gathers the serving config, the store's state and the
//! server's one-minute history into one value, serialised as the JSON contract; each limit
//! of a rule with several is `limits`'), `page`
//! (renders that value as a self-contained HTML page). The history (decisions per second
//! of each rule, store latency) is kept below, in `crate::telemetry::metrics::history`: the request
//! path feeds it and knows no page. Neither endpoint shows request values, and neither
//! needs the admin token; but the busiest buckets of `crate::telemetry::hotkeys` name buckets (their
//! values hashed, and an unsalted hash of an IP address or a short id reverses), so with an
//! admin token configured they are gathered only for a request that carries it, and on an
//! admin port bound beyond loopback without a token their values are keyed-hashed with a
//! per-process key ([`HotBuckets`], decided by `admin`). Must not be on the request path: gathering takes
//! a lock (the reload error) and walks every rule.

mod limits;
pub mod page;
pub mod rlqs;

pub use self::limits::LimitStatus;
pub use self::rlqs::RlqsStatus;

use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;

use crate::config::rule::PeriodView;
use crate::config::{Domain, Limit, Rule, RuleLimit};
use crate::sources::serving::Live;
use crate::store::breaker::{Breaker, BreakerState};
use crate::store::Store;
use crate::telemetry::hotkeys::{HotKey, Values, ViewKey};
use crate::telemetry::metrics::history::{Minute, Rates};
use crate::telemetry::metrics::Metrics;

/// Everything the status page shows. Field names are the `/v1/status` contract.
#[derive(Debug, Clone, Serialize)]
pub struct Status {
    /// The crate version of this binary.
    pub version: &'static str,
    pub config: ConfigStatus,
    pub store: StoreStatus,
    /// Sorted by name.
    pub domains: Vec<DomainStatus>,
    /// Unix seconds when this view was gathered.
    pub generated_at: u64,
    /// True when the busiest buckets were left out (an admin token is configured and the
    /// request did not carry it): every `domains[].hot_keys` is then empty.
    pub hot_keys_hidden: bool,
    /// True when the busiest buckets' values are keyed-hashed (`value_hmac`): the admin
    /// port is bound beyond loopback without an admin token.
    pub hot_keys_keyed: bool,
    /// The incident overrides in force (`POST /v1/override`), soonest to end first; the
    /// page shows them in a banner.
    pub overrides: Vec<OverrideStatus>,
    /// The RLQS streams of this instance and their busiest buckets.
    pub rlqs: RlqsStatus,
}

/// One incident override in force. Who set it is left out (the page needs no token).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct OverrideStatus {
    /// `all`, or a domain.
    pub scope: String,
    /// `shadow` or `open`.
    pub mode: &'static str,
    /// Unix seconds at which it ends by itself.
    pub expires_at: u64,
    pub expires_in_seconds: u64,
}

/// Whether a view lists each domain's busiest buckets (per-bucket identities).
#[derive(Debug, Clone, Copy)]
pub enum HotBuckets<'k> {
    /// Listed, every request value as its SHA-256 prefix (`value_hash`).
    Shown,
    /// Listed, every request value keyed-hashed with this process's key (`value_hmac`).
    Keyed(&'k ViewKey),
    /// Left out: the caller has not shown the admin token.
    Hidden,
}

impl<'k> HotBuckets<'k> {
    /// How request values show in this view; `None` when hidden.
    pub fn values(self) -> Option<Values<'k>> {
        match self {
            HotBuckets::Shown => Some(Values::Hashed),
            HotBuckets::Keyed(key) => Some(Values::Keyed(key)),
            HotBuckets::Hidden => None,
        }
    }
}

/// The serving config and the latest reload.
#[derive(Debug, Clone, Serialize)]
pub struct ConfigStatus {
    /// Content hash of the serving config (as in `/rlconfig` and `tollgate_config_info`).
    pub version: String,
    /// Unix seconds when the serving config was loaded.
    pub loaded_at: u64,
    /// The errors of the latest reload attempt if it failed (the previous config keeps
    /// serving); `null` once a reload succeeds.
    pub last_error: Option<String>,
    /// Unix seconds of that failed attempt.
    pub last_error_at: Option<u64>,
    /// `files` or `xds`.
    pub source: &'static str,
    /// With the xDS source: the server, node, stream state, acknowledged version and last
    /// rejection; absent with files.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub xds: Option<crate::sources::serving::XdsState>,
}

/// The store's state.
#[derive(Debug, Clone, Serialize)]
pub struct StoreStatus {
    /// `memory`, `redis`, `redis_cluster` or `redis_sentinel` (the metrics' `store` label).
    pub kind: &'static str,
    pub healthy: bool,
    /// `closed`, `open` or `half_open`; `null` for a store without a breaker (memory,
    /// Redis Cluster).
    pub breaker: Option<&'static str>,
    /// 99th percentile of store call latency over the last minute, in milliseconds (the
    /// upper bound of its histogram bucket: at most 25 % high); `null` without a call.
    pub p99_ms: Option<f64>,
    /// Redacted URL(s) for Redis, key count for memory (as `/rlconfig` shows).
    pub detail: String,
    /// Approximate mode's estimates, where this store syncs them (every Redis topology).
    pub approximate: Option<ApproxStatus>,
}

/// Approximate mode's state on this instance (`store::approx`).
#[derive(Debug, Clone, Serialize)]
pub struct ApproxStatus {
    /// Buckets held per tier.
    pub idle: usize,
    pub low: usize,
    pub normal: usize,
    pub hot: usize,
    /// The `N` of the share rule: the most instances a heartbeat counted in the last 30 s.
    pub instances: u64,
    /// Instances the last heartbeat counted.
    pub live_instances: u64,
    /// Whether approximate domains are decided locally (false: warming up, decided exactly).
    pub ready: bool,
    /// Seconds since Redis last answered a sync; `null`: never.
    pub last_sync_seconds_ago: Option<f64>,
    /// Buckets due that the last wake left waiting, and the age of the oldest increment
    /// not yet written (seconds).
    pub backlog_buckets: u64,
    pub backlog_oldest_seconds: f64,
}

/// One domain's policy and traffic.
#[derive(Debug, Clone, Serialize)]
pub struct DomainStatus {
    pub name: String,
    /// `open`, `closed` or `local`.
    pub failure_mode: &'static str,
    /// `per_descriptor` or `all_or_nothing`.
    pub charge: &'static str,
    /// `exact` or `approximate` (decided locally from estimates synced in the background).
    pub consistency: &'static str,
    /// In file order.
    pub rules: Vec<RuleStatus>,
    /// The [`HOT_KEYS`] busiest buckets over the last minute (`crate::telemetry::hotkeys`), every
    /// request value shown as its hash; empty when [`HotBuckets::Hidden`].
    pub hot_keys: Vec<HotKey>,
}

/// Busiest buckets shown per domain.
pub const HOT_KEYS: usize = 10;

/// One rule: its first limit's numbers at the top level, and its decisions per second.
#[derive(Debug, Clone, Serialize)]
pub struct RuleStatus {
    /// The rule's label, as in metrics: its `name`, else its config path.
    pub rule: String,
    /// `requests_per_unit` of the first limit; `null` for `unlimited`.
    pub limit: Option<u64>,
    /// The first limit's unit; `null` for `unlimited`.
    pub unit: Option<&'static str>,
    /// The first limit's `unit_multiplier` (1 when absent); `null` for `unlimited`.
    pub unit_multiplier: Option<u64>,
    /// The first limit's effective algorithm; `null` for `unlimited`.
    pub algorithm: Option<&'static str>,
    pub unlimited: bool,
    pub shadow_mode: bool,
    /// The first limit's `rollout` (the share of its buckets enforced, 1 when absent);
    /// `null` for `unlimited`.
    pub rollout: Option<f64>,
    /// The first limit's `penalty` in seconds (0: none); `null` for `unlimited`.
    pub penalty_seconds: Option<u64>,
    /// The first limit's calendar period and next reset; absent unless it has a `calendar`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub calendar: Option<PeriodView>,
    /// Every limit, only for a rule with several (`rate_limits`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub limits: Vec<LimitStatus>,
    /// Decisions per second over the last minute (each decided descriptor once, whichever
    /// of its limits decided it).
    pub per_second: PerSecond,
    /// Per-second counts of the last minute, oldest first (for the page's chart).
    #[serde(skip)]
    pub minute: Minute,
    /// On a Redis store, which path decides this rule's consumes: `plain` or `lua`
    /// (`--redis-windows`, see `rlconfig::windows_path`); `null` on the memory store.
    pub redis_path: Option<&'static str>,
}

/// Decisions per second split by how they were decided, rounded to thousandths.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct PerSecond {
    /// Within or near the limit, shadow mode, unlimited.
    pub ok: f64,
    pub over_limit: f64,
    /// By the failure policy: failure_open, failure_closed, or the local fallback.
    pub failure: f64,
}

impl From<Rates> for PerSecond {
    fn from(rates: Rates) -> Self {
        let round = |x: f64| (x * 1000.0).round() / 1000.0;
        PerSecond { ok: round(rates.ok), over_limit: round(rates.over_limit), failure: round(rates.failure) }
    }
}

impl Status {
    /// With the incident overrides in force now.
    pub fn with_overrides(mut self, overrides: &crate::sources::overrides::Overrides) -> Status {
        let now = crate::sources::overrides::now_ms();
        self.overrides = overrides
            .active()
            .iter()
            .map(|o| OverrideStatus {
                scope: o.scope.clone(),
                mode: o.mode.as_str(),
                expires_at: o.expires_at_ms.div_ceil(1000),
                expires_in_seconds: o.expires_at_ms.saturating_sub(now).div_ceil(1000),
            })
            .collect();
        self
    }

    /// The view now, with or without the busiest buckets.
    pub fn gather(live: &Live, store: &Store, metrics: &Metrics, hot: HotBuckets<'_>) -> Status {
        Status::gather_at(live, store, metrics, metrics.history().now(), hot)
    }

    /// The view with the history's minute ending before second `now` (`History::now`).
    pub fn gather_at(live: &Live, store: &Store, metrics: &Metrics, now: u64, hot: HotBuckets<'_>) -> Status {
        let values = hot.values();
        let active = live.load();
        let snapshot = &active.snapshot;
        let history = metrics.history();
        let mut domains: Vec<&Domain> = snapshot.domains.values().collect();
        domains.sort_by(|a, b| a.name.cmp(&b.name));
        let domains = domains
            .into_iter()
            .map(|domain| {
                let rings = active.history.domain(&domain.name).unwrap_or_default();
                let rules = domain
                    .rules
                    .iter()
                    .map(|rule| {
                        let minute = rings.get(rule.id.0).map_or_else(Minute::empty, |ring| ring.minute(now));
                        let mut status = rule_status(rule, minute);
                        status.redis_path =
                            crate::operate::rlconfig::windows_path(domain, rule, store.windows());
                        status
                    })
                    .collect();
                let sketch = active.hot_keys.domain(&domain.name).zip(values);
                let hot_keys = sketch.map_or_else(Vec::new, |(sketch, values)| {
                    let leased = |key: &str| crate::telemetry::hotkeys::is_leased(store, key);
                    crate::telemetry::hotkeys::view(domain, sketch, now, HOT_KEYS, values, leased).keys
                });
                DomainStatus {
                    name: domain.name.clone(),
                    failure_mode: domain.failure_mode.as_str(),
                    charge: domain.charge.as_str(),
                    consistency: domain.consistency.as_str(),
                    rules,
                    hot_keys,
                }
            })
            .collect();
        let last_error = live.last_error();
        let xds = live.xds_state();
        Status {
            version: env!("CARGO_PKG_VERSION"),
            config: ConfigStatus {
                version: snapshot.version.clone(),
                loaded_at: unix(snapshot.loaded_at),
                last_error_at: last_error.as_ref().map(|e| unix(e.at)),
                last_error: last_error.map(|e| e.message),
                source: if xds.is_some() { "xds" } else { "files" },
                xds,
            },
            store: store_status(store, history.store_p99_ms_at(now)),
            domains,
            generated_at: unix(SystemTime::now()),
            hot_keys_hidden: values.is_none(),
            hot_keys_keyed: matches!(hot, HotBuckets::Keyed(_)),
            overrides: Vec::new(),
            rlqs: RlqsStatus::default(),
        }
    }
}

fn rule_status(rule: &Rule, minute: Minute) -> RuleStatus {
    let now_us = crate::store::memory::now_us();
    let first = rule.limits().first();
    let limits = match rule.limits() {
        [] | [_] => Vec::new(),
        several => several.iter().map(|limit| LimitStatus::of(rule, limit, now_us)).collect(),
    };
    RuleStatus {
        rule: rule.label().to_string(),
        limit: first.map(|l| l.params.limit),
        unit: first.map(|l| l.unit.as_str()),
        unit_multiplier: first.map(|l: &Limit| l.multiplier),
        algorithm: first.map(|l| l.params.algorithm.as_str()),
        unlimited: matches!(rule.limit, RuleLimit::Unlimited),
        shadow_mode: rule.shadow_mode,
        rollout: first.map(|l| l.rollout.share()),
        penalty_seconds: first.map(Limit::penalty_seconds),
        calendar: first.and_then(|l| l.calendar_view(now_us)),
        limits,
        per_second: minute.per_second().into(),
        minute,
        redis_path: None,
    }
}

fn store_status(store: &Store, p99_ms: Option<f64>) -> StoreStatus {
    let (healthy, breaker, detail) = match store {
        Store::Memory(memory) => (true, None, format!("{} keys", memory.stats().keys)),
        Store::Redis(redis) => (redis.client().is_healthy(), redis.breaker(), redis.client().redacted_url()),
        Store::Cluster(cluster) => {
            (cluster.client().is_healthy(), cluster.breaker(), cluster.client().redacted_nodes())
        }
        Store::Sentinel(sentinel) => {
            (sentinel.client().is_healthy(), sentinel.breaker(), sentinel.client().description())
        }
    };
    let approximate = store.approx().map(|approx| {
        let [idle, low, normal, hot] = approx.tiers();
        let now = crate::store::memory::now_us();
        ApproxStatus {
            idle,
            low,
            normal,
            hot,
            instances: approx.instances(),
            live_instances: approx.live_instances(),
            ready: approx.is_ready(),
            last_sync_seconds_ago: approx.last_sync().map(|at| now.saturating_sub(at) as f64 / 1e6),
            backlog_buckets: approx.backlog(now).0,
            backlog_oldest_seconds: approx.backlog(now).1 as f64 / 1e6,
        }
    });
    StoreStatus {
        kind: store.name(),
        healthy,
        breaker: breaker.map(breaker_state),
        p99_ms,
        detail,
        approximate,
    }
}

fn breaker_state(breaker: &Breaker) -> &'static str {
    match breaker.state() {
        BreakerState::Closed => "closed",
        BreakerState::Open => "open",
        BreakerState::HalfOpen => "half_open",
    }
}

fn unix(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests;
