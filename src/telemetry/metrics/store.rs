//! The store's metrics: each call's outcome and latency (also fed to the one-minute
//! history), and the gauges and counters refreshed before each scrape from the memory
//! store, the breaker, the Redis connections, the over-limit cache, leases and
//! approximate mode.

use crate::store::approx::Approx;
use crate::store::lease::LeaseStats;
use crate::store::redis::link::Replaced;
use crate::store::MemoryStore;

use super::mirror::set_counter;
use super::{LossyLabel, Metrics, ReplacedLabels, StoreLabels, StoreName};

/// The `outcome` values of `tollgate_store_requests_total` (`ok`, and `StoreError::kind`).
const STORE_OUTCOMES: [&str; 6] =
    ["ok", "timeout", "unavailable", "server_error", "circuit_open", "overloaded"];

impl Metrics {
    /// One store call and its outcome (`ok`, `timeout`, `unavailable`, `server_error`).
    pub fn observe_store(&self, store: &'static str, outcome: &'static str, seconds: f64) {
        self.store_requests.get_or_create(&StoreLabels { store, outcome }).inc();
        self.store_duration.get_or_create(&StoreName { store }).observe(seconds);
        self.history.observe_store(seconds);
    }

    /// Exports `store`'s call counters (every outcome) and its latency histogram at 0, so
    /// that they exist before the first call. Refreshed before each scrape (idempotent).
    pub fn export_store(&self, store: &'static str) {
        for outcome in STORE_OUTCOMES {
            self.store_requests.get_or_create(&StoreLabels { store, outcome }).inc_by(0);
        }
        let _ = self.store_duration.get_or_create(&StoreName { store });
    }

    /// Leases' metrics of `store`, pushed by the lease sweeper on each tick.
    pub fn set_leases(&self, store: &'static str, stats: &LeaseStats) {
        self.leases.set(store, stats);
    }

    /// Approximate mode's metrics, refreshed before each scrape.
    pub fn set_approx(&self, table: &Approx) {
        self.approx.set(table);
    }

    /// Memory store gauges and counters, refreshed before each scrape from its `stats()`
    /// and `capacity()`.
    pub fn set_memory(&self, memory: &MemoryStore) {
        let stats = memory.stats();
        self.memory_keys.set(i64::try_from(stats.keys).unwrap_or(i64::MAX));
        self.memory_max_keys.set(i64::try_from(memory.capacity()).unwrap_or(i64::MAX));
        set_counter(
            &self.memory_evictions.get_or_create(&LossyLabel { lossy: "false" }),
            stats.lossless_evictions,
        );
        set_counter(
            &self.memory_evictions.get_or_create(&LossyLabel { lossy: "true" }),
            stats.lossy_evictions,
        );
        set_counter(&self.memory_at_limit_evictions, stats.at_limit_evictions);
        self.memory_reservation_records.set(i64::try_from(stats.reservation_records).unwrap_or(i64::MAX));
        set_counter(&self.memory_unrecorded_reservations, stats.unrecorded_reservations);
    }

    /// Charges the over-limit cache of a Redis store answered, refreshed before each scrape
    /// from its `local_answers()`.
    pub fn set_over_limit_cache_hits(&self, store: &'static str, hits: u64) {
        set_counter(&self.over_limit_cache_hits.get_or_create(&StoreName { store }), hits);
    }

    /// Days until the Redis client certificate (as last read) expires, refreshed before
    /// each scrape; absent without one.
    pub fn set_redis_client_cert(&self, store: &'static str, not_after: i64, now: i64) {
        let days = not_after.saturating_sub(now).div_euclid(86_400);
        self.redis_client_cert_days_left.get_or_create(&StoreName { store }).set(days);
    }

    /// Breaker gauges, refreshed before each scrape.
    pub fn set_breaker(&self, store: &'static str, state: i64, opens: u64) {
        self.breaker_state.get_or_create(&StoreName { store }).set(state);
        set_counter(&self.breaker_opens.get_or_create(&StoreName { store }), opens);
    }

    /// Connection replacement counts of a Redis store, refreshed before each scrape.
    pub fn set_replaced(&self, store: &'static str, replaced: Replaced) {
        let counts = [
            ("closed", replaced.closed),
            ("failed", replaced.failed),
            ("readonly", replaced.readonly),
            ("no_reply", replaced.no_reply),
            ("renewed", replaced.renewed),
        ];
        for (reason, value) in counts {
            set_counter(&self.connections_replaced.get_or_create(&ReplacedLabels { store, reason }), value);
        }
    }
}
