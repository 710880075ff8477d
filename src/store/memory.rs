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
//! the sample with integer arithmetic only (no allocation). A charge hashes its key once
//! (SipHash, keyed per process): the hash picks the shard from bits the shard's table does
//! not use to place or tag entries, and the same hash finds, updates or inserts the entry
//! in one probe (`indexmap`'s raw entry API), since every shard's map hashes with the
//! store's own `RandomState`. Shards sit on cache lines of their own, so two threads
//! charging neighbouring shards do not take each other's lock line. Keys are held inline
//! when short (`stored_key`): no allocation per new bucket, no pointer to follow. A joint group (`Groups`: charges
//! that stand or fall together) holds the locks of every shard it touches, taken in
//! ascending shard index, while `algorithm::joint` decides it: atomic with respect to every
//! other charge, and deadlock-free (single charges hold one lock; groups lock in one order).

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

use indexmap::map::raw_entry_v1::{RawEntryApiV1, RawEntryMut};

use crate::algorithm::joint::{self, Member};
use crate::algorithm::reservation::Book;
use crate::algorithm::{self, Decision, Params, State, Write};

use self::evict::{pick_victim, sweep};
use self::shard::{Entry, Shard};
use super::charge::{Charge, Groups};

mod evict;
mod reserve;
mod shard;
mod stored_key;

/// A full shard sweeps all its expired entries at most this often (µs).
const SWEEP_INTERVAL_US: u64 = 100_000;

/// Process-memory store, capped at `max_keys` buckets.
#[derive(Debug)]
pub struct MemoryStore {
    shards: Box<[Padded]>,
    shard_cap: usize,
    hasher: RandomState,
    lossless_evictions: AtomicU64,
    lossy_evictions: AtomicU64,
    at_limit_evictions: AtomicU64,
    /// Reservation records by their bucket's record key (`reserve`): taken only while
    /// the shard locks of a reservation's group are held (after them), or alone.
    books: Mutex<HashMap<String, Book>>,
    /// Reservations found expired unsettled by the periodic sweep (`reserve`).
    expired_reservations: AtomicU64,
    /// Records in `books` (changed only under its lock), capped at the bucket cap.
    records: AtomicUsize,
    /// Calls whose record was not kept because `records` was at the cap (`reserve`).
    unrecorded_reservations: AtomicU64,
}

/// One shard's lock on cache lines of its own (128 bytes: adjacent-line prefetchers pair
/// lines): without it, two shards share a line and the threads charging them contend
/// on it as if on one lock.
#[derive(Debug)]
#[repr(align(128))]
struct Padded(Mutex<Shard>);

impl Padded {
    /// A poisoned shard only means another thread panicked mid-charge; the map itself is
    /// still consistent (every mutation is a single insert/remove), so keep serving.
    fn lock(&self) -> MutexGuard<'_, Shard> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
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
    /// Reservation records held (capped at the bucket cap).
    pub reservation_records: usize,
    /// Reservation calls decided without keeping their record: the records were at the cap.
    pub unrecorded_reservations: u64,
}

impl MemoryStore {
    /// A store holding at most `max_keys` buckets (at least one per shard).
    pub fn new(max_keys: usize) -> MemoryStore {
        let shard_count = (max_keys / 1024).clamp(1, 64);
        let shard_cap = max_keys.div_ceil(shard_count).max(1);
        let hasher = RandomState::new();
        MemoryStore {
            shards: (0..shard_count).map(|_| Padded(Mutex::new(Shard::new(hasher.clone())))).collect(),
            shard_cap,
            hasher,
            lossless_evictions: AtomicU64::new(0),
            lossy_evictions: AtomicU64::new(0),
            at_limit_evictions: AtomicU64::new(0),
            books: Mutex::new(HashMap::new()),
            expired_reservations: AtomicU64::new(0),
            records: AtomicUsize::new(0),
            unrecorded_reservations: AtomicU64::new(0),
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
    ///
    /// One hash and one probe of the shard's table: the entry found (or the free place)
    /// is read, decided on and written without looking the key up again.
    pub fn charge_at(&self, charge: &Charge, now: u64) -> Decision {
        let key = charge.key.as_str();
        let hash = self.hash(key);
        let mut guard = self.shards[self.shard_index(hash)].lock();
        let shard = &mut *guard;
        let full = shard.map.len() >= self.shard_cap;
        let (outcome, expires_at) = match shard.map.raw_entry_mut_v1().from_key_hashed_nocheck(hash, key) {
            RawEntryMut::Occupied(mut slot) => {
                let stored = Some(slot.get().state).filter(|_| slot.get().expires_at() > now);
                let outcome = algorithm::apply(stored, now, &charge.params, charge.hits);
                let expires_at = match outcome.write {
                    Write::Keep => None,
                    Write::Delete => {
                        slot.swap_remove();
                        None
                    }
                    Write::Put { state, expires_at } => {
                        *slot.get_mut() = Entry::new(state, expires_at, charge.params);
                        Some(expires_at)
                    }
                };
                (outcome, expires_at)
            }
            RawEntryMut::Vacant(place) => {
                let outcome = algorithm::apply(None, now, &charge.params, charge.hits);
                let Write::Put { state, expires_at } = outcome.write else {
                    // Keep or Delete of a bucket that is not there: nothing to write.
                    return outcome.decision;
                };
                let entry = Entry::new(state, expires_at, charge.params);
                if full {
                    self.insert_making_room(shard, hash, key, entry, now);
                } else {
                    place.insert_hashed_nocheck(hash, key.into(), entry);
                }
                (outcome, Some(expires_at))
            }
        };
        if let Some(expires_at) = expires_at {
            shard.min_expiry = shard.min_expiry.min(expires_at);
        }
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
        self.charge_locked(group, now, |stored, members| (joint::apply(stored, now, members), ())).0
    }

    /// [`Self::charge_joint`] with `decide` in place of `joint::apply`: it gets the states
    /// read under the group's locks and the members, and what it returns is written (or
    /// not) before they are released; its second result is handed back.
    fn charge_locked<T>(
        &self,
        group: &[Charge],
        now: u64,
        decide: impl FnOnce(&[Option<State>], &[Member]) -> (joint::Joint, T),
    ) -> (Vec<Decision>, T) {
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
        let hashes: Vec<u64> = keys.iter().map(|k| self.hash(k)).collect();
        let shard_of: Vec<usize> = hashes.iter().map(|&h| self.shard_index(h)).collect();
        let mut order = shard_of.clone();
        order.sort_unstable();
        order.dedup();
        let mut locked: Vec<MutexGuard<'_, Shard>> = order.iter().map(|&i| self.shards[i].lock()).collect();
        let guard = |i: usize| order.binary_search(&shard_of[i]).unwrap_or(0);
        let stored: Vec<Option<State>> =
            keys.iter().enumerate().map(|(i, k)| locked[guard(i)].live(hashes[i], k, now)).collect();
        let (outcome, more) = decide(&stored, &members);
        for w in outcome.writes.iter().flatten().chain(&outcome.marks) {
            self.write(&mut locked[guard(w.key)], hashes[w.key], keys[w.key], w.write, w.params, now);
        }
        (outcome.decisions, more)
    }

    /// The hash of `key`, as every shard's map computes it (they share `self.hasher`).
    fn hash(&self, key: &str) -> u64 {
        self.hasher.hash_one(key)
    }

    /// The shard of a key of hash `hash`. The table inside the shard places an entry by
    /// the hash's low bits and tags it with its top 7: the shard is taken from bits 25..57
    /// (multiply-shift), so the keys of one shard still spread over its whole table.
    fn shard_index(&self, hash: u64) -> usize {
        let middle = u64::from((hash >> 25) as u32);
        ((middle * self.shards.len() as u64) >> 32) as usize
    }

    /// Applies one write to a bucket of `shard` (locked by the caller), making room when a
    /// new bucket meets a full shard. For joint groups; single charges write in place.
    fn write(&self, shard: &mut Shard, hash: u64, key: &str, write: Write, params: Params, now: u64) {
        match write {
            Write::Keep => {}
            Write::Delete => {
                if let RawEntryMut::Occupied(slot) =
                    shard.map.raw_entry_mut_v1().from_key_hashed_nocheck(hash, key)
                {
                    slot.swap_remove();
                }
            }
            Write::Put { state, expires_at } => {
                let entry = Entry::new(state, expires_at, params);
                let full = shard.map.len() >= self.shard_cap;
                match shard.map.raw_entry_mut_v1().from_key_hashed_nocheck(hash, key) {
                    RawEntryMut::Occupied(mut slot) => *slot.get_mut() = entry,
                    RawEntryMut::Vacant(place) if !full => {
                        place.insert_hashed_nocheck(hash, key.into(), entry);
                    }
                    RawEntryMut::Vacant(_) => self.insert_making_room(shard, hash, key, entry, now),
                }
                shard.min_expiry = shard.min_expiry.min(expires_at);
            }
        }
    }

    /// Inserts a new bucket into a full shard: makes room first, then looks its place up
    /// anew (making room moves entries).
    fn insert_making_room(&self, shard: &mut Shard, hash: u64, key: &str, entry: Entry, now: u64) {
        self.make_room(shard, now);
        if let RawEntryMut::Vacant(place) = shard.map.raw_entry_mut_v1().from_key_hashed_nocheck(hash, key) {
            place.insert_hashed_nocheck(hash, key.into(), entry);
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
        let hash = self.hash(key);
        let mut shard = self.shards[self.shard_index(hash)].lock();
        match shard.map.raw_entry_mut_v1().from_key_hashed_nocheck(hash, key) {
            RawEntryMut::Occupied(slot) => {
                slot.swap_remove();
                true
            }
            RawEntryMut::Vacant(_) => false,
        }
    }

    /// Removes every expired bucket now (called periodically by the server).
    pub fn sweep_expired(&self, now: u64) -> usize {
        let mut total = 0;
        for shard in self.shards.iter() {
            let mut shard = shard.lock();
            if now >= shard.min_expiry {
                total += sweep(&mut shard, now);
            }
        }
        self.sweep_books(now);
        self.lossless_evictions.fetch_add(total as u64, Ordering::Relaxed);
        total
    }

    /// Current key count and eviction counters.
    pub fn stats(&self) -> MemoryStats {
        let keys = self.shards.iter().map(|s| s.lock().map.len()).sum();
        MemoryStats {
            keys,
            lossless_evictions: self.lossless_evictions.load(Ordering::Relaxed),
            lossy_evictions: self.lossy_evictions.load(Ordering::Relaxed),
            at_limit_evictions: self.at_limit_evictions.load(Ordering::Relaxed),
            reservation_records: self.records.load(Ordering::Relaxed),
            unrecorded_reservations: self.unrecorded_reservations.load(Ordering::Relaxed),
        }
    }

    /// The cap on buckets actually enforced (shard capacity × shards, ≥ the requested cap
    /// by less than one shard).
    pub fn capacity(&self) -> usize {
        self.shard_cap * self.shards.len()
    }
}

/// The system clock in µs since the epoch (0 if the clock is before 1970).
pub fn now_us() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_micros() as u64).unwrap_or(0)
}

#[cfg(test)]
mod tests;
