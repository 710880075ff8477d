//! Approximate mode (`consistency: approximate`): decisions made in process from a local
//! estimate of each bucket, kept close to Redis by one background sync per store.
//!
//! No Redis I/O on the request path. A bucket's level is the last count read from Redis,
//! rolled and decayed by its own window algorithm, plus what this instance admitted since
//! (`bucket`). The sync task (`sync`) sends, every `--sync-interval-ms`, one pipeline: the
//! increments admitted since the last tick and the reads of the buckets due, and folds the
//! answers in. How often a bucket is read depends on how close it is to its limit
//! (`bucket::Tier`); local traffic promotes it at once, only a read demotes it.
//!
//! **Shares.** Between two syncs of a bucket an instance admits at most
//! `⌈(limit − level at the last sync) / 2N⌉` of it, where `N` is the number of live
//! instances (a heartbeat in the sync's pipeline). That caps what the instances can admit
//! on stale views: the over-admission is bounded by what the others admitted and wrote
//! since this instance's last sync, not `N ×` the limit (README, "Approximate mode"). The
//! price: a burst that meets one instance gets `1/2N` of the headroom per sync, the rest
//! sync by sync. Every instance wakes on the same wall-clock grid (multiples of half the
//! interval), so their views are about equally old.
//!
//! **Redis down.** Decisions go on from the estimates, each instance within its share (so
//! all of them together within the limit as last seen); increments wait in the buckets and
//! are written when Redis answers again. Once the last good sync is older than the
//! staleness limit, a bucket not synced within that limit answers a store error, and the
//! domain's `failure_mode` decides.
//!
//! Memory: the same cap and sharded layout as the memory store. A full shard drops spent
//! buckets first, then the lowest of a sample; an evicted bucket's unsent increments are
//! kept apart (bounded) and written by the next sync, so eviction never loses admissions.
//!
//! Only the window algorithms are served (their state is two counts that add up); GCRA is
//! rejected by `tollgate check` for approximate domains.

pub mod bucket;
pub mod sync;

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use indexmap::IndexMap;
use rand::Rng;

use crate::algorithm::joint::{self, Member};
use crate::algorithm::{self, Algorithm, Decision, Hits, Params};

use self::bucket::{Bucket, Tier};
use super::memory::now_us;
use super::{Charge, Groups, StoreError};

/// How many buckets a full shard samples to pick one to drop.
const EVICTION_SAMPLE: usize = 16;
/// A full shard sweeps its spent buckets at most this often (µs).
const SWEEP_INTERVAL_US: u64 = 100_000;

/// Settings of approximate mode (`--sync-interval-ms`, `--sync-staleness-ms`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApproxSettings {
    /// How often the background task syncs (hot buckets: every half of it).
    pub interval: Duration,
    /// After how long without a good sync a bucket's estimate is too old to decide on.
    pub staleness: Duration,
    /// Cap on buckets (`--memory-max-keys`).
    pub max_keys: usize,
}

impl Default for ApproxSettings {
    fn default() -> Self {
        ApproxSettings {
            interval: Duration::from_millis(250),
            staleness: Duration::from_secs(10),
            max_keys: 1_000_000,
        }
    }
}

impl ApproxSettings {
    fn interval_us(&self) -> u64 {
        u64::try_from(self.interval.as_micros()).unwrap_or(u64::MAX).max(2)
    }

    fn staleness_us(&self) -> u64 {
        u64::try_from(self.staleness.as_micros()).unwrap_or(u64::MAX)
    }
}

/// The local estimates of every approximate bucket of one store.
#[derive(Debug)]
pub struct Approx {
    settings: ApproxSettings,
    shards: Box<[Mutex<Shard>]>,
    shard_cap: usize,
    hasher: RandomState,
    /// Redis's clock minus ours (µs), from the last sync.
    offset: AtomicI64,
    /// Instances live at the last sync (≥ 1).
    instances: AtomicU64,
    /// Local µs of the last sync Redis answered; 0: none yet.
    last_sync: AtomicU64,
    /// Local µs of the first failed sync since the last good one; 0: not failing.
    failing_since: AtomicU64,
    pub(crate) counters: Counters,
}

/// What the sync and the table count (metrics).
#[derive(Debug, Default)]
pub struct Counters {
    pub syncs_ok: AtomicU64,
    pub syncs_failed: AtomicU64,
    /// Buckets sent with increments.
    pub keys_written: AtomicU64,
    /// Buckets sent only to be read.
    pub keys_read: AtomicU64,
    /// Charges answered with a store error because the estimate was stale.
    pub stale: AtomicU64,
    /// Charges denied by the share rule though the estimate had room.
    pub share_denials: AtomicU64,
    /// Increments dropped because the store of evicted buckets' increments was full.
    pub dropped_increments: AtomicU64,
    pub evictions: AtomicU64,
}

#[derive(Debug, Default)]
struct Shard {
    map: IndexMap<Box<str>, Bucket>,
    /// Unsent increments of evicted buckets, written by the next sync.
    orphans: Vec<(Box<str>, Params, i64)>,
    /// Redis-clock µs of the last sweep for room.
    last_sweep: u64,
}

/// What a bucket looks like from outside (explain, status, tests).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BucketView {
    pub tier: Tier,
    /// The estimate's level now.
    pub level: u64,
    /// Local µs since the last sync answered for it; `None`: never.
    pub synced_ago_us: Option<u64>,
    /// Increments waiting to be written (negative: refunds).
    pub pending: i64,
}

impl Approx {
    pub fn new(settings: ApproxSettings) -> Approx {
        let shard_count = (settings.max_keys / 1024).clamp(1, 64);
        let shard_cap = settings.max_keys.div_ceil(shard_count).max(1);
        Approx {
            settings,
            shards: (0..shard_count).map(|_| Mutex::new(Shard::default())).collect(),
            shard_cap,
            hasher: RandomState::new(),
            offset: AtomicI64::new(0),
            instances: AtomicU64::new(1),
            last_sync: AtomicU64::new(0),
            failing_since: AtomicU64::new(0),
            counters: Counters::default(),
        }
    }

    pub fn settings(&self) -> &ApproxSettings {
        &self.settings
    }

    /// Whether approximate mode can serve a charge: the window algorithms only.
    pub fn serves(charge: &Charge) -> bool {
        matches!(charge.params.algorithm, Algorithm::SlidingWindow | Algorithm::FixedWindow)
    }

    /// Instances live at the last sync (1 before any).
    pub fn instances(&self) -> u64 {
        self.instances.load(Ordering::Relaxed).max(1)
    }

    /// Buckets held now.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| lock(s).map.len()).sum()
    }

    /// Whether no bucket is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Local µs of the last answered sync; `None`: none yet.
    pub fn last_sync(&self) -> Option<u64> {
        Some(self.last_sync.load(Ordering::Relaxed)).filter(|&t| t > 0)
    }

    fn redis_now(&self, local: u64) -> u64 {
        local.saturating_add_signed(self.offset.load(Ordering::Relaxed))
    }

    /// Decides a batch whose `groups` stand or fall together (see [`Groups`]), locally.
    /// Every charge must be [`served`](Self::serves). Answers a store error only for a
    /// bucket whose estimate is stale (see the module doc).
    pub fn charge_groups(&self, batch: &[Charge], groups: &Groups) -> Vec<Result<Decision, StoreError>> {
        let now = now_us();
        if groups.is_each() {
            let redis_now = self.redis_now(now);
            return batch.iter().map(|charge| self.charge_one(charge, now, redis_now)).collect();
        }
        let mut results = Vec::with_capacity(batch.len());
        for range in groups.ranges(batch.len()) {
            results.extend(self.charge_group_at(&batch[range], now));
        }
        results
    }

    /// A charge decided alone, at local time `now` (Redis clock `redis_now`): one shard
    /// lock, no allocation but a new bucket's key. What [`charge_group_at`] does for a
    /// group of one.
    ///
    /// [`charge_group_at`]: Self::charge_group_at
    fn charge_one(&self, charge: &Charge, now: u64, redis_now: u64) -> Result<Decision, StoreError> {
        let mut shard = lock(&self.shards[self.shard_of(&charge.key)]);
        let index = match shard.map.get_index_of(&*charge.key) {
            Some(index) => index,
            None => {
                if self.is_stale(now) {
                    return Err(self.stale(1));
                }
                self.make_room(&mut shard, redis_now);
                shard.map.insert_full(charge.key.as_str().into(), Bucket::new(charge.params)).0
            }
        };
        let Some((_, bucket)) = shard.map.get_index_mut(index) else {
            return Err(StoreError::Server("approximate bucket vanished under its lock".into()));
        };
        if self.bucket_stale(bucket, now) {
            return Err(self.stale(1));
        }
        // A reload may change the limit: the estimate is read under the new one.
        bucket.params = charge.params;
        let state = Some(bucket.estimate(redis_now).state());
        let mut decision = algorithm::apply(state, redis_now, &charge.params, charge.hits).decision;
        if decision.allowed && self.over_share(bucket, charge.hits, redis_now) {
            decision = self.share_denial();
        }
        if decision.allowed {
            match charge.hits {
                Hits::Consume(n) => bucket.admit(n, redis_now),
                Hits::Refund(n) => bucket.refund(n, redis_now),
                Hits::Peek => {}
            }
        }
        bucket.promote(redis_now, now, self.settings.interval_us());
        Ok(decision)
    }

    /// Counts `charges` answered stale; the error they answer.
    fn stale(&self, charges: usize) -> StoreError {
        self.counters.stale.fetch_add(charges as u64, Ordering::Relaxed);
        StoreError::Unavailable("approximate estimate stale: Redis not synced".into())
    }

    /// Whether `hits` would take `bucket` past this instance's share (see [`within_share`]):
    /// checked with several instances, and alone for a bucket not synced yet.
    fn over_share(&self, bucket: &Bucket, hits: Hits, now: u64) -> bool {
        let Hits::Consume(n) = hits else { return false };
        let instances = self.instances();
        // Alone, an instance sees every admission but those made before it synced the
        // bucket once (its start, or a reload that made the domain approximate): a share
        // until then bounds what it can add to counts it has not read.
        (instances > 1 || bucket.read_at == 0) && !within_share(bucket, n, now, instances)
    }

    /// The answer of a charge the share rule denies (counted): retry after half an
    /// interval, when the bucket's next read may widen the share.
    fn share_denial(&self) -> Decision {
        self.counters.share_denials.fetch_add(1, Ordering::Relaxed);
        Decision { allowed: false, remaining: 0, reset_us: self.settings.interval_us() / 2 }
    }

    /// One group at local time `now` (µs): its shards locked in ascending order (the
    /// memory store's rule, so groups cannot deadlock), decided on the estimates, charged
    /// all or nothing.
    pub fn charge_group_at(&self, group: &[Charge], now: u64) -> Vec<Result<Decision, StoreError>> {
        let redis_now = self.redis_now(now);
        if let [charge] = group {
            return vec![self.charge_one(charge, now, redis_now)];
        }
        let mut order: Vec<usize> = group.iter().map(|c| self.shard_of(&c.key)).collect();
        let shard_of = order.clone();
        order.sort_unstable();
        order.dedup();
        let mut locked: Vec<MutexGuard<'_, Shard>> = order.iter().map(|&i| lock(&self.shards[i])).collect();
        let guard = |i: usize| order.binary_search(&shard_of[i]).unwrap_or(0);
        let stale = group.iter().enumerate().any(|(i, c)| match locked[guard(i)].map.get(&*c.key) {
            Some(bucket) => self.bucket_stale(bucket, now),
            None => self.is_stale(now),
        });
        if stale {
            return vec![Err(self.stale(group.len())); group.len()];
        }
        for (i, charge) in group.iter().enumerate() {
            let shard = &mut locked[guard(i)];
            if !shard.map.contains_key(&*charge.key) {
                self.make_room(shard, redis_now);
                shard.map.insert(charge.key.as_str().into(), Bucket::new(charge.params));
            }
            if let Some(bucket) = shard.map.get_mut(&*charge.key) {
                // A reload may change the limit: the estimate is read under the new one.
                bucket.params = charge.params;
            }
        }
        let buckets: Vec<Bucket> = group
            .iter()
            .enumerate()
            .map(|(i, c)| locked[guard(i)].map.get(&*c.key).copied().unwrap_or_else(|| Bucket::new(c.params)))
            .collect();
        let mut decisions = self.decide(group, &buckets, redis_now);
        let all_allowed = decisions.iter().all(|d| d.allowed);
        let interval = self.settings.interval_us();
        for (i, charge) in group.iter().enumerate() {
            let Some(bucket) = locked[guard(i)].map.get_mut(&*charge.key) else { continue };
            if all_allowed {
                match charge.hits {
                    Hits::Consume(n) => bucket.admit(n, redis_now),
                    Hits::Refund(n) => bucket.refund(n, redis_now),
                    Hits::Peek => {}
                }
            }
            bucket.promote(redis_now, now, interval);
        }
        if !all_allowed && group.len() > 1 {
            // A denied group: the members that passed describe their bucket as it is.
            for (decision, (charge, bucket)) in decisions.iter_mut().zip(group.iter().zip(&buckets)) {
                if decision.allowed {
                    let state = Some(bucket.estimate(redis_now).state());
                    *decision = algorithm::apply(state, redis_now, &charge.params, Hits::Peek).decision;
                    decision.allowed = true;
                }
            }
        }
        decisions.into_iter().map(Ok).collect()
    }

    /// The decisions of a group of two or more on the buckets' estimates at `now` (Redis
    /// clock): `joint::apply`'s answers, then the share rule for every consuming member.
    fn decide(&self, group: &[Charge], buckets: &[Bucket], now: u64) -> Vec<Decision> {
        let mut keys: Vec<&str> = Vec::with_capacity(group.len());
        let mut stored = Vec::with_capacity(group.len());
        let members: Vec<Member> = group
            .iter()
            .zip(buckets)
            .map(|(c, b)| {
                let key = keys.iter().position(|k| *k == c.key).unwrap_or_else(|| {
                    keys.push(&c.key);
                    stored.push(Some(b.estimate(now).state()));
                    keys.len() - 1
                });
                Member { key, params: c.params, hits: c.hits }
            })
            .collect();
        let mut decisions = joint::apply(&stored, now, &members).decisions;
        for ((decision, charge), bucket) in decisions.iter_mut().zip(group).zip(buckets) {
            if decision.allowed && self.over_share(bucket, charge.hits, now) {
                *decision = self.share_denial();
            }
        }
        decisions
    }

    /// Whether every sync call has been failing for longer than the staleness limit (a
    /// bucket this instance has never synced is then too stale to start on).
    fn is_stale(&self, now: u64) -> bool {
        let since = self.failing_since.load(Ordering::Relaxed);
        since > 0 && now.saturating_sub(since) > self.settings.staleness_us()
    }

    /// Whether a bucket's estimate is too old to decide on: its own sync has been failing
    /// for longer than the staleness limit (per bucket: on a cluster one master may be down
    /// while the others answer), or it was never synced and no sync has succeeded for that
    /// long. A bucket with nothing to send does not fail: it decides on, within its share.
    fn bucket_stale(&self, bucket: &Bucket, now: u64) -> bool {
        let own = bucket.failing_since > 0
            && now.saturating_sub(bucket.failing_since) > self.settings.staleness_us();
        own || bucket.read_at == 0 && self.is_stale(now)
    }

    /// What a bucket looks like now, if it is held.
    pub fn view(&self, key: &str) -> Option<BucketView> {
        self.view_at(key, now_us())
    }

    /// [`view`](Self::view) at local time `now` (µs).
    pub fn view_at(&self, key: &str, now: u64) -> Option<BucketView> {
        let redis_now = self.redis_now(now);
        let shard = lock(&self.shards[self.shard_of(key)]);
        shard.map.get(key).map(|b| BucketView {
            tier: b.tier,
            level: b.estimate(redis_now).level(redis_now, &b.params),
            synced_ago_us: (b.read_at > 0).then(|| now.saturating_sub(b.read_at)),
            pending: b.pending.saturating_add(b.inflight),
        })
    }

    /// How many buckets are in each tier now (idle, low, normal, hot).
    pub fn tiers(&self) -> [usize; 4] {
        let mut counts = [0; 4];
        for shard in self.shards.iter() {
            for bucket in lock(shard).map.values() {
                counts[bucket.tier as usize] += 1;
            }
        }
        counts
    }

    /// Forgets `key` (an operator's reset): its increments are dropped with it (the `DEL`
    /// in Redis wipes what was written; what was not must not come back).
    pub fn remove(&self, key: &str) {
        let mut shard = lock(&self.shards[self.shard_of(key)]);
        shard.map.swap_remove(key);
        shard.orphans.retain(|(k, _, _)| &**k != key);
    }

    fn shard_of(&self, key: &str) -> usize {
        (self.hasher.hash_one(key) % self.shards.len() as u64) as usize
    }

    /// Frees a slot in a full shard: spent buckets first, else the lowest level of a
    /// sample; a dropped bucket's unsent increments are kept for the next sync.
    fn make_room(&self, shard: &mut Shard, now: u64) {
        if shard.map.len() < self.shard_cap {
            return;
        }
        // Sweep spent buckets at most every 100 ms (a full shard of live buckets must not
        // be walked on every new key), else evict from a sample.
        if now >= shard.last_sweep.saturating_add(SWEEP_INTERVAL_US) {
            shard.last_sweep = now;
            let before = shard.map.len();
            shard.map.retain(|_, b| !b.is_spent(now));
            if shard.map.len() < before {
                return;
            }
        }
        let mut rng = rand::rng();
        let len = shard.map.len();
        let victim = (0..EVICTION_SAMPLE.min(len)).map(|_| rng.random_range(0..len)).min_by_key(|&i| {
            shard.map.get_index(i).map_or(u64::MAX, |(_, b)| b.estimate(now).level(now, &b.params))
        });
        let Some((key, bucket)) = victim.and_then(|i| shard.map.swap_remove_index(i)) else { return };
        self.counters.evictions.fetch_add(1, Ordering::Relaxed);
        // What is in flight belongs to the call: written by it, or made an orphan's by
        // `settle_failed` when it fails.
        let unsent = bucket.pending;
        if unsent != 0 {
            if shard.orphans.len() < self.shard_cap {
                shard.orphans.push((key, bucket.params, unsent));
            } else {
                self.counters.dropped_increments.fetch_add(unsent.unsigned_abs(), Ordering::Relaxed);
            }
        }
    }
}

/// The share rule: `n` more fit in this instance's share of the headroom the last sync
/// showed, `⌈(limit − base level) / (2 × instances)⌉`. Half of a fair share: the others'
/// admissions this instance has not seen yet are at most their own half shares, so the
/// instances together stay at or under the headroom while their views are one sync old
/// (README, "Approximate mode").
fn within_share(bucket: &Bucket, n: u64, now: u64, instances: u64) -> bool {
    let p = &bucket.params;
    let base = bucket.base.at(now, p).level(now, p);
    let own = bucket.own.at(now, p).level(now, p);
    let share = p.limit.saturating_sub(base).div_ceil(instances.saturating_mul(2));
    own.saturating_add(n) <= share
}

fn lock(shard: &Mutex<Shard>) -> MutexGuard<'_, Shard> {
    // A poisoned shard only means a thread panicked mid-charge; every mutation is one
    // insert, remove or field write, so the map is still consistent.
    shard.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests;
