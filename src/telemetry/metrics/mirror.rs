//! Counters that mirror a count kept elsewhere (the memory store's evictions, the breaker's
//! opens, approximate mode's syncs, leases' returns…), brought up to it before a scrape.
//! Imports nothing of the crate: the families that mirror a count use it.

use std::sync::atomic::AtomicU64;

use prometheus_client::metrics::counter::Counter;

/// Brings a counter that mirrors an external monotonic count up to `value`.
pub(super) fn set_counter(counter: &Counter<u64, AtomicU64>, value: u64) {
    let current = counter.get();
    if value > current {
        counter.inc_by(value - current);
    }
}
