//! The lease table itself: its shards of entries (one per key tracked), the queue of
//! returns, and the counters. Lookups only: taking and refilling (`take`) and the way back
//! (`returns`) are the files above it.

use std::collections::hash_map::RandomState;
use std::collections::VecDeque;
use std::hash::BuildHasher;
use std::sync::atomic::AtomicU64;
use std::sync::{Mutex, MutexGuard};

use indexmap::IndexMap;
use tokio::time::Instant;

use super::entry::{lock, Entry};
use super::refund::Return;
use super::settings::LeaseSettings;

pub(super) const SHARDS: usize = 16;

type Shard = Mutex<IndexMap<Box<str>, Entry>>;

/// The leases of one Redis store, shared by every request.
pub struct LeaseTable {
    pub(super) settings: LeaseSettings,
    pub(super) shards: Box<[Shard]>,
    pub(super) shard_cap: usize,
    hasher: RandomState,
    /// Where each shard's sweep resumes.
    pub(super) cursors: Box<[Mutex<usize>]>,
    /// Oldest first; at most `max_returns` (see `returns::queue`).
    pub(super) returns: Mutex<VecDeque<Return>>,
    pub(super) next_refill: AtomicU64,
    pub(super) served: AtomicU64,
    pub(super) blocks: AtomicU64,
    pub(super) taken: AtomicU64,
    pub(super) returned: AtomicU64,
    pub(super) forfeited: AtomicU64,
    /// [`Dropped`](super::Dropped)'s counters, in its field order.
    pub(super) dropped: [AtomicU64; 4],
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

    /// Returns queued and not yet handed out.
    pub fn pending_returns(&self) -> usize {
        lock(&self.returns).len()
    }

    /// Most returns queued at once: twice the keys tracked (a key's lease and the block
    /// of a refill answered after it was dropped), at least 16.
    pub fn max_returns(&self) -> usize {
        self.settings.max_keys.saturating_mul(2).max(16)
    }

    /// The shard of `key`, locked.
    pub(super) fn shard(&self, key: &str) -> MutexGuard<'_, IndexMap<Box<str>, Entry>> {
        let index = (self.hasher.hash_one(key) % self.shards.len() as u64) as usize;
        lock(&self.shards[index])
    }
}
