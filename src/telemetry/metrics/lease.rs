//! Leases' metrics (`store::lease`): the returns of unused tokens given up, by why, and the
//! returns queued. Pushed by the lease sweeper on each tick (a lease time / 8), so a scrape
//! sees them at most one tick late. Every label is a fixed word.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::store::lease::LeaseStats;

use super::mirror::set_counter;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DroppedLabels {
    store: &'static str,
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StoreLabel {
    store: &'static str,
}

/// The families of leases.
#[derive(Debug)]
pub struct LeaseMetrics {
    returns_dropped: Family<DroppedLabels, Counter>,
    returns_queued: Family<StoreLabel, Gauge>,
}

impl LeaseMetrics {
    /// Registers every family in `registry`.
    pub fn register(registry: &mut Registry) -> LeaseMetrics {
        let metrics = LeaseMetrics { returns_dropped: Family::default(), returns_queued: Family::default() };
        registry.register(
            "tollgate_lease_returns_dropped",
            "Returns of a lease's unused tokens given up, by reason: full (the queue held \
             2 x the lease keys), refilled (GCRA: queued as long as its tokens take to refill), \
             window_end (past a quarter lease time before the window's end), failed (the refund \
             failed and may have run)",
            metrics.returns_dropped.clone(),
        );
        registry.register(
            "tollgate_lease_returns_queued",
            "Returns of unused lease tokens waiting to be sent (the breaker open, Redis overloaded)",
            metrics.returns_queued.clone(),
        );
        metrics
    }

    /// Brings the families up to `stats` of the lease table of `store`.
    pub fn set(&self, store: &'static str, stats: &LeaseStats) {
        let dropped = stats.dropped;
        let counts = [
            ("full", dropped.full),
            ("refilled", dropped.refilled),
            ("window_end", dropped.window_end),
            ("failed", dropped.failed),
        ];
        for (reason, value) in counts {
            set_counter(&self.returns_dropped.get_or_create(&DroppedLabels { store, reason }), value);
        }
        let queued = i64::try_from(stats.returns_queued).unwrap_or(i64::MAX);
        self.returns_queued.get_or_create(&StoreLabel { store }).set(queued);
    }
}
