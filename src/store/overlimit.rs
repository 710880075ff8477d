//! The over-limit cache: buckets Redis has just denied, answered locally until they can pass.
//!
//! When Redis denies `Consume(n)` on a bucket with `reset_us = r`, the same request cannot
//! pass before `r` has gone by: consumes only push a bucket further (GCRA's TAT, a window's
//! counters), so only a refund or a config change can end the denial early. Until then the
//! store answers that bucket's `Consume(n)` here — denied, `remaining` 0, `reset` the time
//! left — and Redis never sees it: a flood from one abusive key costs one Redis call per
//! denial period, not one per request.
//!
//! Exactness rules, each keeping a local answer equal to what Redis would say:
//! - the time left is measured on the monotonic clock from the moment the pipeline was
//!   *sent* (Redis ran the script later, so the entry expires early, never late) and no
//!   wall clock is compared with Redis's `TIME`;
//! - only the same `hits` and the same `Params` are answered (another hit count passes at
//!   another time; a reload that raised the limit must reach Redis);
//! - a refund (`is_negative_hits`) always goes to Redis and drops the entry, before and
//!   after the call; any allowed answer from Redis drops it too;
//! - a denial that a refund may have overtaken is never learned (below);
//! - an entry lives at most `MAX_LOCAL_DENIAL` (1 s), which bounds how long a refund or an
//!   admin reset (`POST /v1/reset`) made through *another* Tollgate instance can go unseen.
//!   One second, not the denial's full length: an operator who resets a customer's bucket
//!   expects every replica to admit within a moment, while a flood still costs Redis one
//!   call per key per second at most.
//!
//! Refunds racing denials. Replies come back on several connections and are learned by
//! several tasks, so a denial computed *before* a refund ran can be learned *after* the
//! refund's reply dropped the entry; inserted then, it would deny a bucket Redis now
//! allows. Every `forget` (a refund) therefore takes the next number of a refund counter
//! and writes it into its key's *stripe* (one of `STRIPES` slots picked by key hash: fixed
//! memory, no per-key state). A pipeline reads the counter when it is sent (its `Epoch`,
//! one atomic load per call to Redis) and `learn` inserts a denial only if no refund of its
//! stripe was numbered after that. A denial Redis computed before a refund ran was sent
//! before that refund's reply came back, so the `forget` after the reply outnumbers it:
//! either that `forget` finds the entry and drops it, or the insert sees the stripe and
//! skips. Another key of the same stripe only makes an insert skip (that bucket is asked
//! again: lost caching, never a wrong answer). A refund that failed (timeout, dropped
//! connection) may still run later, so its stripe learns no denial sent within
//! `MAX_LOCAL_DENIAL` of it; one that runs even later is bounded like another instance's.
//!
//! Reloads. The key holds algorithm and unit but not limit or burst (`key`), so a reload
//! can charge one bucket under other `Params`; those charges go to Redis (rule above). They
//! cannot end an entry's denial early: a consume under any params only moves the TAT or
//! the window's counter forward and its expiry later (see the Lua scripts), and a refund
//! under any params goes through `forget`. So a limit lowered then restored, or a rule
//! removed and re-added, finds its old entry still exact: every change made to a bucket
//! through this store is a consume or a refund. What remains are changes this store does
//! not see: another instance (a rolling update with another config), a key deleted by
//! hand, a failover that lost writes; each is bounded by `MAX_LOCAL_DENIAL`.
//!
//! Peeks always go to Redis: their reset describes the bucket, which this cache does not
//! know. Memory is bounded: sharded maps with a total cap; a full shard evicts an expired
//! entry of a random sample first, else the sampled one that expires soonest (eviction is
//! lossless for correctness: that bucket just goes back to Redis). Locks are plain mutexes
//! held for one map operation, never across an await.

use std::collections::hash_map::RandomState;
use std::fmt;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use indexmap::IndexMap;
use rand::Rng;
use tokio::time::Instant;

use crate::algorithm::{Decision, Hits, Params};

use super::charge::{Charge, StoreError};

/// The longest a denial is answered locally before Redis is asked again: the bound on how
/// long another instance's refund or admin reset can go unseen by this one.
pub const MAX_LOCAL_DENIAL: Duration = Duration::from_secs(1);
/// How many entries a full shard looks at to pick a victim.
const EVICTION_SAMPLE: usize = 8;
const SHARDS: usize = 16;
/// Slots refunds are recorded in (16 bytes each). More stripes, fewer denials of other
/// keys skipped while a refund is in flight.
const STRIPES: usize = 4096;

/// One shard: bucket key → its denial.
type Shard = Mutex<IndexMap<Box<str>, Denial>>;

/// Buckets known to be denied, shared by every request of one Redis store.
pub struct OverLimitCache {
    shards: Box<[Shard]>,
    shard_cap: usize,
    hasher: RandomState,
    /// Entries over all shards, plus inserts in progress. Lets the hot path skip every lock
    /// while nothing is denied.
    len: AtomicUsize,
    local_answers: AtomicU64,
    /// Refunds forgotten since the start: the last one's number. An `Epoch` is a reading.
    refunds: AtomicU64,
    /// What refunds did to the keys of each stripe (index from the key's hash).
    stripes: Box<[Stripe]>,
    /// The origin of `Stripe::unsettled_until`.
    born: Instant,
}

/// Refunds of the keys of one stripe.
#[derive(Debug, Default)]
struct Stripe {
    /// The number of the last refund of one of these keys (0: none).
    last_refund: AtomicU64,
    /// µs after `born`: denials sent before then are not learned, because a refund of one
    /// of these keys failed and may still run.
    unsettled_until: AtomicU64,
}

/// The refund counter when a pipeline was sent. `learn` needs it to tell whether a refund
/// may have run between this pipeline's charges and their answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Epoch(u64);

/// One denied `Consume(hits)` under `params`.
#[derive(Debug, Clone, Copy)]
struct Denial {
    hits: u64,
    params: Params,
    /// When the request passes again (send time + Redis's reset): the reset reported.
    until: Instant,
    /// When the entry stops answering: `until`, capped at send time + `MAX_LOCAL_DENIAL`.
    expires: Instant,
}

impl fmt::Debug for OverLimitCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OverLimitCache")
            .field("len", &self.len())
            .field("shard_cap", &self.shard_cap)
            .field("local_answers", &self.local_answers())
            .field("refunds", &self.refunds.load(Ordering::Relaxed))
            .finish()
    }
}

impl OverLimitCache {
    /// A cache holding at most about `max_entries` buckets (at least one per shard).
    pub fn new(max_entries: usize) -> OverLimitCache {
        OverLimitCache::with_stripes(max_entries, STRIPES)
    }

    fn with_stripes(max_entries: usize, stripes: usize) -> OverLimitCache {
        OverLimitCache {
            shards: (0..SHARDS).map(|_| Mutex::new(IndexMap::new())).collect(),
            shard_cap: max_entries.div_ceil(SHARDS).max(1),
            hasher: RandomState::new(),
            len: AtomicUsize::new(0),
            local_answers: AtomicU64::new(0),
            refunds: AtomicU64::new(0),
            stripes: (0..stripes.max(1)).map(|_| Stripe::default()).collect(),
            born: Instant::now(),
        }
    }

    /// True when no bucket is cached (one atomic load: the common, fast case).
    pub fn is_empty(&self) -> bool {
        self.len.load(Ordering::Relaxed) == 0
    }

    /// Buckets currently cached (expired ones included until they are dropped).
    pub fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed)
    }

    /// Charges answered locally since the start.
    pub fn local_answers(&self) -> u64 {
        self.local_answers.load(Ordering::Relaxed)
    }

    /// Read right before a pipeline is sent, and passed to `learn` with its answers.
    pub fn epoch(&self) -> Epoch {
        // SeqCst: a refund whose reply came back after this pipeline was sent must number
        // after this reading.
        Epoch(self.refunds.load(Ordering::SeqCst))
    }

    /// The local answer for `charge` at `now`: `Some(denied)` only for a `Consume` with the
    /// hits and params of a live denial. Drops the entry if it has expired.
    pub fn answer(&self, charge: &Charge, now: Instant) -> Option<Decision> {
        let Hits::Consume(hits) = charge.hits else { return None };
        if self.is_empty() {
            return None;
        }
        let mut shard = self.shard(self.hash(&charge.key));
        let denial = *shard.get(charge.key.as_str())?;
        if now >= denial.expires {
            shard.swap_remove(charge.key.as_str());
            self.len.fetch_sub(1, Ordering::Relaxed);
            return None;
        }
        if denial.hits != hits || denial.params != charge.params {
            return None;
        }
        drop(shard);
        self.local_answers.fetch_add(1, Ordering::Relaxed);
        let left = denial.until.saturating_duration_since(now);
        Some(Decision { allowed: false, remaining: 0, reset_us: (left.as_micros() as u64).max(1) })
    }

    /// Learns from Redis's answer to `charge`, whose pipeline was sent at `sent_at`, when
    /// `epoch()` read `epoch`.
    pub fn learn(
        &self,
        charge: &Charge,
        result: &Result<Decision, StoreError>,
        sent_at: Instant,
        epoch: Epoch,
    ) {
        match (charge.hits, result) {
            (Hits::Consume(hits), Ok(d)) if !d.allowed => {
                self.insert(charge, hits, d.reset_us, sent_at, epoch)
            }
            // Ran, or never sent (breaker open, in-flight cap): nothing of it can run later.
            (Hits::Refund(_), Ok(_) | Err(StoreError::CircuitOpen | StoreError::Overloaded)) => {
                self.forget(&charge.key)
            }
            // It may have run, or may still run: see the module doc.
            (Hits::Refund(_), Err(_)) => {
                self.unsettle(&charge.key, sent_at);
                self.forget(&charge.key);
            }
            (_, Ok(Decision { allowed: true, .. })) => self.remove(&charge.key),
            _ => {}
        }
    }

    /// A refund of `key` is about to run or has run: drops the bucket's entry, if any, and
    /// keeps denials sent before now from being learned for it.
    pub fn forget(&self, key: &str) {
        let hash = self.hash(key);
        let number = self.refunds.fetch_add(1, Ordering::SeqCst) + 1;
        self.stripe(hash).last_refund.fetch_max(number, Ordering::SeqCst);
        // Skipping the lock is safe: an insert counts itself in `len` before it reads the
        // stripe (both SeqCst), so either this load sees it, or it sees this refund.
        if self.len.load(Ordering::SeqCst) == 0 {
            return;
        }
        self.remove_hashed(hash, key);
    }

    /// Drops the bucket's entry, if any (Redis allowed it: nothing to keep from learning).
    fn remove(&self, key: &str) {
        if !self.is_empty() {
            self.remove_hashed(self.hash(key), key);
        }
    }

    fn remove_hashed(&self, hash: u64, key: &str) {
        if self.shard(hash).swap_remove(key).is_some() {
            self.len.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// A refund of `key` sent at `sent_at` failed: its stripe learns no denial sent within
    /// `MAX_LOCAL_DENIAL` of it.
    fn unsettle(&self, key: &str, sent_at: Instant) {
        let until = self.micros(sent_at).saturating_add(MAX_LOCAL_DENIAL.as_micros() as u64);
        self.stripe(self.hash(key)).unsettled_until.fetch_max(until, Ordering::SeqCst);
    }

    fn insert(&self, charge: &Charge, hits: u64, reset_us: u64, sent_at: Instant, epoch: Epoch) {
        // A reset past the clock's range (cannot happen with Linux's i64 seconds) is not cached.
        let Some(until) = sent_at.checked_add(Duration::from_micros(reset_us)) else { return };
        let expires = until.min(sent_at + MAX_LOCAL_DENIAL);
        let denial = Denial { hits, params: charge.params, until, expires };
        let hash = self.hash(&charge.key);
        let stripe = self.stripe(hash);
        let mut shard = self.shard(hash);
        // Counted before the stripe is read: the other half of `forget`'s lock skipping.
        self.len.fetch_add(1, Ordering::SeqCst);
        let overtaken = stripe.last_refund.load(Ordering::SeqCst) > epoch.0
            || self.micros(sent_at) < stripe.unsettled_until.load(Ordering::SeqCst);
        if overtaken {
            self.len.fetch_sub(1, Ordering::Relaxed);
            return;
        }
        if let Some(slot) = shard.get_mut(charge.key.as_str()) {
            *slot = denial;
            self.len.fetch_sub(1, Ordering::Relaxed);
            return;
        }
        if shard.len() >= self.shard_cap {
            evict_one(&mut shard, sent_at);
            self.len.fetch_sub(1, Ordering::Relaxed);
        }
        shard.insert(charge.key.as_str().into(), denial);
    }

    fn hash(&self, key: &str) -> u64 {
        self.hasher.hash_one(key)
    }

    fn shard(&self, hash: u64) -> MutexGuard<'_, IndexMap<Box<str>, Denial>> {
        let index = (hash % self.shards.len() as u64) as usize;
        // Every mutation is one insert or remove: a poisoned shard is still consistent.
        self.shards[index].lock().unwrap_or_else(|e| e.into_inner())
    }

    fn stripe(&self, hash: u64) -> &Stripe {
        // The high half: independent of the shard index, taken from the low bits.
        &self.stripes[((hash >> 32) % self.stripes.len() as u64) as usize]
    }

    fn micros(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.born).as_micros()).unwrap_or(u64::MAX)
    }
}

/// Removes one entry of a full, non-empty shard: the first expired one of a random sample,
/// else the sampled one that expires soonest.
fn evict_one(shard: &mut IndexMap<Box<str>, Denial>, now: Instant) {
    let mut rng = rand::rng();
    let mut victim: Option<(usize, Instant)> = None;
    let len = shard.len();
    // A small shard is looked at whole; a large one through a random sample.
    for n in 0..EVICTION_SAMPLE.min(len) {
        let i = if len <= EVICTION_SAMPLE { n } else { rng.random_range(0..len) };
        let Some((_, denial)) = shard.get_index(i) else { continue };
        if denial.expires <= now {
            victim = Some((i, denial.expires));
            break;
        }
        if victim.is_none_or(|(_, soonest)| denial.expires < soonest) {
            victim = Some((i, denial.expires));
        }
    }
    let i = victim.map_or(0, |(i, _)| i);
    shard.swap_remove_index(i);
}

#[cfg(test)]
mod tests;
