//! Approximate mode's metrics (`consistency: approximate`, `store::approx`), refreshed
//! before each scrape from the estimates' own counters. Every label is a fixed word.

use std::sync::atomic::{AtomicU64, Ordering};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::store::approx::Approx;

use super::mirror::set_counter;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabel {
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OpLabel {
    op: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TierLabel {
    tier: &'static str,
}

/// The families of approximate mode.
#[derive(Debug)]
pub struct ApproxMetrics {
    syncs: Family<ResultLabel, Counter>,
    sync_keys: Family<OpLabel, Counter>,
    buckets: Family<TierLabel, Gauge>,
    instances: Gauge,
    last_sync: Gauge<f64, AtomicU64>,
    stale: Counter,
    share_denials: Counter,
    dropped: Counter,
    evictions: Counter,
    sync_restarts: Counter,
    first_reads: Family<ResultLabel, Counter>,
    live: Gauge,
    ready: Gauge,
    backlog: Gauge,
    backlog_oldest: Gauge<f64, AtomicU64>,
}

impl ApproxMetrics {
    /// Registers every family in `registry`.
    pub fn register(registry: &mut Registry) -> ApproxMetrics {
        let metrics = ApproxMetrics {
            syncs: Family::default(),
            sync_keys: Family::default(),
            buckets: Family::default(),
            instances: Gauge::default(),
            last_sync: Gauge::default(),
            stale: Counter::default(),
            share_denials: Counter::default(),
            dropped: Counter::default(),
            evictions: Counter::default(),
            sync_restarts: Counter::default(),
            first_reads: Family::default(),
            live: Gauge::default(),
            ready: Gauge::default(),
            backlog: Gauge::default(),
            backlog_oldest: Gauge::default(),
        };
        metrics.register_sync(registry);
        metrics.register_health(registry);
        metrics
    }

    /// The sync task's and the heartbeat's families (registered first, in this order).
    fn register_sync(&self, registry: &mut Registry) {
        registry.register(
            "tollgate_approximate_syncs",
            "Sync calls of approximate mode's background task, by result (ok, failed)",
            self.syncs.clone(),
        );
        registry.register(
            "tollgate_approximate_sync_keys",
            "Buckets sent by approximate mode's sync: with increments (write) or only to be read (read)",
            self.sync_keys.clone(),
        );
        registry.register(
            "tollgate_approximate_buckets",
            "Approximate buckets held by this instance, by tier (idle, low, normal, hot)",
            self.buckets.clone(),
        );
        registry.register(
            "tollgate_approximate_instances",
            "The N of approximate mode's share rule: the most instances a heartbeat counted in the last 30 s",
            self.instances.clone(),
        );
        registry.register(
            "tollgate_approximate_live_instances",
            "Instances the last heartbeat counted (each beat within the liveness span)",
            self.live.clone(),
        );
        registry.register(
            "tollgate_approximate_ready",
            "1 once the heartbeat has counted the other instances and approximate domains are decided locally; 0 while they are decided exactly",
            self.ready.clone(),
        );
        registry.register(
            "tollgate_approximate_first_reads",
            "Buckets read on a request's path before their first local decision, by result (ok, failed: held to a share)",
            self.first_reads.clone(),
        );
        registry.register(
            "tollgate_approximate_backlog_buckets",
            "Buckets with increments due that the last sync wake left waiting (its budget was spent)",
            self.backlog.clone(),
        );
        registry.register(
            "tollgate_approximate_backlog_oldest_seconds",
            "Age of the oldest admitted increment not yet written to Redis",
            self.backlog_oldest.clone(),
        );
    }

    /// The families of its health: the last sync, stale decisions, share denials, dropped
    /// increments, evictions, sync restarts (registered after the others, in this order).
    fn register_health(&self, registry: &mut Registry) {
        registry.register(
            "tollgate_approximate_last_sync_timestamp_seconds",
            "Unix time of the last approximate sync Redis answered (0: none yet)",
            self.last_sync.clone(),
        );
        registry.register(
            "tollgate_approximate_stale_decisions",
            "Charges of approximate domains answered by the failure policy: syncs had failed past --sync-staleness-ms",
            self.stale.clone(),
        );
        registry.register(
            "tollgate_approximate_share_denials",
            "Charges denied because this instance had spent its share of the headroom since the bucket's last sync",
            self.share_denials.clone(),
        );
        registry.register(
            "tollgate_approximate_dropped_increments",
            "Admitted hits never written to Redis: evicted buckets' increments past the bound (should stay 0)",
            self.dropped.clone(),
        );
        registry.register(
            "tollgate_approximate_evictions",
            "Approximate buckets dropped to make room (their unsent increments are kept)",
            self.evictions.clone(),
        );
        registry.register(
            "tollgate_approximate_sync_restarts",
            "Times approximate mode's sync task (which beats the heartbeat) ended or panicked and was started again; approximate domains are decided exactly until its heartbeat answers again",
            self.sync_restarts.clone(),
        );
    }

    /// Copies the table's counters and gauges.
    pub fn set(&self, approx: &Approx) {
        let c = &approx.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        set_counter(&self.syncs.get_or_create(&ResultLabel { result: "ok" }), get(&c.syncs_ok));
        set_counter(&self.syncs.get_or_create(&ResultLabel { result: "failed" }), get(&c.syncs_failed));
        set_counter(&self.sync_keys.get_or_create(&OpLabel { op: "write" }), get(&c.keys_written));
        set_counter(&self.sync_keys.get_or_create(&OpLabel { op: "read" }), get(&c.keys_read));
        set_counter(&self.stale, get(&c.stale));
        set_counter(&self.share_denials, get(&c.share_denials));
        set_counter(&self.dropped, get(&c.dropped_increments));
        set_counter(&self.evictions, get(&c.evictions));
        set_counter(&self.sync_restarts, get(&c.sync_restarts));
        set_counter(&self.first_reads.get_or_create(&ResultLabel { result: "ok" }), get(&c.first_reads_ok));
        set_counter(
            &self.first_reads.get_or_create(&ResultLabel { result: "failed" }),
            get(&c.first_reads_failed),
        );
        self.live.set(i64::try_from(approx.live_instances()).unwrap_or(i64::MAX));
        self.ready.set(i64::from(approx.is_ready()));
        let (waiting, oldest_us) = approx.backlog(crate::store::memory::now_us());
        self.backlog.set(i64::try_from(waiting).unwrap_or(i64::MAX));
        self.backlog_oldest.set(oldest_us as f64 / 1e6);
        for (tier, count) in ["idle", "low", "normal", "hot"].into_iter().zip(approx.tiers()) {
            self.buckets.get_or_create(&TierLabel { tier }).set(i64::try_from(count).unwrap_or(i64::MAX));
        }
        self.instances.set(i64::try_from(approx.instances()).unwrap_or(i64::MAX));
        let last = approx.last_sync().map_or(0.0, |us| us as f64 / 1e6);
        self.last_sync.set(last);
    }
}
