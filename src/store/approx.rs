//! Approximate mode (`consistency: approximate`): decisions made in process from a local
//! estimate of each bucket, kept close to Redis by one background sync per store.
//!
//! Redis is on the request path only for a bucket's first read (`sync::read_unread`: a
//! bucket this instance never read is read before it is decided) and while the instance
//! warms up (until its heartbeat has counted the other instances, `is_ready`, approximate
//! domains are decided exactly). A bucket's level is the last count read from Redis,
//! rolled and decayed by its own window algorithm, plus what this instance admitted since
//! (`bucket`). The sync task (`sync`) writes, every half `--sync-interval-ms`, the
//! increments admitted since a bucket's last write and folds the counts each write answers.
//! How often a bucket with increments is written depends on how close it is to its limit
//! (`bucket::Tier`); local traffic promotes it at once, only a read demotes it.
//!
//! **Shares.** Between two syncs of a bucket an instance admits at most
//! `⌈(limit − level at the last sync) / 2N⌉` of it, where `N` is the largest number of
//! live instances a heartbeat counted in the last 30 s (alone too: `N = 1`). That caps what the instances can admit
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
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use indexmap::IndexMap;
use rand::Rng;

use crate::algorithm::joint::{self, Member};
use crate::algorithm::{self, Algorithm, Decision, Hits, Params};

use self::bucket::{Bucket, Counts, Tier, Unsent};
use super::charge::{Charge, Groups, StoreError};
use super::memory::now_us;

/// How many buckets a full shard samples to pick one to drop.
const EVICTION_SAMPLE: usize = 16;
/// A full shard sweeps its spent buckets at most this often (µs).
const SWEEP_INTERVAL_US: u64 = 100_000;
/// How long the largest instance count a heartbeat answered is kept as `N` (µs): a rolling
/// restart (one instance leaves, its successor joins) or a brief partition does not widen
/// the shares of the instances that stay.
pub const PEAK_SPAN_US: u64 = 30_000_000;

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

    /// Refuses settings the mode cannot keep its promises with: a staleness limit below
    /// the sync interval would hand every bucket to the failure policy between two syncs.
    pub fn validate(&self) -> Result<(), String> {
        if self.interval.is_zero() {
            return Err("--sync-interval-ms must be at least 1".into());
        }
        if self.staleness < self.interval {
            return Err(format!(
                "--sync-staleness-ms ({} ms) must be at least --sync-interval-ms ({} ms)",
                self.staleness.as_millis(),
                self.interval.as_millis()
            ));
        }
        Ok(())
    }
}

/// The local estimates of every approximate bucket of one store.
#[derive(Debug)]
pub struct Approx {
    settings: ApproxSettings,
    shards: Box<[Mutex<Shard>]>,
    shard_cap: usize,
    hasher: RandomState,
    /// Redis's clock minus ours (µs), from the last call answered; new buckets start with it.
    offset: AtomicI64,
    /// Whether `offset` was measured (before: the heartbeat asks `TIME` first).
    offset_known: AtomicBool,
    /// Instances the last heartbeat counted (≥ 1).
    live: AtomicU64,
    /// The `N` of the share rule: the largest count of the last [`PEAK_SPAN_US`] (≥ 1).
    instances: AtomicU64,
    /// The largest count recently answered, and local µs when it was last answered.
    peak: AtomicU64,
    peak_at: AtomicU64,
    /// Local µs of the first heartbeat answered; 0: none yet.
    first_beat: AtomicU64,
    /// A heartbeat answered at least one interval after the first: every instance that
    /// was running then has counted this one, and this one them. Until then approximate
    /// domains are decided exactly.
    ready: AtomicBool,
    /// Local µs of the last sync call Redis answered; 0: none yet.
    last_sync: AtomicU64,
    /// Local µs of the first failed call since the last answered one; 0: not failing.
    failing_since: AtomicU64,
    /// Where the next collect and sweep start (every shard gets its turn first).
    next_shard: AtomicUsize,
    /// Buckets due that the last wake left waiting (its budget was spent).
    backlog: AtomicU64,
    /// Local µs of the oldest increment waiting to be written; 0: none.
    oldest_unsent: AtomicU64,
    pub(crate) counters: Counters,
}

/// What the sync and the table count (metrics).
#[derive(Debug, Default)]
pub struct Counters {
    pub syncs_ok: AtomicU64,
    pub syncs_failed: AtomicU64,
    /// Buckets sent with increments.
    pub keys_written: AtomicU64,
    /// Buckets read before their first decision (`read_unread`).
    pub keys_read: AtomicU64,
    /// Those first reads answered, and failed or timed out (held to a share then).
    pub first_reads_ok: AtomicU64,
    pub first_reads_failed: AtomicU64,
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
    orphans: Vec<Orphan>,
    /// Keys of buckets with increments to send, oldest first (a bucket is in it once:
    /// `Bucket::queued`; a key whose bucket is gone is skipped).
    dirty: Vec<Box<str>>,
    /// Redis-clock µs of the last sweep for room.
    last_sweep: u64,
}

/// An evicted bucket's increments, waiting for the next sync.
#[derive(Debug, Clone)]
struct Orphan {
    key: Box<str>,
    params: Params,
    unsent: Unsent,
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
            offset_known: AtomicBool::new(false),
            live: AtomicU64::new(1),
            instances: AtomicU64::new(1),
            peak: AtomicU64::new(1),
            peak_at: AtomicU64::new(0),
            first_beat: AtomicU64::new(0),
            ready: AtomicBool::new(false),
            last_sync: AtomicU64::new(0),
            failing_since: AtomicU64::new(0),
            next_shard: AtomicUsize::new(0),
            backlog: AtomicU64::new(0),
            oldest_unsent: AtomicU64::new(0),
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

    /// The `N` the share rule divides by: the largest instance count a heartbeat answered
    /// within [`PEAK_SPAN_US`] (1 before any).
    pub fn instances(&self) -> u64 {
        self.instances.load(Ordering::Relaxed).max(1)
    }

    /// Instances the last heartbeat counted (1 before any).
    pub fn live_instances(&self) -> u64 {
        self.live.load(Ordering::Relaxed).max(1)
    }

    /// Whether this instance decides approximate domains locally: its heartbeat has
    /// answered twice, an interval apart (until then they are decided exactly).
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
    }

    /// Buckets held now.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| lock(s).map.len()).sum()
    }

    /// Whether no bucket is held.
    pub fn is_empty(&self) -> bool {
        self.shards.iter().all(|s| lock(s).map.is_empty())
    }

    /// Local µs of the last answered sync; `None`: none yet.
    pub fn last_sync(&self) -> Option<u64> {
        Some(self.last_sync.load(Ordering::Relaxed)).filter(|&t| t > 0)
    }

    /// Buckets due that the last wake left waiting, and the age (µs) of the oldest
    /// increment not yet written at `now` (local).
    pub fn backlog(&self, now: u64) -> (u64, u64) {
        let oldest = self.oldest_unsent.load(Ordering::Relaxed);
        let age = if oldest == 0 { 0 } else { now.saturating_sub(oldest) };
        (self.backlog.load(Ordering::Relaxed), age)
    }

    fn offset(&self) -> i64 {
        self.offset.load(Ordering::Relaxed)
    }

    fn redis_now(&self, local: u64) -> u64 {
        local.saturating_add_signed(self.offset())
    }

    /// A heartbeat answered `live` instances at local `now`: the share rule's `N` is the
    /// largest count of the last [`PEAK_SPAN_US`], and the second answer an interval after
    /// the first ends the warm-up.
    pub(crate) fn beaten(&self, live: u64, now: u64) {
        let live = live.max(1);
        self.live.store(live, Ordering::Relaxed);
        let peak = self.peak.load(Ordering::Relaxed);
        if live >= peak || now.saturating_sub(self.peak_at.load(Ordering::Relaxed)) > PEAK_SPAN_US {
            self.peak.store(live, Ordering::Relaxed);
            self.peak_at.store(now, Ordering::Relaxed);
        }
        self.instances.store(live.max(self.peak.load(Ordering::Relaxed)), Ordering::Relaxed);
        let first = self.first_beat.load(Ordering::Relaxed);
        if first == 0 {
            self.first_beat.store(now.max(1), Ordering::Relaxed);
        } else if now >= first.saturating_add(self.settings.interval_us())
            && !self.ready.swap(true, Ordering::Relaxed)
        {
            tracing::info!(instances = self.instances(), "approximate mode ready: deciding locally");
        }
        self.answered(now);
    }

    /// Redis answered a call at local `now`.
    fn answered(&self, now: u64) {
        self.last_sync.store(now, Ordering::Relaxed);
        self.failing_since.store(0, Ordering::Relaxed);
    }

    /// A call failed at local `now`.
    fn failed(&self, now: u64) {
        let _ = self.failing_since.compare_exchange(0, now.max(1), Ordering::Relaxed, Ordering::Relaxed);
        self.counters.syncs_failed.fetch_add(1, Ordering::Relaxed);
    }

    /// Learned Redis's clock: `redis` (µs) at local `mid`.
    fn clock(&self, redis: u64, mid: u64) -> i64 {
        let offset = i64::try_from(redis).unwrap_or(i64::MAX).saturating_sub(i64::try_from(mid).unwrap_or(0));
        self.offset.store(offset, Ordering::Relaxed);
        self.offset_known.store(true, Ordering::Relaxed);
        offset
    }

    /// The indexes of `batch` whose bucket this instance has never read (not held, or
    /// never synced): `sync::read_unread` reads them before they are decided.
    pub fn unread(&self, batch: &[Charge]) -> Vec<usize> {
        let mut unread = Vec::new();
        for (i, charge) in batch.iter().enumerate() {
            if matches!(charge.hits, Hits::Peek) {
                continue;
            }
            let shard = lock(&self.shards[self.shard_of(&charge.key)]);
            if shard.map.get(&*charge.key).is_none_or(|b| b.read_at == 0) {
                unread.push(i);
            }
        }
        unread
    }

    /// Folds a first read of `key` (Redis's `counts` at `redis_now`, local `now`, the
    /// call's clock `offset`) into its bucket, made if needed — unless a sync answered for
    /// it meanwhile, or a call carrying its increments is in flight (its answer folds).
    pub(crate) fn seed(
        &self,
        key: &str,
        params: Params,
        counts: Counts,
        redis_now: u64,
        now: u64,
        offset: i64,
    ) {
        let mut shard = lock(&self.shards[self.shard_of(key)]);
        if !shard.map.contains_key(key) {
            self.make_room(&mut shard, redis_now, &[]);
            shard.map.insert(key.into(), Bucket::new(params, offset));
        }
        if let Some(bucket) = shard.map.get_mut(key) {
            if bucket.read_at == 0 && bucket.inflight.is_empty() {
                bucket.params = params;
                bucket.fold(counts, redis_now, now, offset);
            }
        }
    }

    /// Decides a batch whose `groups` stand or fall together (see [`Groups`]), locally.
    /// Every charge must be [`served`](Self::serves). Answers a store error only for a
    /// bucket whose estimate is stale (see the module doc).
    pub fn charge_groups(&self, batch: &[Charge], groups: &Groups) -> Vec<Result<Decision, StoreError>> {
        let now = now_us();
        if groups.is_each() {
            return batch.iter().map(|charge| self.charge_one(charge, now)).collect();
        }
        let mut results = Vec::with_capacity(batch.len());
        for range in groups.ranges(batch.len()) {
            results.extend(self.charge_group_at(&batch[range], now));
        }
        results
    }

    /// A charge decided alone, at local time `now`: one shard lock, no allocation but a
    /// new bucket's key (and its key again when it first has something to send). What
    /// [`charge_group_at`] does for a group of one.
    ///
    /// [`charge_group_at`]: Self::charge_group_at
    fn charge_one(&self, charge: &Charge, now: u64) -> Result<Decision, StoreError> {
        let mut shard = lock(&self.shards[self.shard_of(&charge.key)]);
        let index = match shard.map.get_index_of(&*charge.key) {
            Some(index) => index,
            None => {
                // Made even when stale: its own sync (or read) may prove its master healthy.
                self.make_room(&mut shard, self.redis_now(now), &[]);
                shard.map.insert_full(charge.key.as_str().into(), Bucket::new(charge.params, self.offset())).0
            }
        };
        let Shard { map, dirty, .. } = &mut *shard;
        let Some((key, bucket)) = map.get_index_mut(index) else {
            return Err(StoreError::Server("approximate bucket vanished under its lock".into()));
        };
        if self.bucket_stale(bucket, now) {
            return Err(self.stale(1));
        }
        // A reload may change the limit: the estimate is read under the new one.
        bucket.params = charge.params;
        let redis_now = bucket.redis_now(now);
        let state = Some(bucket.estimate(redis_now).state());
        let mut decision = algorithm::apply(state, redis_now, &charge.params, charge.hits).decision;
        if decision.allowed && self.over_share(bucket, charge.hits, 0, redis_now) {
            decision = self.share_denial();
        }
        if decision.allowed {
            match charge.hits {
                Hits::Consume(n) => bucket.admit(n, redis_now, now),
                Hits::Refund(n) => bucket.refund(n, redis_now, now),
                Hits::Peek => {}
            }
        }
        queue(key, bucket, dirty);
        bucket.promote(redis_now);
        Ok(decision)
    }

    /// Counts `charges` answered stale; the error they answer.
    fn stale(&self, charges: usize) -> StoreError {
        self.counters.stale.fetch_add(charges as u64, Ordering::Relaxed);
        StoreError::Unavailable("approximate estimate stale: Redis not synced".into())
    }

    /// Whether `hits`, after `earlier` hits of the same group on the same bucket, would
    /// take `bucket` past this instance's share (see [`within_share`]). Always checked,
    /// alone too: an instance that believes itself alone may not be (one that joined has
    /// not been counted yet), and a share bounds what it writes unseen.
    fn over_share(&self, bucket: &Bucket, hits: Hits, earlier: u64, now: u64) -> bool {
        let Hits::Consume(n) = hits else { return false };
        !within_share(bucket, n.saturating_add(earlier), now, self.instances())
    }

    /// The answer of a charge the share rule denies (counted): retry after half an
    /// interval, when the bucket's next sync may widen the share.
    fn share_denial(&self) -> Decision {
        self.counters.share_denials.fetch_add(1, Ordering::Relaxed);
        Decision { allowed: false, remaining: 0, reset_us: self.settings.interval_us() / 2 }
    }

    /// One group at local time `now` (µs): its shards locked in ascending order (the
    /// memory store's rule, so groups cannot deadlock), decided on the estimates, charged
    /// all or nothing. Making room for a new member never evicts another member.
    pub fn charge_group_at(&self, group: &[Charge], now: u64) -> Vec<Result<Decision, StoreError>> {
        if let [charge] = group {
            return vec![self.charge_one(charge, now)];
        }
        let mut order: Vec<usize> = group.iter().map(|c| self.shard_of(&c.key)).collect();
        let shard_of = order.clone();
        order.sort_unstable();
        order.dedup();
        let mut locked: Vec<MutexGuard<'_, Shard>> = order.iter().map(|&i| lock(&self.shards[i])).collect();
        let guard = |i: usize| order.binary_search(&shard_of[i]).unwrap_or(0);
        let members: Vec<&str> = group.iter().map(|c| c.key.as_str()).collect();
        let offset = self.offset();
        for (i, charge) in group.iter().enumerate() {
            let shard = &mut locked[guard(i)];
            if !shard.map.contains_key(&*charge.key) {
                self.make_room(shard, now.saturating_add_signed(offset), &members);
                shard.map.insert(charge.key.as_str().into(), Bucket::new(charge.params, offset));
            }
        }
        let stale = group.iter().enumerate().any(|(i, c)| {
            locked[guard(i)].map.get(&*c.key).is_none_or(|bucket| self.bucket_stale(bucket, now))
        });
        if stale {
            return vec![Err(self.stale(group.len())); group.len()];
        }
        for (i, charge) in group.iter().enumerate() {
            if let Some(bucket) = locked[guard(i)].map.get_mut(&*charge.key) {
                // A reload may change the limit: the estimate is read under the new one.
                bucket.params = charge.params;
            }
        }
        let buckets: Vec<Bucket> = group
            .iter()
            .enumerate()
            .map(|(i, c)| {
                locked[guard(i)].map.get(&*c.key).copied().unwrap_or_else(|| Bucket::new(c.params, offset))
            })
            .collect();
        // One instant for the group, in the clock of its first member's master.
        let redis_now = buckets.first().map_or(self.redis_now(now), |b| b.redis_now(now));
        let mut decisions = self.decide(group, &buckets, redis_now);
        let all_allowed = decisions.iter().all(|d| d.allowed);
        for (i, charge) in group.iter().enumerate() {
            let Shard { map, dirty, .. } = &mut *locked[guard(i)];
            let Some((_, key, bucket)) = map.get_full_mut(&*charge.key) else { continue };
            if all_allowed {
                match charge.hits {
                    Hits::Consume(n) => bucket.admit(n, redis_now, now),
                    Hits::Refund(n) => bucket.refund(n, redis_now, now),
                    Hits::Peek => {}
                }
            }
            queue(key, bucket, dirty);
            bucket.promote(redis_now);
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
    /// clock): `joint::apply`'s answers, then the share rule for every consuming member —
    /// a bucket met twice spends its share once for both.
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
        let mut spent = vec![0u64; keys.len()];
        for ((decision, member), bucket) in decisions.iter_mut().zip(&members).zip(buckets) {
            if !decision.allowed {
                continue;
            }
            if self.over_share(bucket, member.hits, spent[member.key], now) {
                *decision = self.share_denial();
            } else if let Hits::Consume(n) = member.hits {
                spent[member.key] = spent[member.key].saturating_add(n);
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
    /// while the others answer), or it was never synced and no call has answered for that
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
        let shard = lock(&self.shards[self.shard_of(key)]);
        shard.map.get(key).map(|b| {
            let redis_now = b.redis_now(now);
            BucketView {
                tier: b.tier,
                level: b.estimate(redis_now).level(redis_now, &b.params),
                synced_ago_us: (b.read_at > 0).then(|| now.saturating_sub(b.read_at)),
                pending: unsent_total(b.pending).saturating_add(unsent_total(b.inflight)),
            }
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
        shard.orphans.retain(|o| &*o.key != key);
    }

    fn shard_of(&self, key: &str) -> usize {
        (self.hasher.hash_one(key) % self.shards.len() as u64) as usize
    }

    /// Frees a slot in a full shard: spent buckets first, else the lowest level of a
    /// sample; a dropped bucket's unsent increments are kept for the next sync. Never
    /// drops one of `keep` (the members of the group being decided).
    fn make_room(&self, shard: &mut Shard, now: u64, keep: &[&str]) {
        if shard.map.len() < self.shard_cap {
            return;
        }
        // Sweep spent buckets at most every 100 ms (a full shard of live buckets must not
        // be walked on every new key), else evict from a sample.
        if now >= shard.last_sweep.saturating_add(SWEEP_INTERVAL_US) {
            shard.last_sweep = now;
            let before = shard.map.len();
            shard.map.retain(|k, b| !b.is_spent(now) || keep.contains(&&**k));
            if shard.map.len() < before {
                return;
            }
        }
        let mut rng = rand::rng();
        let len = shard.map.len();
        let victim = (0..EVICTION_SAMPLE.min(len))
            .map(|_| rng.random_range(0..len))
            .filter(|&i| shard.map.get_index(i).is_some_and(|(k, _)| !keep.contains(&&**k)))
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
    fn orphan(&self, shard: &mut Shard, orphan: Orphan) {
        if shard.orphans.len() < self.shard_cap {
            shard.orphans.push(orphan);
        } else {
            let lost = unsent_total(orphan.unsent).unsigned_abs();
            self.counters.dropped_increments.fetch_add(lost, Ordering::Relaxed);
        }
    }
}

/// Puts `key` in its shard's send list if its bucket now has increments and is not in it.
fn queue(key: &str, bucket: &mut Bucket, dirty: &mut Vec<Box<str>>) {
    if !bucket.queued && !bucket.pending.is_empty() {
        bucket.queued = true;
        dirty.push(key.into());
    }
}

fn unsent_total(u: Unsent) -> i64 {
    u.delta.saturating_add(u.carry)
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
