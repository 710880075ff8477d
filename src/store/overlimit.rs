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
//! - an entry lives at most `MAX_LOCAL_DENIAL`, which bounds how long a refund made through
//!   *another* Tollgate instance can go unseen.
//!
//! Peeks always go to Redis: their reset describes the bucket, which this cache does not
//! know. Memory is bounded: sharded maps with a total cap; a full shard evicts an expired
//! entry of a random sample first, else the sampled one that expires soonest (eviction is
//! lossless for correctness: that bucket just goes back to Redis). Locks are plain mutexes
//! held for one map operation, never across an await.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use indexmap::IndexMap;
use rand::Rng;
use tokio::time::Instant;

use crate::algorithm::{Decision, Hits, Params};

use super::{Charge, StoreError};

/// The longest a denial is answered locally before Redis is asked again.
pub const MAX_LOCAL_DENIAL: Duration = Duration::from_secs(60);
/// How many entries a full shard looks at to pick a victim.
const EVICTION_SAMPLE: usize = 8;
const SHARDS: usize = 16;

/// One shard: bucket key → its denial.
type Shard = Mutex<IndexMap<Box<str>, Denial>>;

/// Buckets known to be denied, shared by every request of one Redis store.
#[derive(Debug)]
pub struct OverLimitCache {
    shards: Box<[Shard]>,
    shard_cap: usize,
    hasher: RandomState,
    /// Entries over all shards. Lets the hot path skip every lock while nothing is denied.
    len: AtomicUsize,
    local_answers: AtomicU64,
}

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

impl OverLimitCache {
    /// A cache holding at most about `max_entries` buckets (at least one per shard).
    pub fn new(max_entries: usize) -> OverLimitCache {
        OverLimitCache {
            shards: (0..SHARDS).map(|_| Mutex::new(IndexMap::new())).collect(),
            shard_cap: max_entries.div_ceil(SHARDS).max(1),
            hasher: RandomState::new(),
            len: AtomicUsize::new(0),
            local_answers: AtomicU64::new(0),
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

    /// The local answer for `charge` at `now`: `Some(denied)` only for a `Consume` with the
    /// hits and params of a live denial. Drops the entry if it has expired.
    pub fn answer(&self, charge: &Charge, now: Instant) -> Option<Decision> {
        let Hits::Consume(hits) = charge.hits else { return None };
        if self.is_empty() {
            return None;
        }
        let mut shard = self.shard(&charge.key);
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

    /// Learns from Redis's answer to `charge`, whose pipeline was sent at `sent_at`.
    pub fn learn(&self, charge: &Charge, result: &Result<Decision, StoreError>, sent_at: Instant) {
        match (charge.hits, result) {
            (Hits::Consume(hits), Ok(d)) if !d.allowed => self.insert(charge, hits, d.reset_us, sent_at),
            (Hits::Refund(_), _) | (_, Ok(Decision { allowed: true, .. })) => self.forget(&charge.key),
            _ => {}
        }
    }

    /// Drops the bucket's entry, if any.
    pub fn forget(&self, key: &str) {
        if self.is_empty() {
            return;
        }
        if self.shard(key).swap_remove(key).is_some() {
            self.len.fetch_sub(1, Ordering::Relaxed);
        }
    }

    fn insert(&self, charge: &Charge, hits: u64, reset_us: u64, sent_at: Instant) {
        // A reset past the clock's range (cannot happen with Linux's i64 seconds) is not cached.
        let Some(until) = sent_at.checked_add(Duration::from_micros(reset_us)) else { return };
        let expires = until.min(sent_at + MAX_LOCAL_DENIAL);
        let denial = Denial { hits, params: charge.params, until, expires };
        let mut shard = self.shard(&charge.key);
        if let Some(slot) = shard.get_mut(charge.key.as_str()) {
            *slot = denial;
            return;
        }
        if shard.len() >= self.shard_cap {
            evict_one(&mut shard, sent_at);
            self.len.fetch_sub(1, Ordering::Relaxed);
        }
        shard.insert(charge.key.as_str().into(), denial);
        self.len.fetch_add(1, Ordering::Relaxed);
    }

    fn shard(&self, key: &str) -> MutexGuard<'_, IndexMap<Box<str>, Denial>> {
        let index = (self.hasher.hash_one(key) % self.shards.len() as u64) as usize;
        // Every mutation is one insert or remove: a poisoned shard is still consistent.
        self.shards[index].lock().unwrap_or_else(|e| e.into_inner())
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
mod tests {
    use super::*;
    use crate::algorithm::Algorithm;

    const PARAMS: Params = Params { algorithm: Algorithm::Gcra, limit: 5, unit_us: 60_000_000, burst: 5 };

    fn charge(key: &str, hits: Hits) -> Charge {
        Charge { key: key.into(), params: PARAMS, hits }
    }

    fn denied(reset_us: u64) -> Result<Decision, StoreError> {
        Ok(Decision { allowed: false, remaining: 0, reset_us })
    }

    #[test]
    fn a_denied_consume_is_answered_locally_until_its_reset() {
        let cache = OverLimitCache::new(100);
        let c = charge("k", Hits::Consume(1));
        let sent = Instant::now();
        assert_eq!(cache.answer(&c, sent), None);
        cache.learn(&c, &denied(12_000_000), sent);
        assert_eq!(cache.len(), 1);
        let later = sent + Duration::from_secs(2);
        let d = cache.answer(&c, later).expect("answered locally");
        assert_eq!(d, Decision { allowed: false, remaining: 0, reset_us: 10_000_000 });
        assert_eq!(cache.answer(&c, sent + Duration::from_secs(12)), None, "expired");
        assert!(cache.is_empty(), "an expired entry is dropped when seen");
        assert_eq!(cache.local_answers(), 1);
    }

    #[test]
    fn other_hits_params_peeks_and_refunds_go_to_redis() {
        let cache = OverLimitCache::new(100);
        let sent = Instant::now();
        cache.learn(&charge("k", Hits::Consume(2)), &denied(5_000_000), sent);
        assert_eq!(cache.answer(&charge("k", Hits::Consume(1)), sent), None);
        assert_eq!(cache.answer(&charge("k", Hits::Peek), sent), None);
        assert_eq!(cache.answer(&charge("k", Hits::Refund(2)), sent), None);
        let raised = Charge { params: Params { limit: 500, ..PARAMS }, ..charge("k", Hits::Consume(2)) };
        assert_eq!(cache.answer(&raised, sent), None);
        assert!(cache.answer(&charge("k", Hits::Consume(2)), sent).is_some());
        cache.learn(&charge("k", Hits::Refund(1)), &Err(StoreError::Timeout), sent);
        assert!(cache.is_empty(), "a refund clears the entry whatever Redis answered");
    }

    #[test]
    fn an_allowed_answer_clears_and_errors_teach_nothing() {
        let cache = OverLimitCache::new(100);
        let sent = Instant::now();
        let c = charge("k", Hits::Consume(1));
        cache.learn(&c, &Err(StoreError::Timeout), sent);
        assert!(cache.is_empty());
        cache.learn(&c, &denied(1_000_000), sent);
        cache.learn(&c, &Ok(Decision { allowed: true, remaining: 3, reset_us: 9 }), sent);
        assert!(cache.is_empty());
    }

    #[test]
    fn long_denials_are_capped_and_never_overflow() {
        let cache = OverLimitCache::new(100);
        let sent = Instant::now();
        let c = charge("k", Hits::Consume(1));
        cache.learn(&c, &denied(3_600_000_000), sent);
        let d = cache.answer(&c, sent + Duration::from_secs(59)).expect("still cached");
        assert_eq!(d.reset_us, 3_541_000_000, "the reported reset is Redis's, not the cap");
        assert_eq!(cache.answer(&c, sent + MAX_LOCAL_DENIAL), None);
        // The largest reset cannot overflow the clock: it is cached, capped like the others.
        cache.learn(&c, &denied(u64::MAX), sent);
        assert!(cache.answer(&c, sent).is_some_and(|d| d.reset_us == u64::MAX));
        assert_eq!(cache.answer(&c, sent + MAX_LOCAL_DENIAL), None);
    }

    #[test]
    fn the_cap_holds_and_expired_entries_go_first() {
        let cache = OverLimitCache::new(32);
        let sent = Instant::now();
        for i in 0..1_000 {
            cache.learn(&charge(&format!("k{i}"), Hits::Consume(1)), &denied(30_000_000), sent);
        }
        assert!(cache.len() <= 32, "{}", cache.len());
        let total: usize = cache.shards.iter().map(|s| s.lock().map(|m| m.len()).unwrap_or(0)).sum();
        assert_eq!(total, cache.len());
        let mut shard = IndexMap::new();
        let soon = Denial { hits: 1, params: PARAMS, until: sent, expires: sent };
        let late = Denial { expires: sent + Duration::from_secs(9), ..soon };
        shard.insert(Box::<str>::from("late"), late);
        shard.insert(Box::<str>::from("soon"), soon);
        evict_one(&mut shard, sent + Duration::from_secs(1));
        assert!(shard.contains_key("late") && !shard.contains_key("soon"));
    }
}
