//! What a call's answer does to the table: its counts folded into the buckets that sent
//! them, or, when it failed, their increments put back for the next wake.

use std::sync::atomic::Ordering;

use super::super::health::midpoint;
use super::super::table::{lock, queue, Approx, Orphan};
use super::super::window::Counts;
use super::call::Item;

impl Approx {
    /// Folds a call's answer (`counts` per item, in order): Redis ran it at `redis_now`;
    /// we sent it at local `sent` and had the answer at `answered`.
    pub(in crate::store::approx) fn settle_ok(
        &self,
        items: &[Item],
        counts: &[Counts],
        redis_now: u64,
        sent: u64,
        answered: u64,
    ) {
        let offset = self.clock(redis_now, midpoint(sent, answered));
        for (item, counts) in items.iter().zip(counts) {
            if item.orphan {
                continue;
            }
            let mut shard = lock(&self.shards[self.shard_of(&item.key)]);
            if let Some(bucket) = shard.map.get_mut(&*item.key) {
                bucket.fold(*counts, redis_now, answered, offset);
            }
        }
        self.answered(answered);
        self.counters.syncs_ok.fetch_add(1, Ordering::Relaxed);
        // Requests waiting to claim one of these buckets (`claim`) decide again.
        self.settled.notify_waiters();
    }

    /// Puts a failed call's increments back, for the next wake: into the bucket (the one
    /// that sent them, or its successor if it was evicted and made anew meanwhile), else
    /// as an orphan's.
    pub(in crate::store::approx) fn settle_failed(&self, items: Vec<Item>, now: u64) {
        for item in items {
            let mut shard = lock(&self.shards[self.shard_of(&item.key)]);
            let shard = &mut *shard;
            match shard.map.get_full_mut(&*item.key) {
                Some((_, key, bucket)) if !item.orphan => {
                    bucket.unsend(item.unsent, now);
                    queue(key, bucket, &mut shard.dirty);
                }
                _ if item.unsent.is_empty() => {}
                _ => self.orphan(shard, Orphan { key: item.key, params: item.params, unsent: item.unsent }),
            }
        }
        self.failed(now);
        self.settled.notify_waiters();
    }
}
