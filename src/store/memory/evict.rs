//! Making room in a full shard of the memory store: the sweep of expired state and the
//! choice of a victim among a random sample (the order is in the parent's module doc).
//! Integer arithmetic on the locked shard only: no allocation, no clock.

use rand::Rng;

use crate::algorithm::{self, Standing};

use super::shard::Shard;

/// How many entries a full shard looks at to pick a victim.
const EVICTION_SAMPLE: usize = 16;
/// How many it looks at in all before it evicts a bucket at its limit: a sample that is
/// all exhausted by chance (probability `f^16` with a share `f` of the shard exhausted)
/// must not hand out a reset; `f^64` is below 1e-11 for `f` up to 2/3 and 1e-3 at 0.9.
/// Only a shard mostly full of exhausted buckets pays for the longer look (~4 µs, cache
/// misses, against ~1 µs).
const AT_LIMIT_SAMPLE: usize = 64;

/// The entry to evict among `EVICTION_SAMPLE` random ones (with replacement: cheaper than
/// distinct picks, and a repeat only narrows the sample), up to `AT_LIMIT_SAMPLE` while
/// all of them are at their limit: the smallest `(standing, expires_at)`, stopping early
/// at one that carries nothing.
pub(super) fn pick_victim(shard: &Shard, now: u64) -> Option<(usize, Standing)> {
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
        let standing = if entry.expires_at() <= now {
            Standing { at_limit: false, given_back: 0 }
        } else {
            algorithm::standing(entry.state, now, &entry.params())
        };
        if standing.given_back == 0 && !standing.at_limit {
            return Some((i, standing));
        }
        if victim.is_none_or(|(_, s, expires)| (standing, entry.expires_at()) < (s, expires)) {
            victim = Some((i, standing, entry.expires_at()));
        }
    }
    victim.map(|(i, standing, _)| (i, standing))
}

/// Drops every expired entry of a shard and makes `min_expiry` exact.
pub(super) fn sweep(shard: &mut Shard, now: u64) -> usize {
    let before = shard.map.len();
    shard.map.retain(|_, e| e.expires_at() > now);
    shard.min_expiry = shard.map.values().map(|e| e.expires_at()).min().unwrap_or(u64::MAX);
    shard.last_sweep = now;
    before - shard.map.len()
}
