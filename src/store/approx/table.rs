//! The table of approximate mode: every bucket's estimate, in shards (the memory store's
//! layout and cap), each with its list of buckets to send and its evicted buckets'
//! increments; what the table counts; and what a bucket looks like from outside. Lookups
//! only: deciding (`decide`), eviction (`evict`), what is known of Redis (`health`) and
//! the sync (`sync`) are the files above it.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

use indexmap::IndexMap;

use crate::algorithm::{Algorithm, Params};
use crate::store::charge::Charge;
use crate::store::memory::now_us;

use super::bucket::Bucket;
use super::peak::Peaks;
use super::settings::ApproxSettings;
use super::tier::Tier;
use super::window::Unsent;

/// The local estimates of every approximate bucket of one store.
#[derive(Debug)]
pub struct Approx {
    pub(super) settings: ApproxSettings,
    pub(super) shards: Box<[Mutex<Shard>]>,
    pub(super) shard_cap: usize,
    pub(super) hasher: RandomState,
    /// Redis's clock minus ours (µs), from the last call answered; new buckets start with it.
    pub(super) offset: AtomicI64,
    /// When `offset` was last measured, in µs of the monotonic clock since `epoch`; 0:
    /// never (the heartbeat asks `TIME` first when it is older than an interval).
    pub(super) clock_read_at: AtomicU64,
    /// The origin of the monotonic clock the table keeps durations in (a wall clock that
    /// steps must not make a measurement look fresh or old).
    pub(super) epoch: Instant,
    /// Whether the scripts a request's calls use were loaded (`SCRIPT LOAD`, once, with
    /// the first heartbeat: before the instance is ready).
    pub(super) scripts_loaded: AtomicBool,
    /// Instances the last heartbeat counted (≥ 1).
    pub(super) live: AtomicU64,
    /// The `N` of the share rule: the largest count of the last [`PEAK_SPAN_US`] (≥ 1).
    ///
    /// [`PEAK_SPAN_US`]: super::PEAK_SPAN_US
    pub(super) instances: AtomicU64,
    /// The counts heartbeats answered in the last [`PEAK_SPAN_US`] (only the sync task
    /// records; no other lock is taken under it).
    ///
    /// [`PEAK_SPAN_US`]: super::PEAK_SPAN_US
    pub(super) peaks: Mutex<Peaks>,
    /// Local µs of the first heartbeat answered; 0: none yet.
    pub(super) first_beat: AtomicU64,
    /// A heartbeat answered at least one interval after the first: every instance that
    /// was running then has counted this one, and this one them. Until then approximate
    /// domains are decided exactly.
    pub(super) ready: AtomicBool,
    /// Woken when `ready` turns true (`Approx::warmed_up`).
    pub(super) warmed: tokio::sync::Notify,
    /// Woken when a call that held buckets settles (a sync call, a claim): a request that
    /// found its bucket busy decides again (`claim`).
    pub(crate) settled: tokio::sync::Notify,
    /// The log of operators' resets this instance follows (`resets`).
    pub(super) resets: super::resets::ResetLog,
    /// Local µs of the last sync call Redis answered; 0: none yet.
    pub(super) last_sync: AtomicU64,
    /// Local µs of the first failed call since the last answered one; 0: not failing.
    pub(super) failing_since: AtomicU64,
    /// Where the next collect and sweep start (every shard gets its turn first).
    pub(super) next_shard: AtomicUsize,
    /// Buckets due that the last wake left waiting (its budget was spent).
    pub(super) backlog: AtomicU64,
    /// Local µs of the oldest increment waiting to be written; 0: none.
    pub(super) oldest_unsent: AtomicU64,
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
    /// Times the sync task ended or panicked and was restarted (`store::syncing`).
    pub sync_restarts: AtomicU64,
}

#[derive(Debug, Default)]
pub(super) struct Shard {
    pub(super) map: IndexMap<Box<str>, Bucket>,
    /// Unsent increments of evicted buckets, written by the next sync.
    pub(super) orphans: Vec<Orphan>,
    /// Keys of buckets with increments to send, oldest first (a bucket is in it once:
    /// `Bucket::queued`; a key whose bucket is gone is skipped).
    pub(super) dirty: Vec<Box<str>>,
    /// Redis-clock µs of the last sweep for room.
    pub(super) last_sweep: u64,
}

/// An evicted bucket's increments, waiting for the next sync.
#[derive(Debug, Clone)]
pub(super) struct Orphan {
    pub(super) key: Box<str>,
    pub(super) params: Params,
    pub(super) unsent: Unsent,
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
            clock_read_at: AtomicU64::new(0),
            epoch: Instant::now(),
            scripts_loaded: AtomicBool::new(false),
            live: AtomicU64::new(1),
            instances: AtomicU64::new(1),
            peaks: Mutex::new(Peaks::default()),
            first_beat: AtomicU64::new(0),
            ready: AtomicBool::new(false),
            warmed: tokio::sync::Notify::new(),
            settled: tokio::sync::Notify::new(),
            resets: super::resets::ResetLog::default(),
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

    pub(super) fn offset(&self) -> i64 {
        self.offset.load(Ordering::Relaxed)
    }

    /// µs of the monotonic clock since the table was made.
    pub(super) fn monotonic_us(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_micros()).unwrap_or(u64::MAX)
    }

    pub(super) fn redis_now(&self, local: u64) -> u64 {
        local.saturating_add_signed(self.offset())
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

    pub(super) fn shard_of(&self, key: &str) -> usize {
        (self.hasher.hash_one(key) % self.shards.len() as u64) as usize
    }
}

/// Puts `key` in its shard's send list if its bucket now has increments and is not in it.
pub(super) fn queue(key: &str, bucket: &mut Bucket, dirty: &mut Vec<Box<str>>) {
    if !bucket.queued && !bucket.pending.is_empty() {
        bucket.queued = true;
        dirty.push(key.into());
    }
}

pub(super) fn unsent_total(u: Unsent) -> i64 {
    u.delta.saturating_add(u.carry)
}

pub(super) fn lock(shard: &Mutex<Shard>) -> MutexGuard<'_, Shard> {
    // A poisoned shard only means a thread panicked mid-charge; every mutation is one
    // insert, remove or field write, so the map is still consistent.
    shard.lock().unwrap_or_else(|e| e.into_inner())
}

/// The reset log (`resets`), as the sync and the admin port reach it.
impl Approx {
    /// Names the reset log under the store's key prefix (`--redis-key-prefix`); before
    /// this, and in tests, it is unprefixed. Only the first call counts.
    pub fn name_reset_log(&self, key_prefix: &str) {
        self.resets.name(key_prefix);
    }

    /// The reset log's key.
    pub fn reset_log_key(&self) -> &str {
        self.resets.key()
    }

    /// Where the next read of the log starts (exclusive).
    pub(super) fn reset_log_from(&self) -> String {
        self.resets.from()
    }

    /// The log was read up to `id` (inclusive).
    pub(super) fn reset_log_read(&self, id: String) {
        self.resets.read(id);
    }

    /// A log entry: `key` was reset in Redis before `at` (Redis µs). Its bucket, if held
    /// here and read before that, is emptied and read again before its next decision.
    pub(super) fn reset_seen(&self, key: &str, at: u64) {
        let mut shard = lock(&self.shards[self.shard_of(key)]);
        if let Some(bucket) = shard.map.get_mut(key) {
            let now = bucket.redis_now(crate::store::memory::now_us());
            bucket.reset(at, now);
        }
    }
}
