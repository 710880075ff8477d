//! Leases: a hot bucket's tokens taken from Redis in blocks, one charge per block, and spent
//! by this instance without a Redis call per request.
//!
//! This file owns the lease table: per bucket key, the local rate (hits in the current and
//! the previous lease time), the lease (tokens left, when it ends, the Redis answer that
//! granted it), a refill in flight, and a hint of what still fits (the last Redis answer).
//! It does no I/O and reads no clock: callers pass `now`. `flow` charges through it,
//! refills and returns in tasks, and runs the sweeper.
//!
//! Rules, each for a reason:
//! - Only a group of one `Consume(n)` of a leasable rule (`lease: true`, or every rule with
//!   `--lease-hot-keys`) is served from a lease: joint groups must be decided at one
//!   instant in Redis, peeks describe the bucket, refunds must reach it (a refund also
//!   drops this key's lease and gives its tokens back).
//! - A key is leased once it saw at least [`MIN_BLOCK`] hits within a lease time. A block
//!   is `max(hits in the current, hits in the previous lease time)` — the key's rate ×
//!   lease time — capped by a tenth of the bucket ([`LEASE_SHARE`]: GCRA's burst, a
//!   window's limit) and by what the last Redis answer said still fits (fresh for one
//!   lease time). A tenth: when one instance is denied, every other holds at most a tenth
//!   of the bucket unspent, so three instances strand at most a fifth, while a key at its
//!   limit still takes ten requests per Redis call. A block that cannot be
//!   `max(MIN_BLOCK, n)` is not taken: the request goes to Redis alone.
//! - A denied or failed block sets the hint to "nothing fits": single charges go to Redis
//!   for a lease time, and their answers set the hint again (never hold more than fits).
//! - A lease is spent only until `sent + lease_time`, `sent` being when its charge was
//!   sent (Redis took the tokens later): tokens are never spent more than a lease time
//!   after Redis counted them. A window lease also ends at its window's end (as seen from
//!   `sent`, so early, never late), and its unused tokens are given back only while a
//!   quarter of a lease time is left in that window — a refund that ran in the next
//!   window would give that window tokens it never counted.
//! - Params that differ from the lease's (a reload changed the rule) drop the lease: its
//!   tokens go back and the new limit applies from this request on.
//! - Unused tokens go back (a `Refund`) from the sweeper: expired leases, dropped leases
//!   and evicted keys queue a [`Return`]; the sweeper sends them in batches. The queue is
//!   bounded by count and by age (`returns`): what the breaker refuses waits at most until
//!   its tokens would have refilled anyway, so an outage stores up no credit for later.
//! - Memory is bounded: at most `max_keys` keys (sharded); a full shard evicts a sampled
//!   key without a lease first, else the one holding the fewest tokens (its tokens go back).
//! - A refill belongs to a task, never to a request: a request that stops waiting leaves
//!   the block's tokens in the table, spent by others or given back when the lease ends.
//!   Each refill has a number; an answer whose number is no longer the key's (the key was
//!   reset, evicted or re-parameterised meanwhile) gives its block straight back.

mod returns;
mod stats;

use returns::return_by;

pub use stats::{Dropped, LeaseStats};

use std::collections::hash_map::RandomState;
use std::collections::VecDeque;
use std::fmt;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use indexmap::IndexMap;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::algorithm::{Algorithm, Decision, Params, MAX_VALUE};

use super::charge::StoreError;

/// `--lease-time-ms` default.
pub const DEFAULT_LEASE_TIME: Duration = Duration::from_millis(100);
/// Keys the table tracks (leased or measured), ≈ 150 bytes each.
pub const LEASE_MAX_KEYS: usize = 10_000;
/// A block is at most `1 / LEASE_SHARE` of the bucket (see the module doc).
pub const LEASE_SHARE: u64 = 10;
/// The smallest block worth a lease: one token would cost a charge and a return.
pub const MIN_BLOCK: u64 = 2;
const SHARDS: usize = 16;
const EVICTION_SAMPLE: usize = 8;
/// Keys the sweeper looks at per shard and tick.
const SWEEP_SCAN: usize = 64;

/// How leases are taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseSettings {
    /// `--lease-hot-keys`: every rule is leasable, not only those with `lease: true`.
    pub every_rule: bool,
    /// `--lease-time-ms`: how long a block may be spent after its charge was sent.
    pub time: Duration,
    /// Most keys tracked.
    pub max_keys: usize,
    /// The deadline of refills and returns (the store timeout).
    pub store_timeout: Duration,
}

impl Default for LeaseSettings {
    fn default() -> Self {
        LeaseSettings {
            every_rule: false,
            time: DEFAULT_LEASE_TIME,
            max_keys: LEASE_MAX_KEYS,
            store_timeout: Duration::from_millis(10),
        }
    }
}

/// What a leasable charge gets from the table.
#[derive(Debug)]
pub enum Take {
    /// Answered from the lease.
    Served(Decision),
    /// A refill of this key is in flight: wait for it (`true` when done), then ask again.
    Wait(watch::Receiver<bool>),
    /// Take this block from Redis (in a task), hand the answer to `filled`, then wait.
    Refill(Refill),
    /// Charge Redis as without leases.
    Remote,
}

/// A block to take from Redis for one key. Its `done` sender wakes the waiters.
#[derive(Debug)]
pub struct Refill {
    pub key: String,
    pub params: Params,
    pub block: u64,
    id: u64,
    done: watch::Sender<bool>,
}

impl Refill {
    /// A waiter's view of this refill (true once it is done).
    pub fn subscribe(&self) -> watch::Receiver<bool> {
        self.done.subscribe()
    }
}

/// Unused tokens to give back to a bucket (a `Refund`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Return {
    pub key: String,
    pub params: Params,
    pub tokens: u64,
    /// Window leases: the last moment the refund may be sent (and its deadline).
    pub by: Option<Instant>,
    /// When its lease ended (its tokens stopped being spendable). Without `by` (GCRA), the
    /// refund is sent only until `tokens × unit / limit` after this: by then the bucket has
    /// refilled as many at the limit's rate, and a refund would only credit live traffic.
    pub since: Instant,
}

/// Hits of one key in the current and the previous lease time.
#[derive(Debug, Clone, Copy)]
struct Meter {
    start: Instant,
    current: u64,
    previous: u64,
}

impl Meter {
    fn count(&mut self, hits: u64, now: Instant, period: Duration) {
        let elapsed = now.saturating_duration_since(self.start);
        if elapsed >= period {
            self.previous = if elapsed < period * 2 { self.current } else { 0 };
            self.current = 0;
            self.start = now;
        }
        self.current = self.current.saturating_add(hits);
    }

    /// Hits per lease time.
    fn rate(&self) -> u64 {
        self.current.max(self.previous)
    }
}

/// Tokens this instance holds for one key.
#[derive(Debug, Clone, Copy)]
struct Lease {
    tokens: u64,
    expires: Instant,
    /// Window leases: the window's end, as seen from the block's send time.
    window_end: Option<Instant>,
    /// Redis's answer to the block, and when it came.
    basis: Decision,
    basis_at: Instant,
}

/// What the last Redis answer said about a key.
#[derive(Debug, Clone, Copy)]
struct Hint {
    fits: u64,
    at: Instant,
    window_end: Option<Instant>,
}

#[derive(Debug)]
struct Entry {
    params: Params,
    meter: Meter,
    lease: Option<Lease>,
    refill: Option<(u64, watch::Receiver<bool>)>,
    hint: Option<Hint>,
}

type Shard = Mutex<IndexMap<Box<str>, Entry>>;

/// The leases of one Redis store, shared by every request.
pub struct LeaseTable {
    settings: LeaseSettings,
    shards: Box<[Shard]>,
    shard_cap: usize,
    hasher: RandomState,
    /// Where each shard's sweep resumes.
    cursors: Box<[Mutex<usize>]>,
    /// Oldest first; at most `max_returns` (see `returns::queue`).
    returns: Mutex<VecDeque<Return>>,
    next_refill: AtomicU64,
    served: AtomicU64,
    blocks: AtomicU64,
    taken: AtomicU64,
    returned: AtomicU64,
    forfeited: AtomicU64,
    /// [`Dropped`]'s counters, in its field order.
    dropped: [AtomicU64; 4],
}

impl fmt::Debug for LeaseTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaseTable").field("settings", &self.settings).field("stats", &self.stats()).finish()
    }
}

impl LeaseTable {
    pub fn new(settings: LeaseSettings) -> LeaseTable {
        LeaseTable {
            settings,
            shards: (0..SHARDS).map(|_| Mutex::new(IndexMap::new())).collect(),
            shard_cap: settings.max_keys.div_ceil(SHARDS).max(1),
            hasher: RandomState::new(),
            cursors: (0..SHARDS).map(|_| Mutex::new(0)).collect(),
            returns: Mutex::new(VecDeque::new()),
            next_refill: AtomicU64::new(1),
            served: AtomicU64::new(0),
            blocks: AtomicU64::new(0),
            taken: AtomicU64::new(0),
            returned: AtomicU64::new(0),
            forfeited: AtomicU64::new(0),
            dropped: Default::default(),
        }
    }

    pub fn settings(&self) -> &LeaseSettings {
        &self.settings
    }

    /// Whether this instance holds (or is taking) tokens of `key` at `now`: the hot-key
    /// view's `leased`. One shard lock.
    pub fn is_leased(&self, key: &str, now: Instant) -> bool {
        let shard = self.shard(key);
        shard
            .get(key)
            .is_some_and(|e| e.refill.is_some() || e.lease.is_some_and(|l| l.tokens > 0 && now < l.expires))
    }

    /// Keys tracked.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| lock(s).len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A leasable `Consume(hits)` of `key` at `now`. `first`: the request's first look
    /// (counts the hits); after a wait, `false` (a key no longer tracked then goes to
    /// Redis).
    pub fn take(&self, key: &str, params: &Params, hits: u64, now: Instant, first: bool) -> Take {
        let time = self.settings.time;
        let mut shard = self.shard(key);
        if !shard.contains_key(key) {
            if !first {
                return Take::Remote;
            }
            if shard.len() >= self.shard_cap {
                self.evict_one(&mut shard, now);
            }
            let meter = Meter { start: now, current: 0, previous: 0 };
            shard.insert(key.into(), Entry { params: *params, meter, lease: None, refill: None, hint: None });
        }
        let Some(entry) = shard.get_mut(key) else { return Take::Remote };
        if entry.params != *params {
            // A reload changed the rule: the old tokens go back, the new limit applies now.
            self.retire(key, entry, now);
            entry.refill = None;
            entry.hint = None;
            entry.params = *params;
        }
        if first {
            entry.meter.count(hits, now, time);
        }
        if let Some(lease) = &mut entry.lease {
            if now < lease.expires && lease.tokens >= hits {
                lease.tokens -= hits;
                let decision = lease.served(now);
                self.served.fetch_add(1, Ordering::Relaxed);
                return Take::Served(decision);
            }
            if now < lease.expires && lease.tokens > 0 {
                // Too few for this request, enough for smaller ones: keep it.
                return Take::Remote;
            }
        }
        self.retire(key, entry, now);
        if let Some((_, waiting)) = &entry.refill {
            return Take::Wait(waiting.clone());
        }
        let block = self.block(entry, params, hits, now);
        if block < MIN_BLOCK.max(hits) {
            return Take::Remote;
        }
        let id = self.next_refill.fetch_add(1, Ordering::Relaxed);
        let (done, waiting) = watch::channel(false);
        entry.refill = Some((id, waiting));
        Take::Refill(Refill { key: key.to_string(), params: *params, block, id, done })
    }

    /// Spends `hits` of `key`'s lease at `now` if it holds that many, and nothing else: no
    /// hit counted, no refill, no lease ended (a request out of time takes its last look).
    pub fn spend(&self, key: &str, params: &Params, hits: u64, now: Instant) -> Option<Decision> {
        let mut shard = self.shard(key);
        let entry = shard.get_mut(key).filter(|e| e.params == *params)?;
        let lease = entry.lease.as_mut().filter(|l| now < l.expires && l.tokens >= hits)?;
        lease.tokens -= hits;
        self.served.fetch_add(1, Ordering::Relaxed);
        Some(lease.served(now))
    }

    /// The block to take for `entry` now (0: none).
    fn block(&self, entry: &Entry, params: &Params, hits: u64, now: Instant) -> u64 {
        let time = self.settings.time;
        let capacity = match params.algorithm {
            Algorithm::Gcra => params.burst,
            Algorithm::SlidingWindow | Algorithm::FixedWindow => params.limit,
        };
        let cap = capacity.min(MIN_BLOCK.max(capacity / LEASE_SHARE));
        let mut block = entry.meter.rate().min(cap);
        if let Some(hint) = entry.hint.filter(|h| now.saturating_duration_since(h.at) < time) {
            block = block.min(hint.fits);
        }
        // The tail of a window: a lease would end before it paid off.
        let window_end = entry.hint.and_then(|h| h.window_end);
        if window_end.is_some_and(|end| now < end && end.saturating_duration_since(now) < time) {
            return 0;
        }
        if hits > block {
            return 0;
        }
        block
    }

    /// Redis's answer to `refill` (sent at `sent`), at `now`; wakes its waiters.
    pub fn filled(&self, refill: Refill, sent: Instant, result: &Result<Decision, StoreError>, now: Instant) {
        let time = self.settings.time;
        let granted = matches!(result, Ok(d) if d.allowed);
        let window_end =
            result.as_ref().ok().and_then(|d| window_left(&refill.params, d)).map(|left| sent + left);
        {
            let mut shard = self.shard(&refill.key);
            let current = shard
                .get_mut(refill.key.as_str())
                .filter(|e| e.refill.as_ref().is_some_and(|(id, _)| *id == refill.id));
            match (current, result) {
                (Some(entry), Ok(d)) if granted => {
                    entry.refill = None;
                    self.retire(&refill.key, entry, now);
                    let end = sent + time;
                    let expires = window_end.map_or(end, |w| end.min(w));
                    entry.lease =
                        Some(Lease { tokens: refill.block, expires, window_end, basis: *d, basis_at: now });
                    entry.hint = Some(Hint { fits: d.remaining, at: now, window_end });
                    self.blocks.fetch_add(1, Ordering::Relaxed);
                    self.taken.fetch_add(refill.block, Ordering::Relaxed);
                    if expires <= now {
                        self.retire(&refill.key, entry, now);
                    }
                }
                (Some(entry), _) => {
                    // Denied or failed: single charges for a lease time.
                    entry.refill = None;
                    entry.hint = Some(Hint { fits: 0, at: now, window_end });
                }
                (None, _) if granted => {
                    // Reset, evicted or re-parameterised meanwhile: the block goes back.
                    self.taken.fetch_add(refill.block, Ordering::Relaxed);
                    let by = window_end.map(|w| return_by(w, time));
                    self.queue(Return {
                        key: refill.key.clone(),
                        params: refill.params,
                        tokens: refill.block,
                        by,
                        since: now,
                    });
                }
                (None, _) => {}
            }
        }
        let _ = refill.done.send(true);
    }

    /// Redis's answer to a single leasable charge of `key` under `params`: what fits now.
    pub fn learn(&self, key: &str, params: &Params, result: &Result<Decision, StoreError>, now: Instant) {
        let Ok(decision) = result else { return };
        let mut shard = self.shard(key);
        let Some(entry) = shard.get_mut(key).filter(|e| e.params == *params) else { return };
        let fits = if decision.allowed { decision.remaining } else { 0 };
        let window_end = window_left(params, decision).map(|left| now + left);
        entry.hint =
            Some(Hint { fits, at: now, window_end: window_end.or(entry.hint.and_then(|h| h.window_end)) });
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

    fn shard(&self, key: &str) -> MutexGuard<'_, IndexMap<Box<str>, Entry>> {
        let index = (self.hasher.hash_one(key) % self.shards.len() as u64) as usize;
        lock(&self.shards[index])
    }
}

impl Lease {
    /// The answer for a charge served at `now`, the lease holding `tokens` after it:
    /// Redis's remaining when the block was granted plus what the lease still holds, and
    /// Redis's reset less the time since.
    fn served(&self, now: Instant) -> Decision {
        let since = now.saturating_duration_since(self.basis_at).as_micros();
        let since = u64::try_from(since).unwrap_or(u64::MAX);
        Decision {
            allowed: true,
            remaining: self.basis.remaining.saturating_add(self.tokens).min(MAX_VALUE),
            reset_us: self.basis.reset_us.saturating_sub(since),
        }
    }
}

/// The time left in the window of an answer of a window algorithm (None for GCRA, or
/// when the answer does not tell): a fixed window reports its end; an allowed sliding
/// window with hits in it reports the end of the next window.
fn window_left(params: &Params, decision: &Decision) -> Option<Duration> {
    let left = match params.algorithm {
        Algorithm::Gcra => return None,
        Algorithm::FixedWindow => decision.reset_us,
        Algorithm::SlidingWindow if decision.allowed && decision.reset_us > params.unit_us => {
            decision.reset_us - params.unit_us
        }
        Algorithm::SlidingWindow => return None,
    };
    (left > 0).then(|| Duration::from_micros(left))
}

/// Every mutation under these locks is one map or queue operation: a poisoned lock still
/// holds a consistent value.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests;
