//! The embedded store: buckets in process memory, for a single instance.
//!
//! A fixed number of shards, each a mutex around an `IndexMap` (O(1) random access for
//! sampled eviction), hashed with the std SipHash so that clients choosing keys cannot
//! degrade it. The total number of buckets is capped. Expired state carries no
//! information (a GCRA TAT in the past, a window two periods old), so it is evicted first
//! and losslessly; only when a shard is full of live state is the least recently used of a
//! random sample evicted, and that is counted as lossy.
//!
//! No awaits: a charge holds one shard lock for a few hundred nanoseconds.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use indexmap::IndexMap;
use rand::Rng;

use crate::algorithm::{self, Decision, State, Write};

use super::Charge;

/// How many entries a full shard looks at to pick a victim.
const EVICTION_SAMPLE: usize = 16;
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
}

#[derive(Debug, Default)]
struct Shard {
    map: IndexMap<Box<str>, Entry>,
    /// No entry expires before this (a lower bound; exact right after a sweep).
    min_expiry: u64,
    last_sweep: u64,
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    state: State,
    expires_at: u64,
    last_used: u64,
}

/// Counters of the memory store, for metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryStats {
    pub keys: usize,
    pub lossless_evictions: u64,
    pub lossy_evictions: u64,
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
        }
    }

    /// Charges every bucket with the system clock.
    pub fn charge(&self, batch: &[Charge]) -> Vec<Decision> {
        let now = now_us();
        batch.iter().map(|c| self.charge_at(c, now)).collect()
    }

    /// Charges one bucket at `now` (µs since the epoch). Public for deterministic tests.
    pub fn charge_at(&self, charge: &Charge, now: u64) -> Decision {
        let index = (self.hasher.hash_one(charge.key.as_str()) % self.shards.len() as u64) as usize;
        // A poisoned shard only means another thread panicked mid-charge; the map itself is
        // still consistent (every mutation is a single insert/remove), so keep serving.
        let mut shard = self.shards[index].lock().unwrap_or_else(|e| e.into_inner());
        let stored = shard.map.get(charge.key.as_str()).filter(|e| e.expires_at > now).map(|e| e.state);
        let outcome = algorithm::apply(stored, now, &charge.params, charge.hits);
        match outcome.write {
            Write::Keep => {
                if let Some(entry) = shard.map.get_mut(charge.key.as_str()) {
                    entry.last_used = now;
                }
            }
            Write::Delete => {
                shard.map.swap_remove(charge.key.as_str());
            }
            Write::Put { state, expires_at } => {
                let entry = Entry { state, expires_at, last_used: now };
                if let Some(slot) = shard.map.get_mut(charge.key.as_str()) {
                    *slot = entry;
                } else {
                    if shard.map.len() >= self.shard_cap {
                        self.make_room(&mut shard, now);
                    }
                    shard.map.insert(charge.key.as_str().into(), entry);
                }
                shard.min_expiry = shard.min_expiry.min(expires_at);
            }
        }
        outcome.decision
    }

    /// Frees at least one slot in a full shard: expired entries first, then the least
    /// recently used of a random sample.
    fn make_room(&self, shard: &mut Shard, now: u64) {
        if now >= shard.min_expiry && now >= shard.last_sweep.saturating_add(SWEEP_INTERVAL_US) {
            let removed = sweep(shard, now);
            self.lossless_evictions.fetch_add(removed as u64, Ordering::Relaxed);
            if shard.map.len() < self.shard_cap {
                return;
            }
        }
        let mut rng = rand::rng();
        let mut victim: Option<(usize, u64)> = None;
        for _ in 0..EVICTION_SAMPLE.min(shard.map.len()) {
            let i = rng.random_range(0..shard.map.len());
            let Some((_, entry)) = shard.map.get_index(i) else { continue };
            if entry.expires_at <= now {
                shard.map.swap_remove_index(i);
                self.lossless_evictions.fetch_add(1, Ordering::Relaxed);
                return;
            }
            if victim.is_none_or(|(_, used)| entry.last_used < used) {
                victim = Some((i, entry.last_used));
            }
        }
        if let Some((i, _)) = victim {
            shard.map.swap_remove_index(i);
            self.lossy_evictions.fetch_add(1, Ordering::Relaxed);
        }
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
        }
    }

    /// The cap on buckets actually enforced (shard capacity × shards, ≥ the requested cap
    /// by less than one shard).
    pub fn capacity(&self) -> usize {
        self.shard_cap * self.shards.len()
    }
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
