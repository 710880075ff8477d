//! The schedule of the wakes: which buckets a wake sends ([`Wake`], by their tier), at
//! most how many, oldest first, and the sweep of buckets with nothing left to say.

use std::sync::atomic::Ordering;

use super::super::table::{lock, Approx};
use super::super::tier::Tier;
use super::call::{Item, CHUNK};

/// What a wake of the sync sends: the grid of half intervals, every second wake a full one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wake {
    /// Hot buckets' increments, and idle ones' that waited 4 intervals.
    Half,
    /// Also low and normal buckets' increments, and the heartbeat.
    Full,
    /// Everything (the last wake, when the instance stops).
    Last,
}

impl Wake {
    /// Whether a bucket of `tier` whose oldest increment waited `waited` µs is sent on
    /// this wake (`interval`: the sync interval, µs). Hot, low and normal buckets go on the
    /// grid every instance shares, so that their views are about equally old; idle ones
    /// (below a tenth of their limit, where a delay costs nothing of the bound) once they
    /// waited 4 intervals, on whichever wake that falls — spread over the wakes, not all on
    /// one.
    fn sends(self, tier: Tier, waited: u64, interval: u64) -> bool {
        match (self, tier) {
            (Wake::Last, _) | (_, Tier::Hot) => true,
            (Wake::Full, Tier::Low | Tier::Normal) => true,
            (_, Tier::Idle) => waited.saturating_add(interval / 2) >= Tier::Idle.send_after(interval),
            (Wake::Half, _) => false,
        }
    }
}

/// A spent bucket (its counts expired, nothing to send) synced within this long stays: it
/// is an idle bucket whose next charge needs no first read. Older, it is dropped.
pub const FORGET_AFTER_US: u64 = 30_000_000;

/// Most buckets one wake sends (32 calls); the rest wait for the next wake, oldest first.
pub const MAX_PER_WAKE: usize = 32 * CHUNK;

impl Approx {
    /// Takes what a wake sends (see [`Wake`]), at most `budget` buckets, oldest first:
    /// buckets with increments due, and evicted buckets' increments. Moves their
    /// increments to `inflight`. On full wakes also sweeps one shard (in turn) of buckets
    /// with nothing left to say that were not synced within [`FORGET_AFTER_US`].
    pub fn collect(&self, now: u64, wake: Wake, budget: usize) -> Vec<Item> {
        let shards = self.shards.len();
        let interval = self.settings.interval_us();
        let first = self.next_shard.fetch_add(1, Ordering::Relaxed) % shards;
        let (mut items, mut waiting, mut oldest) = (Vec::new(), 0u64, u64::MAX);
        for k in 0..shards {
            let mut shard = lock(&self.shards[(first + k) % shards]);
            if k == 0 && wake != Wake::Half {
                shard.map.retain(|_, b| {
                    !b.is_spent(b.redis_now(now))
                        || b.queued
                        || b.claimed
                        || now.saturating_sub(b.read_at) < FORGET_AFTER_US
                });
            }
            let orphans = std::mem::take(&mut shard.orphans);
            items.extend(orphans.into_iter().map(|o| Item {
                key: o.key,
                params: o.params,
                unsent: o.unsent,
                orphan: true,
            }));
            let dirty = std::mem::take(&mut shard.dirty);
            let mut keep = Vec::new();
            for key in dirty {
                let Some(bucket) = shard.map.get_mut(&*key) else { continue };
                if bucket.claimed {
                    // A request's call writes and reads it now; its increments wait.
                    keep.push(key);
                    continue;
                }
                if bucket.pending.is_empty() {
                    bucket.queued = false;
                    continue;
                }
                let due = wake.sends(bucket.tier, now.saturating_sub(bucket.dirty_since), interval);
                if !due || items.len() >= budget {
                    waiting += u64::from(due);
                    oldest = oldest.min(bucket.dirty_since);
                    keep.push(key);
                    continue;
                }
                bucket.queued = false;
                let unsent = bucket.send();
                items.push(Item { key, params: bucket.params, unsent, orphan: false });
            }
            shard.dirty = keep;
        }
        self.backlog.store(waiting, Ordering::Relaxed);
        self.oldest_unsent.store(if oldest == u64::MAX { 0 } else { oldest }, Ordering::Relaxed);
        items
    }
}
