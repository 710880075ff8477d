//! One shard of the memory store: its map of buckets and when it last swept, below the
//! store (`memory`) that locks it and the eviction (`evict`) that makes room in it.

use std::collections::hash_map::RandomState;

use indexmap::map::raw_entry_v1::RawEntryApiV1;
use indexmap::IndexMap;

use crate::algorithm::{Algorithm, Params, Period, State, MAX_VALUE};

use super::stored_key::StoredKey;

#[derive(Debug)]
pub(super) struct Shard {
    /// Hashed with the store's `RandomState`: the hash a charge computes once is the one
    /// the map would compute (see [`MemoryStore::hash`]).
    pub(super) map: IndexMap<StoredKey, Entry, RandomState>,
    /// No entry expires before this (a lower bound; exact right after a sweep).
    pub(super) min_expiry: u64,
    pub(super) last_sweep: u64,
}

impl Shard {
    pub(super) fn new(hasher: RandomState) -> Shard {
        Shard { map: IndexMap::with_hasher(hasher), min_expiry: 0, last_sweep: 0 }
    }

    /// The state of `key` (of hash `hash`) if it has not expired at `now`.
    pub(super) fn live(&self, hash: u64, key: &str, now: u64) -> Option<State> {
        let (_, entry) = self.map.raw_entry_v1().from_key_hashed_nocheck(hash, key)?;
        (entry.expires_at() > now).then_some(entry.state)
    }
}

/// A bucket as the table holds it: 72 bytes, so that with its hash and key a table entry is
/// 128 (see `stored_key`).
#[derive(Debug, Clone, Copy)]
pub(super) struct Entry {
    pub(super) state: State,
    /// When the state carries no information (µs, clamped to `MAX_VALUE`: time stands
    /// still there), with the algorithm of the limit in the top two bits.
    packed: u64,
    /// The limit the state was written under, but for its algorithm (in `packed`) and its
    /// penalty (eviction reads a penalty from the state): eviction ranks the state by it.
    limit: u64,
    unit_us: u64,
    burst: u64,
}

impl Entry {
    pub(super) fn new(state: State, expires_at: u64, params: Params) -> Entry {
        let algorithm: u64 = match params.algorithm {
            Algorithm::Gcra => 0,
            Algorithm::SlidingWindow => 1,
            Algorithm::FixedWindow => 2,
        };
        Entry {
            state,
            packed: expires_at.min(MAX_VALUE) | algorithm << 62,
            limit: params.limit,
            unit_us: params.unit_us,
            burst: params.burst,
        }
    }

    pub(super) fn expires_at(&self) -> u64 {
        self.packed & MAX_VALUE
    }

    /// The limit the state was written under (without its penalty).
    pub(super) fn params(&self) -> Params {
        let algorithm = match self.packed >> 62 {
            0 => Algorithm::Gcra,
            1 => Algorithm::SlidingWindow,
            _ => Algorithm::FixedWindow,
        };
        // A calendar period stores its end beside its start (a plain fixed window stores 0):
        // without it, eviction would rank an exhausted period as an empty epoch window.
        let period = match (algorithm, self.state) {
            (Algorithm::FixedWindow, State::Window { start, previous, .. }) if previous > start => {
                Some(Period { start_us: start, end_us: previous })
            }
            _ => None,
        };
        Params {
            algorithm,
            limit: self.limit,
            unit_us: self.unit_us,
            burst: self.burst,
            penalty_us: 0,
            period,
        }
    }
}
