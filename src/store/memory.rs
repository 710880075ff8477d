//! The embedded store: buckets in process memory, for a single instance. Also the
//! limiter of `failure_mode: local` domains while Redis fails (`service`), with the same
//! cap and eviction policy.
//!
//! A fixed number of shards, each a mutex around an `IndexMap` (O(1) random access for
//! sampled eviction), hashed with the std SipHash so that clients choosing keys cannot
//! degrade it. The total number of buckets is capped. A full shard makes room by this
//! order (`make_room`, O(sample)):
//! 1. state that carries nothing (a GCRA TAT in the past, a window two periods old) —
//!    swept in bulk at most every 100 ms, or met in the sample — lossless;
//! 2. of a random sample of 16 live buckets, the one whose loss gives back the fewest
//!    requests ([`algorithm::standing`]), soonest to refill among equals;
//! 3. a bucket at or over its limit only when the whole sample is, even extended to 64:
//!    forgetting it is a free reset for its owner, so a flood of fresh keys (each below
//!    its limit) can never push one out. Evicting one takes a shard (nearly) full of
//!    exhausted buckets, i.e. about `cap × limit` charged requests within the victim's
//!    refill time; such evictions are counted apart (`at_limit_evictions`).
//!
//! No awaits: a charge holds one shard lock for a few hundred nanoseconds; eviction ranks
//! the sample with integer arithmetic only (no allocation). A joint group (`Groups`: charges
//! that stand or fall together) holds the locks of every shard it touches, taken in
//! ascending shard index, while `algorithm::joint` decides it: atomic with respect to every
//! other charge, and deadlock-free (single charges hold one lock; groups lock in one order).

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

use indexmap::IndexMap;
use rand::Rng;

use crate::algorithm::joint::{self, Member};
use crate::algorithm::{self, Decision, Params, Standing, State, Write};

use super::{Charge, Groups};

/// How many entries a full shard looks at to pick a victim.
const EVICTION_SAMPLE: usize = 16;
/// How many it looks at in all before it evicts a bucket at its limit: a sample that is
/// all exhausted by chance (probability `f^16` with a share `f` of the shard exhausted)
/// must not hand out a reset; `f^64` is below 1e-11 for `f` up to 2/3 and 1e-3 at 0.9.
/// Only a shard mostly full of exhausted buckets pays for the longer look (~4 µs, cache
/// misses, against ~1 µs).
const AT_LIMIT_SAMPLE: usize = 64;
/// A full shard sweeps all its expired entries at most this often (µs).
const SWEEP_INTERVAL_US: u64 = 100_000;

/// Process-memory store, capped at `max_keys` buckets.
#[derive(Debug)]
pub struct MemoryStore {
    shards: Box<[Mutex<Shard>]>,
    shard_cap: usize,
    hasher: RandomState,
    lossless_evictions: AtomicU64,
    lossy_evictions: AtomicU64,
    at_limit_evictions: AtomicU64,
}

#[derive(Debug, Default)]
struct Shard {
    map: IndexMap<Box<str>, Entry>,
    /// No entry expires before this (a lower bound; exact right after a sweep).
    min_expiry: u64,
    last_sweep: u64,
}

impl Shard {
    /// The state of `key` if it has not expired at `now`.
    fn live(&self, key: &str, now: u64) -> Option<State> {
        self.map.get(key).filter(|e| e.expires_at > now).map(|e| e.state)
    }
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    state: State,
    expires_at: u64,
    /// The limit the state was written under: eviction ranks the state by it.
    params: Params,
}

/// Counters of the memory store, for metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryStats {
    pub keys: usize,
    /// Evicted state that carried nothing (expired, or counting no request).
    pub lossless_evictions: u64,
    /// Evicted state that still counted requests (at-limit evictions included).
    pub lossy_evictions: u64,
    /// Of the lossy evictions, buckets that were at or over their limit: free resets.
    /// Stays 0 while the cap can hold every exhausted bucket.
    pub at_limit_evictions: u64,
}

impl MemoryStore {
    /// A store holding at most `max_keys` buckets (at least one per shard).
    pub fn new(max_keys: usize) -> MemoryStore {
        let shard_count = (max_keys / 1024).clamp(1, 64);
        let shard_cap = max_keys.div_ceil(shard_count).max(1);
        MemoryStore {
            shards: (0..shard_count).map(|_| Mutex::new(Shard::default())).collect(),
            shard_cap,
            hasher: RandomState::new(),
            lossless_evictions: AtomicU64::new(0),
            lossy_evictions: AtomicU64::new(0),
            at_limit_evictions: AtomicU64::new(0),
        }
    }

    /// Charges every bucket with the system clock.
    pub fn charge(&self, batch: &[Charge]) -> Vec<Decision> {
        let now = now_us();
        batch.iter().map(|c| self.charge_at(c, now)).collect()
    }

    /// Charges `group` as one group (all or nothing) at `now`: what a `failure_mode: local`
    /// domain charges a group with whose store call failed.
    pub fn charge_group_at(&self, group: &[Charge], now: u64) -> Vec<Decision> {
        match group {
            [charge] => vec![self.charge_at(charge, now)],
            group => self.charge_joint(group, now),
        }
    }

    /// Charges one bucket at `now` (µs since the epoch). Public for deterministic tests.
    pub fn charge_at(&self, charge: &Charge, now: u64) -> Decision {
        // A poisoned shard only means another thread panicked mid-charge; the map itself is
        // still consistent (every mutation is a single insert/remove), so keep serving.
        let mut shard = self.shards[self.shard_of(&charge.key)].lock().unwrap_or_else(|e| e.into_inner());
        let outcome = algorithm::apply(shard.live(&charge.key, now), now, &charge.params, charge.hits);
        self.write(&mut shard, &charge.key, outcome.write, charge.params, now);
        outcome.decision
    }

    /// Charges a batch whose `groups` stand or fall together (see [`Groups`]) with the
    /// system clock.
    pub fn charge_groups(&self, batch: &[Charge], groups: &Groups) -> Vec<Decision> {
        if groups.is_each() {
            return self.charge(batch);
        }
        self.charge_groups_at(batch, groups, now_us())
    }

    /// Charges a batch whose `groups` stand or fall together, at `now`: a group of one is
    /// [`charge_at`](Self::charge_at); a larger one is decided by [`joint::apply`] with
    /// every shard it touches locked (see [`Self::charge_joint`]). Also what a
    /// `failure_mode: local` domain charges its groups with while Redis fails.
    pub fn charge_groups_at(&self, batch: &[Charge], groups: &Groups, now: u64) -> Vec<Decision> {
        let mut decisions = Vec::with_capacity(batch.len());
        for range in groups.ranges(batch.len()) {
            match &batch[range] {
                [charge] => decisions.push(self.charge_at(charge, now)),
                group => decisions.extend(self.charge_joint(group, now)),
            }
        }
        decisions
    }

    /// One group, atomically with respect to every other charge: the shards of its keys
    /// are locked in ascending index (deduplicated), the order every multi-shard lock
    /// follows, and a single charge holds one shard only — so no two charges can wait on
    /// each other. The group is decided on the states read under those locks and written
    /// (or not) before they are released.
    fn charge_joint(&self, group: &[Charge], now: u64) -> Vec<Decision> {
        let mut keys: Vec<&str> = Vec::with_capacity(group.len());
        let members: Vec<Member> = group
            .iter()
            .map(|c| {
                let key = keys.iter().position(|k| *k == c.key).unwrap_or_else(|| {
                    keys.push(&c.key);
                    keys.len() - 1
                });
                Member { key, params: c.params, hits: c.hits }
            })
            .collect();
        let shard_of: Vec<usize> = keys.iter().map(|k| self.shard_of(k)).collect();
        let mut order = shard_of.clone();
        order.sort_unstable();
        order.dedup();
        let mut locked: Vec<MutexGuard<'_, Shard>> =
            order.iter().map(|&i| self.shards[i].lock().unwrap_or_else(|e| e.into_inner())).collect();
        let guard = |i: usize| order.binary_search(&shard_of[i]).unwrap_or(0);
        let stored: Vec<Option<State>> =
            keys.iter().enumerate().map(|(i, k)| locked[guard(i)].live(k, now)).collect();
        let outcome = joint::apply(&stored, now, &members);
        for w in outcome.writes.iter().flatten() {
            self.write(&mut locked[guard(w.key)], keys[w.key], w.write, w.params, now);
        }
        outcome.decisions
    }

    fn shard_of(&self, key: &str) -> usize {
        (self.hasher.hash_one(key) % self.shards.len() as u64) as usize
    }

    /// Applies one write to a bucket of `shard` (locked by the caller), making room when a
    /// new bucket meets a full shard.
    fn write(&self, shard: &mut Shard, key: &str, write: Write, params: Params, now: u64) {
        match write {
            Write::Keep => {}
            Write::Delete => {
                shard.map.swap_remove(key);
            }
            Write::Put { state, expires_at } => {
                let entry = Entry { state, expires_at, params };
                if let Some(slot) = shard.map.get_mut(key) {
                    *slot = entry;
                } else {
                    if shard.map.len() >= self.shard_cap {
                        self.make_room(shard, now);
                    }
                    shard.map.insert(key.into(), entry);
                }
                shard.min_expiry = shard.min_expiry.min(expires_at);
            }
        }
    }

    /// Frees at least one slot in a full shard, by the order in the module doc.
    fn make_room(&self, shard: &mut Shard, now: u64) {
        if now >= shard.min_expiry && now >= shard.last_sweep.saturating_add(SWEEP_INTERVAL_US) {
            let removed = sweep(shard, now);
            self.lossless_evictions.fetch_add(removed as u64, Ordering::Relaxed);
            if shard.map.len() < self.shard_cap {
                return;
            }
        }
        let Some((i, standing)) = pick_victim(shard, now) else { return };
        shard.map.swap_remove_index(i);
        let counter = if standing.given_back == 0 { &self.lossless_evictions } else { &self.lossy_evictions };
        counter.fetch_add(1, Ordering::Relaxed);
        if standing.at_limit {
            self.at_limit_evictions.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Forgets the bucket of `key` (an operator's reset): its next charge finds it full.
    /// Whether it held one.
    pub fn remove(&self, key: &str) -> bool {
        let index = (self.hasher.hash_one(key) % self.shards.len() as u64) as usize;
        let mut shard = self.shards[index].lock().unwrap_or_else(|e| e.into_inner());
        shard.map.swap_remove(key).is_some()
    }

    /// Removes every expired bucket now (called periodically by the server).
    pub fn sweep_expired(&self, now: u64) -> usize {
        let mut total = 0;
        for shard in self.shards.iter() {
            let mut shard = shard.lock().unwrap_or_else(|e| e.into_inner());
            if now >= shard.min_expiry {
                total += sweep(&mut shard, now);
            }
        }
        self.lossless_evictions.fetch_add(total as u64, Ordering::Relaxed);
        total
    }

    /// Current key count and eviction counters.
    pub fn stats(&self) -> MemoryStats {
        let keys = self.shards.iter().map(|s| s.lock().unwrap_or_else(|e| e.into_inner()).map.len()).sum();
        MemoryStats {
            keys,
            lossless_evictions: self.lossless_evictions.load(Ordering::Relaxed),
            lossy_evictions: self.lossy_evictions.load(Ordering::Relaxed),
            at_limit_evictions: self.at_limit_evictions.load(Ordering::Relaxed),
        }
    }

    /// The cap on buckets actually enforced (shard capacity × shards, ≥ the requested cap
    /// by less than one shard).
    pub fn capacity(&self) -> usize {
        self.shard_cap * self.shards.len()
    }
}

/// The entry to evict among `EVICTION_SAMPLE` random ones (with replacement: cheaper than
/// distinct picks, and a repeat only narrows the sample), up to `AT_LIMIT_SAMPLE` while
/// all of them are at their limit: the smallest `(standing, expires_at)`, stopping early
/// at one that carries nothing.
fn pick_victim(shard: &Shard, now: u64) -> Option<(usize, Standing)> {
    let len = shard.map.len();
    if len == 0 {
        return None;
    }
    let mut rng = rand::rng();
    let mut victim: Option<(usize, Standing, u64)> = None;
    for looked in 0..AT_LIMIT_SAMPLE {
        let enough = looked >= EVICTION_SAMPLE.min(len);
        if enough && victim.is_some_and(|(_, s, _)| !s.at_limit) {
            break;
        }
        let i = rng.random_range(0..len);
        let Some((_, entry)) = shard.map.get_index(i) else { continue };
        let standing = if entry.expires_at <= now {
            Standing { at_limit: false, given_back: 0 }
        } else {
            algorithm::standing(entry.state, now, &entry.params)
        };
        if standing.given_back == 0 && !standing.at_limit {
            return Some((i, standing));
        }
        if victim.is_none_or(|(_, s, expires)| (standing, entry.expires_at) < (s, expires)) {
            victim = Some((i, standing, entry.expires_at));
        }
    }
    victim.map(|(i, standing, _)| (i, standing))
}

/// Drops every expired entry of a shard and makes `min_expiry` exact.
fn sweep(shard: &mut Shard, now: u64) -> usize {
    let before = shard.map.len();
    shard.map.retain(|_, e| e.expires_at > now);
    shard.min_expiry = shard.map.values().map(|e| e.expires_at).min().unwrap_or(u64::MAX);
    shard.last_sweep = now;
    before - shard.map.len()
}

/// The system clock in µs since the epoch (0 if the clock is before 1970).
pub fn now_us() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_micros() as u64).unwrap_or(0)
}

#[cfg(test)]
mod tests;
