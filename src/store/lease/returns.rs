//! The way back: the sweeper's scan, unused tokens queued and handed out as refunds,
//! and eviction (whose tokens go back too). Part of the lease table; no I/O.
//!
//! The queue of returns is bounded twice, so that an outage (the breaker open, Redis
//! frozen) can neither grow it nor store up credit for later:
//! - **by count**: at most [`LeaseTable::max_returns`] (twice the keys tracked, 20,000 by
//!   default); past it the oldest goes (`Dropped::full`);
//! - **by age**: a window return only until its last moment (`by`, a quarter of a lease
//!   time before the window's end: later it would credit the next window); any other (GCRA)
//!   only until its tokens would have refilled anyway, `tokens × unit / limit` after its
//!   lease ended (`Dropped::refilled`). Checked when a return is handed out and when one
//!   the breaker refused comes back, so no refund is sent later than that plus the store
//!   timeout it runs within.
//!
//! Every return given up is counted by reason ([`Dropped`](super::stats::Dropped)), its tokens in
//! `tokens_forfeited`.

use std::sync::atomic::Ordering;

use indexmap::IndexMap;
use tokio::time::Instant;

use crate::algorithm::Decision;
use crate::store::charge::StoreError;

use super::entry::{lock, Entry};
use super::refund::{return_by, GiveUp, Return};
use super::table::LeaseTable;

/// Keys a full shard samples to pick one to evict.
const EVICTION_SAMPLE: usize = 8;
/// Keys the sweeper looks at per shard and tick.
const SWEEP_SCAN: usize = 64;

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
        out.retain(|r| match r.late(now) {
            Some(why) => {
                self.give_up(r, why);
                false
            }
            None => true,
        });
        out
    }

    /// The answer at `now` to a return: counted; queued again if it was never sent (breaker
    /// open, overloaded) and is still in time; otherwise given up.
    pub fn returned(&self, ret: Return, result: &Result<Decision, StoreError>, now: Instant) {
        match result {
            Ok(_) => {
                self.returned.fetch_add(ret.tokens, Ordering::Relaxed);
            }
            Err(StoreError::CircuitOpen | StoreError::Overloaded) => match ret.late(now) {
                Some(why) => self.give_up(&ret, why),
                None => self.queue(ret),
            },
            Err(_) => self.give_up(&ret, GiveUp::Failed),
        }
    }

    /// Forgets `key`: a refund (`give_back`: its tokens go back) or an admin reset (the
    /// bucket is deleted; tokens held are void). An answer to a refill in flight goes back.
    pub fn drop_key(&self, key: &str, now: Instant, give_back: bool) {
        let mut shard = self.shard(key);
        let Some(mut entry) = shard.swap_remove(key) else { return };
        if give_back {
            self.retire(key, &mut entry, now);
        }
    }

    /// Ends `entry`'s lease: unused tokens are queued to go back.
    pub(super) fn retire(&self, key: &str, entry: &mut Entry, now: Instant) {
        let Some(lease) = entry.lease.take() else { return };
        if lease.tokens == 0 {
            return;
        }
        let by = lease.window_end.map(|end| return_by(end, self.settings.time));
        // Its tokens stopped being spendable when it expired, if that was before now.
        let since = now.min(lease.expires);
        let ret = Return { key: key.to_string(), params: entry.params, tokens: lease.tokens, by, since };
        match ret.late(now) {
            // The window is ending: a late refund would credit the next one.
            Some(why) => self.give_up(&ret, why),
            None => self.queue(ret),
        }
    }

    /// Queues `ret`; a full queue gives up its oldest return (the nearest to being late).
    pub(super) fn queue(&self, ret: Return) {
        let mut queue = lock(&self.returns);
        let oldest = if queue.len() >= self.max_returns() { queue.pop_front() } else { None };
        queue.push_back(ret);
        drop(queue);
        if let Some(oldest) = oldest {
            self.give_up(&oldest, GiveUp::Full);
        }
    }

    /// `ret`'s tokens will not go back: counted as forfeited, the return by `why`.
    pub(super) fn give_up(&self, ret: &Return, why: GiveUp) {
        self.forfeited.fetch_add(ret.tokens, Ordering::Relaxed);
        self.dropped[why as usize].fetch_add(1, Ordering::Relaxed);
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
