//! The way back: the sweeper's scan, unused tokens queued and handed out as refunds,
//! and eviction (whose tokens go back too). Part of the lease table; no I/O.

use std::sync::atomic::Ordering;
use std::time::Duration;

use indexmap::IndexMap;
use tokio::time::Instant;

use crate::algorithm::Decision;

use super::{lock, Entry, LeaseTable, Return, EVICTION_SAMPLE, SWEEP_SCAN};
use crate::store::StoreError;

impl LeaseTable {
    /// One sweeper tick: ends expired leases and drops idle keys (at most [`SWEEP_SCAN`]
    /// per shard), then hands out up to `budget` returns still in time (the others are
    /// forfeited). `all`: end every lease (shutdown).
    pub fn sweep(&self, now: Instant, budget: usize, all: bool) -> Vec<Return> {
        let idle = self.settings.time * 2;
        for (shard, cursor) in self.shards.iter().zip(self.cursors.iter()) {
            let mut shard = lock(shard);
            let mut cursor = lock(cursor);
            let scan = if all { shard.len() } else { SWEEP_SCAN.min(shard.len()) };
            for _ in 0..scan {
                if *cursor >= shard.len() {
                    *cursor = 0;
                }
                let Some((key, entry)) = shard.get_index_mut(*cursor) else { break };
                let key = key.to_string();
                if all || entry.lease.is_some_and(|l| now >= l.expires) {
                    self.retire(&key, entry, now);
                }
                let quiet = entry.lease.is_none()
                    && entry.refill.is_none()
                    && now.saturating_duration_since(entry.meter.start) >= idle;
                if quiet {
                    shard.swap_remove_index(*cursor);
                } else {
                    *cursor += 1;
                }
            }
        }
        let mut queue = lock(&self.returns);
        let take = budget.min(queue.len());
        let mut out: Vec<Return> = queue.drain(..take).collect();
        drop(queue);
        out.retain(|r| {
            let in_time = r.by.is_none_or(|by| now < by);
            if !in_time {
                self.forfeit(r.tokens);
            }
            in_time
        });
        out
    }

    /// The answer to a return: counted, or queued again if it was never sent.
    pub fn returned(&self, ret: Return, result: &Result<Decision, StoreError>) {
        match result {
            Ok(_) => {
                self.returned.fetch_add(ret.tokens, Ordering::Relaxed);
            }
            Err(StoreError::CircuitOpen | StoreError::Overloaded) => self.queue(ret),
            Err(_) => self.forfeit(ret.tokens),
        }
    }

    /// Returns queued and not yet handed out.
    pub fn pending_returns(&self) -> usize {
        lock(&self.returns).len()
    }

    /// Ends `entry`'s lease: unused tokens are queued to go back.
    pub(super) fn retire(&self, key: &str, entry: &mut Entry, now: Instant) {
        let Some(lease) = entry.lease.take() else { return };
        if lease.tokens == 0 {
            return;
        }
        let by = lease.window_end.map(|end| return_by(end, self.settings.time));
        if by.is_some_and(|by| now >= by) {
            // The window is ending: a late refund would credit the next one.
            self.forfeit(lease.tokens);
            return;
        }
        self.queue(Return { key: key.to_string(), params: entry.params, tokens: lease.tokens, by });
    }

    pub(super) fn queue(&self, ret: Return) {
        let mut queue = lock(&self.returns);
        // Bounded: past twice the key cap, the oldest return is dropped (its tokens come
        // back when the bucket refills).
        if queue.len() >= self.settings.max_keys.saturating_mul(2).max(16) {
            let oldest = queue.remove(0);
            self.forfeit(oldest.tokens);
        }
        queue.push(ret);
    }

    pub(super) fn forfeit(&self, tokens: u64) {
        self.forfeited.fetch_add(tokens, Ordering::Relaxed);
    }

    /// Makes room in a full shard: a sampled key without a lease, else the sampled one
    /// holding the fewest tokens (they go back).
    pub(super) fn evict_one(&self, shard: &mut IndexMap<Box<str>, Entry>, now: Instant) {
        let len = shard.len();
        let start = if len > EVICTION_SAMPLE { rand::random_range(0..len) } else { 0 };
        let held = |e: &Entry| e.lease.map_or(0, |l| l.tokens) + u64::from(e.refill.is_some());
        let victim = (0..EVICTION_SAMPLE.min(len))
            .map(|n| (start + n) % len)
            .min_by_key(|&i| shard.get_index(i).map_or(u64::MAX, |(_, e)| held(e)));
        let Some(i) = victim else { return };
        if let Some((key, mut entry)) = shard.swap_remove_index(i) {
            self.retire(&key, &mut entry, now);
        }
    }
}

/// The last moment a window lease's tokens may be sent back: a quarter of a lease time
/// before the window's end.
pub(super) fn return_by(window_end: Instant, time: Duration) -> Instant {
    window_end.checked_sub(time / 4).unwrap_or(window_end)
}
