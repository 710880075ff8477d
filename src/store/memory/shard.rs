//! One shard of the memory store: its map of buckets and when it last swept, below the
//! store (`memory`) that locks it and the eviction (`evict`) that makes room in it.

use std::collections::hash_map::RandomState;

use indexmap::map::raw_entry_v1::RawEntryApiV1;
use indexmap::IndexMap;

use crate::algorithm::{Params, State};

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
        (entry.expires_at > now).then_some(entry.state)
    }
}

#[derive(Debug, Clone, Copy)]
pub(super) struct Entry {
    pub(super) state: State,
    pub(super) expires_at: u64,
    /// The limit the state was written under: eviction ranks the state by it.
    pub(super) params: Params,
}
