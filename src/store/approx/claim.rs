//! A group decided against Redis on the request path: a consume larger than this
//! instance's whole share of its bucket, on estimates with room for it (docs/scaling.md,
//! "Approximate mode", "Larger than a share"). The share rule alone would deny it until
//! the bucket empties; exact mode would admit it.
//!
//! The local decision *claims* the group's buckets ([`Claim`]) under their shard locks:
//! each bucket's unsent increments are taken (to be written before the charge, so that the
//! exact decision counts everything this instance admitted), its consumes are reserved in
//! `own` (so that the shares of concurrent requests here count them: a reserved bucket is
//! past its share, and they are denied until the claim settles), and the sync leaves the
//! bucket alone. The caller (`store::approximating`) then writes the increments, charges
//! the group through the exact scripts, and reads the buckets back; [`Claim::settle`] folds
//! that read as a sync's answer. A claim dropped unsettled — a call failed, the deadline
//! passed, the request was cancelled — puts its increments back, takes its reservations
//! off, and marks its buckets unread: the call may have run, so each is read again before
//! its next decision.
//!
//! A bucket with a call in flight (a sync's, or another claim's) cannot be claimed: the
//! decision answers [`Local::Busy`] and the caller waits for a call to settle
//! (`Approx::settled`).

use crate::algorithm::{Decision, Hits, Params};
use crate::store::charge::StoreError;
use crate::store::memory::now_us;

use super::bucket::Bucket;
use super::sync::Item;
use super::table::{lock, queue, Approx, Orphan, Shard};
use super::window::{window_start, Counts, Unsent};

/// What the local decision of a group came to.
pub enum Local<'a> {
    /// Decided on the estimates (or a stale estimate's store error), one per charge.
    Decided(Vec<Result<Decision, StoreError>>),
    /// Claimed, to be decided against Redis.
    Exact(Claim<'a>),
    /// A bucket of the group has a call in flight: decide again once one settles.
    Busy,
}

/// The buckets of a group claimed for a decision against Redis (see the module doc).
/// Dropped without [`settle`](Self::settle), it gives them back, to be read again.
pub struct Claim<'a> {
    approx: &'a Approx,
    held: Vec<Held>,
}

/// One claimed bucket.
pub(super) struct Held {
    pub(super) key: Box<str>,
    params: Params,
    /// Increments taken from `pending`: written before the charge (put back if not).
    carried: Unsent,
    /// Hits reserved in `own` while the call is out, and the window they were added to.
    reserved: u64,
    reserved_in: u64,
}

impl Held {
    /// Claims `bucket` (under its shard's lock) for `hits` at `now` (Redis clock).
    pub(super) fn take(key: &str, bucket: &mut Bucket, hits: Hits, now: u64) -> Held {
        bucket.claimed = true;
        let carried = std::mem::take(&mut bucket.pending);
        bucket.dirty_since = 0;
        let mut held = Held {
            key: key.into(),
            params: bucket.params,
            carried,
            reserved: 0,
            reserved_in: window_start(now, &bucket.params),
        };
        held.reserve(bucket, hits, now);
        held
    }

    /// Reserves another member's `hits` on the same bucket.
    pub(super) fn reserve(&mut self, bucket: &mut Bucket, hits: Hits, now: u64) {
        let Hits::Consume(n) = hits else { return };
        let mut own = bucket.own.at(now, &bucket.params);
        own.current = own.current.saturating_add(n);
        bucket.own = own;
        self.reserved = self.reserved.saturating_add(n);
    }

    /// Takes the reservation off `own` at `now` (Redis clock), from the window it was
    /// added to (a sliding window's previous one once it rolled).
    fn unreserve(&self, bucket: &mut Bucket, now: u64) {
        let mut own = bucket.own.at(now, &bucket.params);
        if own.start == self.reserved_in {
            own.current = own.current.saturating_sub(self.reserved);
        } else if own.start == self.reserved_in.saturating_add(self.params.unit_us.max(1)) {
            own.previous = own.previous.saturating_sub(self.reserved);
        }
        bucket.own = own;
    }
}

/// A claimed bucket's read: Redis's counts at `redis_now`, answered at local `answered`
/// over a call with clock `offset`.
#[derive(Debug, Clone, Copy)]
pub struct Read {
    pub counts: Counts,
    pub redis_now: u64,
    pub answered: u64,
    pub offset: i64,
}

impl<'a> Claim<'a> {
    pub(super) fn new(approx: &'a Approx, held: Vec<Held>) -> Claim<'a> {
        Claim { approx, held }
    }

    /// The calls' table.
    pub fn approx(&self) -> &'a Approx {
        self.approx
    }

    /// The increments to write before the charge (empty: nothing to write).
    pub fn writes(&self) -> Vec<Item> {
        let carried = self.held.iter().filter(|h| !h.carried.is_empty());
        carried
            .map(|h| Item { key: h.key.clone(), params: h.params, unsent: h.carried, orphan: false })
            .collect()
    }

    /// The writes answered: Redis holds the carried increments.
    pub fn written(&mut self) {
        self.held.iter_mut().for_each(|h| h.carried = Unsent::default());
    }

    /// The reads of the claimed buckets, after the charge.
    pub fn reads(&self) -> Vec<Item> {
        let read = |h: &Held| Item {
            key: h.key.clone(),
            params: h.params,
            unsent: Unsent::default(),
            orphan: false,
        };
        self.held.iter().map(read).collect()
    }

    /// Folds the read of every claimed bucket (`reads`: by key) as a sync's answer and
    /// gives the buckets back; a bucket missing from `reads` is given back unread.
    pub fn settle(mut self, reads: &[(Box<str>, Read)]) {
        for held in std::mem::take(&mut self.held) {
            let read = reads.iter().find(|(key, _)| *key == held.key).map(|(_, read)| *read);
            self.approx.give_back(held, read);
        }
        self.approx.settled.notify_waiters();
    }
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        if self.held.is_empty() {
            return;
        }
        for held in std::mem::take(&mut self.held) {
            self.approx.give_back(held, None);
        }
        self.approx.settled.notify_waiters();
    }
}

impl Approx {
    /// Ends the claim of one bucket: its read folded, or (none) its increments put back,
    /// its reservation taken off and the bucket marked to be read again.
    fn give_back(&self, held: Held, read: Option<Read>) {
        let now = now_us();
        let mut shard = lock(&self.shards[self.shard_of(&held.key)]);
        let Shard { map, dirty, .. } = &mut *shard;
        let Some((_, key, bucket)) = map.get_full_mut(&*held.key) else {
            // Never evicted while claimed; kept anyway, as an evicted bucket's are.
            if !held.carried.is_empty() {
                let orphan = Orphan { key: held.key, params: held.params, unsent: held.carried };
                self.orphan(&mut shard, orphan);
            }
            return;
        };
        bucket.claimed = false;
        match read {
            Some(read) if held.carried.is_empty() => {
                bucket.fold(read.counts, read.redis_now, read.answered, read.offset);
            }
            _ => {
                held.unreserve(bucket, bucket.redis_now(now));
                if !held.carried.is_empty() {
                    bucket.put_back(held.carried, now);
                }
                bucket.read_at = 0;
            }
        }
        queue(key, bucket, dirty);
    }
}
