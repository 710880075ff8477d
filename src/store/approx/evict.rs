//! Eviction: a full shard frees a slot by dropping spent buckets first, then the lowest
//! of a sample; an evicted bucket's unsent increments are kept apart (bounded) for the next
//! sync, so eviction never loses admissions.

use std::sync::atomic::Ordering;

use rand::Rng;

use crate::store::memory::now_us;

use super::table::{unsent_total, Approx, Orphan, Shard};

/// How many buckets a full shard samples to pick one to drop.
const EVICTION_SAMPLE: usize = 16;
/// A full shard sweeps its spent buckets at most this often (µs).
const SWEEP_INTERVAL_US: u64 = 100_000;

impl Approx {
    /// Frees a slot in a full shard: spent buckets first, else the lowest level of a
    /// sample; a dropped bucket's unsent increments are kept for the next sync. Never
    /// drops one of `keep` (the members of the group being decided), nor a bucket a
    /// request holds for a charge decided against Redis (`claim`).
    pub(super) fn make_room(&self, shard: &mut Shard, now: u64, keep: &[&str]) {
        if shard.map.len() < self.shard_cap {
            return;
        }
        // Sweep spent buckets at most every 100 ms (a full shard of live buckets must not
        // be walked on every new key), else evict from a sample.
        if now >= shard.last_sweep.saturating_add(SWEEP_INTERVAL_US) {
            shard.last_sweep = now;
            let before = shard.map.len();
            shard.map.retain(|k, b| !b.is_spent(now) || b.claimed || keep.contains(&&**k));
            if shard.map.len() < before {
                return;
            }
        }
        let mut rng = rand::rng();
        let len = shard.map.len();
        let victim = (0..EVICTION_SAMPLE.min(len))
            .map(|_| rng.random_range(0..len))
            .filter(|&i| shard.map.get_index(i).is_some_and(|(k, b)| !keep.contains(&&**k) && !b.claimed))
            .min_by_key(|&i| {
                shard.map.get_index(i).map_or(u64::MAX, |(_, b)| {
                    let t = b.redis_now(now_us());
                    b.estimate(t).level(t, &b.params)
                })
            });
        let Some((key, bucket)) = victim.and_then(|i| shard.map.swap_remove_index(i)) else { return };
        self.counters.evictions.fetch_add(1, Ordering::Relaxed);
        // What is in flight belongs to the call: written by it, or given to the bucket's
        // successor (or made an orphan's) by `settle_failed` when it fails.
        if !bucket.pending.is_empty() {
            self.orphan(shard, Orphan { key, params: bucket.params, unsent: bucket.pending });
        }
    }

    /// Keeps an evicted bucket's increments for the next sync, within the shard's cap.
    pub(super) fn orphan(&self, shard: &mut Shard, orphan: Orphan) {
        if shard.orphans.len() < self.shard_cap {
            shard.orphans.push(orphan);
        } else {
            let lost = unsent_total(orphan.unsent).unsigned_abs();
            self.counters.dropped_increments.fetch_add(lost, Ordering::Relaxed);
        }
    }
}
