//! The sketch of one domain: a space-saving table of its busiest buckets over a sliding
//! window. Pure: no clock (every call takes `now`, whole seconds on a monotonic clock), no
//! I/O, no knowledge of rules or requests — a bucket is a 64-bit hash and an `Identity`
//! the caller fills in.
//!
//! Memory is fixed: [`SHARDS`] × [`SLOTS`] slots, each with four counters and one
//! `Identity` whose buffers are reused when the slot changes hands (bounded by
//! [`MAX_PART_BYTES`] per key and value). A bucket maps to one shard by its hash, so the
//! shards are independent space-saving tables behind their own locks: the busiest bucket
//! of a domain never serialises the others.
//!
//! Space-saving: a bucket already in the table counts one more; a new one takes the
//! empty slot or the one of least weight, and *inherits* its counts (so a bucket that
//! arrives late still climbs past the others if it is busy: no heavy hitter is missed).
//! Inherited counts are an error bound, not hits: besides `total` (hits + inherited, used
//! to choose whom to evict) each slot keeps `seen` (the hits since it took the slot), and
//! every number shown comes from `seen` — a lower bound, exact for a bucket that kept its
//! slot over the window. Uniform traffic over many keys churns the slots and shows small
//! rates, as it should, rather than the inherited counts of the evicted.
//!
//! Window: counts are kept per epoch of [`WINDOW_SECONDS`] (current and previous, rolled
//! lazily by the first call of a new epoch) and read as the sliding-window estimate
//! `previous × (1 − elapsed/window) + current`, the same approximation as the
//! `sliding_window` algorithm. A shard untouched for two epochs reads empty.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Independent tables per domain (a bucket's hash picks one).
pub const SHARDS: usize = 8;
/// Slots per shard: `SHARDS × SLOTS` buckets per domain at most.
pub const SLOTS: usize = 16;
/// The window rates cover, in seconds (an epoch is one window).
pub const WINDOW_SECONDS: u64 = 60;
/// Longest key or value kept per entry; a longer value keeps its first bytes and its
/// 128-bit digest (`digest`), so that a hidden value can still be shown as its hash.
pub const MAX_PART_BYTES: usize = 64;

/// What a slot remembers of its bucket, for the view. Filled only when a bucket takes a
/// slot; the buffers are cleared and refilled, so a slot allocates only when it grows.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Identity {
    /// The config path of the matched rule; `None` for a request's own `limit` override.
    pub rule_path: Option<String>,
    /// The key of the bucket (the first limit's, for a rule with several).
    pub key: String,
    /// The descriptor's entries that enter the bucket identity, in order.
    pub entries: Vec<StoredEntry>,
}

/// One entry of a descriptor, cut to [`MAX_PART_BYTES`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoredEntry {
    pub key: Vec<u8>,
    /// The value, or its first [`MAX_PART_BYTES`] bytes when `digest` is set.
    pub value: Vec<u8>,
    /// The value was longer: its 128-bit SHA-256 prefix (`store::key::part_digest`).
    pub digest: Option<[u8; 16]>,
}

/// One bucket as read: its share of the window and what identifies it.
#[derive(Debug, Clone, PartialEq)]
pub struct Estimate {
    /// Hits counted in the window (sliding estimate; a lower bound).
    pub count: f64,
    pub identity: Identity,
}

/// A reading of the whole sketch.
#[derive(Debug, Clone, PartialEq)]
pub struct Reading {
    /// Seconds the counts cover: the window, or the sketch's age while it is younger.
    pub since_seconds: u64,
    /// Every charged decision of the domain in the window (sliding estimate).
    pub total: f64,
    /// The buckets seen in the window, busiest first.
    pub buckets: Vec<Estimate>,
}

const PREVIOUS: usize = 0;
const CURRENT: usize = 1;

#[derive(Debug)]
struct Shard {
    /// The epoch the counts below belong to.
    epoch: u64,
    /// Slot hashes; 0 is an empty slot (hashes are given with the low bit set).
    hashes: [u64; SLOTS],
    /// Per slot `[previous, current]` of hits plus inherited counts (eviction order).
    total: [[u64; 2]; SLOTS],
    /// Per slot `[previous, current]` of hits since the bucket took the slot.
    seen: [[u64; 2]; SLOTS],
    identities: Vec<Identity>,
    /// Every decision recorded in this shard, `[previous, current]`.
    all: [u64; 2],
}

impl Shard {
    fn new() -> Shard {
        Shard {
            epoch: 0,
            hashes: [0; SLOTS],
            total: [[0; 2]; SLOTS],
            seen: [[0; 2]; SLOTS],
            identities: vec![Identity::default(); SLOTS],
            all: [0; 2],
        }
    }

    /// Moves the counts to `epoch`: one epoch on, current becomes previous; further on,
    /// everything is forgotten. A slot left without counts is empty again.
    fn roll(&mut self, epoch: u64) {
        let Some(gap) = epoch.checked_sub(self.epoch).filter(|gap| *gap > 0) else { return };
        let shift = |pair: &mut [u64; 2]| *pair = if gap == 1 { [pair[CURRENT], 0] } else { [0, 0] };
        for i in 0..SLOTS {
            shift(&mut self.total[i]);
            shift(&mut self.seen[i]);
            if self.total[i] == [0, 0] {
                self.hashes[i] = 0;
            }
        }
        shift(&mut self.all);
        self.epoch = epoch;
    }

    /// Counts one decision of bucket `hash` (low bit set) in this shard, rolled to the
    /// current epoch; `phase` is the seconds elapsed in it.
    fn count(&mut self, hash: u64, phase: u64, fill: impl FnOnce(&mut Identity)) {
        self.all[CURRENT] += 1;
        if let Some(i) = self.hashes.iter().position(|h| *h == hash) {
            self.total[i][CURRENT] = self.total[i][CURRENT].saturating_add(1);
            self.seen[i][CURRENT] += 1;
            return;
        }
        let i = self.victim(phase);
        self.hashes[i] = hash;
        self.total[i][CURRENT] = self.total[i][CURRENT].saturating_add(1);
        self.seen[i] = [0, 1];
        fill(&mut self.identities[i]);
    }

    /// The slot a new bucket takes: an empty one, else the one of least weight now.
    fn victim(&self, phase: u64) -> usize {
        let weight = |pair: &[u64; 2]| {
            pair[PREVIOUS]
                .saturating_mul(WINDOW_SECONDS - phase)
                .saturating_add(pair[CURRENT].saturating_mul(WINDOW_SECONDS))
        };
        if let Some(empty) = self.hashes.iter().position(|h| *h == 0) {
            return empty;
        }
        (0..SLOTS).min_by_key(|&i| weight(&self.total[i])).unwrap_or(0)
    }
}

/// The busiest buckets of one domain (see the module doc).
#[derive(Debug)]
pub struct Sketch {
    /// The second (on the caller's clock) the sketch was made: epochs count from it.
    born: u64,
    shards: [Mutex<Shard>; SHARDS],
}

impl Sketch {
    /// An empty sketch made at second `now`.
    pub fn new(now: u64) -> Sketch {
        Sketch { born: now, shards: std::array::from_fn(|_| Mutex::new(Shard::new())) }
    }

    /// The epoch of second `now` and the seconds elapsed in it.
    fn epoch(&self, now: u64) -> (u64, u64) {
        let age = now.saturating_sub(self.born);
        (age / WINDOW_SECONDS, age % WINDOW_SECONDS)
    }

    /// The shard of a bucket: the hash's high bits (the low bit is forced to 1).
    fn shard_index(hash: u64) -> usize {
        (hash >> 59) as usize % SHARDS
    }

    fn lock(&self, index: usize) -> MutexGuard<'_, Shard> {
        self.shards[index].lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Counts one decision of the bucket `hash` at second `now`. `fill` describes the
    /// bucket; it runs only when the bucket takes a slot (its previous identity is handed
    /// in, to be overwritten in place).
    pub fn record(&self, now: u64, hash: u64, fill: impl FnOnce(&mut Identity)) {
        let (epoch, phase) = self.epoch(now);
        let hash = hash | 1;
        let mut shard = self.lock(Self::shard_index(hash));
        shard.roll(epoch);
        shard.count(hash, phase, fill);
    }

    /// Counts one decision of each bucket of `buckets` (its hash, and what `fill` needs to
    /// describe it) at second `now`, as calls of [`record`](Self::record) in that order
    /// would, but locking each shard once: a request of many descriptors takes at most
    /// [`SHARDS`] locks, not one per descriptor.
    pub fn record_all<T>(&self, now: u64, buckets: &[(u64, T)], mut fill: impl FnMut(&T, &mut Identity)) {
        let (epoch, phase) = self.epoch(now);
        // Buckets of different shards are independent: shard by shard, each in its order.
        let mut pending = buckets.len();
        for index in 0..SHARDS {
            if pending == 0 {
                break;
            }
            let mut shard = None;
            for (hash, bucket) in buckets.iter().map(|(h, bucket)| (h | 1, bucket)) {
                if Self::shard_index(hash) != index {
                    continue;
                }
                let shard = shard.get_or_insert_with(|| {
                    let mut locked = self.lock(index);
                    locked.roll(epoch);
                    locked
                });
                shard.count(hash, phase, |identity| fill(bucket, identity));
                pending -= 1;
            }
        }
    }

    /// The sketch as of second `now`, busiest first (buckets without a hit in the window
    /// are left out). Clones the identities: for the admin port, not the request path.
    pub fn read(&self, now: u64) -> Reading {
        let mut buckets = Vec::new();
        let total = self.scan(now, |count, identity| {
            buckets.push(Estimate { count, identity: identity.clone() });
        });
        buckets.sort_by(|a, b| b.count.total_cmp(&a.count));
        let age = now.saturating_sub(self.born);
        Reading { since_seconds: age.clamp(1, WINDOW_SECONDS), total, buckets }
    }

    /// The share of the window's decisions taken by each of the `n` busiest buckets,
    /// busiest first (fewer when fewer were seen). Clones nothing (for the scrape).
    pub fn shares(&self, now: u64, n: usize) -> Vec<f64> {
        let mut counts = Vec::with_capacity(SHARDS * SLOTS);
        let total = self.scan(now, |count, _| counts.push(count));
        counts.sort_by(|a, b| b.total_cmp(a));
        counts.into_iter().take(n).map(|count| if total > 0.0 { count / total } else { 0.0 }).collect()
    }

    /// Calls `each` with the count and identity of every bucket seen in the window as of
    /// second `now`; returns the window's total. Reads the shards as if rolled to `now`
    /// without writing them (a reader never moves an epoch).
    fn scan(&self, now: u64, mut each: impl FnMut(f64, &Identity)) -> f64 {
        let (epoch, phase) = self.epoch(now);
        let estimate = |pair: [u64; 2]| {
            pair[PREVIOUS] as f64 * (WINDOW_SECONDS - phase) as f64 / WINDOW_SECONDS as f64
                + pair[CURRENT] as f64
        };
        let mut total = 0.0;
        for shard in &self.shards {
            let shard = shard.lock().unwrap_or_else(PoisonError::into_inner);
            let rolled = |pair: [u64; 2]| match epoch.saturating_sub(shard.epoch) {
                0 => pair,
                1 => [pair[CURRENT], 0],
                _ => [0, 0],
            };
            total += estimate(rolled(shard.all));
            for i in 0..SLOTS {
                let count = estimate(rolled(shard.seen[i]));
                if shard.hashes[i] != 0 && count > 0.0 {
                    each(count, &shard.identities[i]);
                }
            }
        }
        total
    }
}

#[cfg(test)]
mod tests;
