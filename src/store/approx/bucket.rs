//! One bucket's local estimate in approximate mode (the window arithmetic it needs is in
//! `window`, its tier in `tier`).
//!
//! A bucket holds two window counts in Redis's clock: `base`, Redis's counts at the last
//! sync (everything any instance had written by then), and `own`, what this instance
//! admitted since. The level the decisions see is their sum, rolled to now's window by
//! the algorithm's own rule (a sliding window's previous count is weighted down as the
//! window slides; a fixed window starts again at 0): "the last global count read, decayed
//! at the limit's own rate, plus what this instance admitted since".
//!
//! `pending` and `inflight` are the same admissions seen by the sync (`sync`): admitted
//! since the last send, and sent in the call now in flight. Both are kept per window
//! ([`Unsent`]): an increment is written to the window it was admitted in, so a refund
//! (negative) that waited across a window edge frees nothing in the next window, and one
//! older than the window before is dropped (it no longer weighs in). They are never lost
//! otherwise: a failed call puts `inflight` back into `pending`.

use crate::algorithm::Params;

use super::tier::Tier;
use super::window::{Counts, Unsent};

/// One bucket's estimate and sync state.
#[derive(Debug, Clone, Copy)]
pub struct Bucket {
    pub params: Params,
    /// Redis's counts at the last sync (default: never synced, empty).
    pub base: Counts,
    /// What this instance admitted since that sync.
    pub own: Counts,
    /// Admitted (negative: refunded) since the last send.
    pub pending: Unsent,
    /// Sent in the sync call now in flight.
    pub inflight: Unsent,
    /// Local µs of the last sync (or first read) that answered for this bucket; 0: never.
    pub read_at: u64,
    /// Redis's clock minus ours (µs), measured by the call that last answered for this
    /// bucket (on a cluster, its master's clock).
    pub offset: i64,
    /// Local µs of this bucket's first failed sync since its last good one; 0: none.
    pub failing_since: u64,
    /// Local µs of the oldest increment in `pending`; 0: none.
    pub dirty_since: u64,
    /// Its key is in its shard's list of buckets with something to send.
    pub queued: bool,
    pub tier: Tier,
    /// A request holds it for a charge decided against Redis (`claim`): the sync leaves it
    /// alone, and only that request folds its answer.
    pub claimed: bool,
    /// Redis µs of the answer folded into `base`; 0: never.
    pub base_at: u64,
    /// Redis µs from which an answer is known to follow an operator's reset of this bucket
    /// (`resets`): an earlier one is not folded; 0: no reset seen.
    pub reset_at: u64,
}

impl Bucket {
    /// A bucket never synced: empty until its first read says otherwise. `offset`: the
    /// store's last known Redis clock offset.
    pub fn new(params: Params, offset: i64) -> Bucket {
        Bucket {
            params,
            base: Counts::default(),
            own: Counts::default(),
            pending: Unsent::default(),
            inflight: Unsent::default(),
            read_at: 0,
            offset,
            failing_since: 0,
            dirty_since: 0,
            queued: false,
            tier: Tier::Idle,
            claimed: false,
            base_at: 0,
            reset_at: 0,
        }
    }

    /// Redis's clock at local `now` (µs), as this bucket's master keeps it.
    pub fn redis_now(&self, now: u64) -> u64 {
        now.saturating_add_signed(self.offset)
    }

    /// The estimate at `now` (Redis clock): base plus own, in now's window.
    pub fn estimate(&self, now: u64) -> Counts {
        let p = &self.params;
        self.base.at(now, p).plus(self.own.at(now, p))
    }

    /// Adds `n` admitted hits at `now` (Redis clock; `local`: ours) to `own` and `pending`.
    pub fn admit(&mut self, n: u64, now: u64, local: u64) {
        let mut own = self.own.at(now, &self.params);
        own.current = own.current.saturating_add(n);
        self.own = own;
        self.pending.add(i64::try_from(n).unwrap_or(i64::MAX), now, &self.params);
        self.dirtied(local);
    }

    /// Takes `n` refunded hits off `own`, the rest (hits a sync already wrote) off `base`
    /// — never below 0, as Redis's count goes — and sends `-n` with the next sync, to the
    /// window of `now`. The estimate frees the room at once, as exact mode does: a refund
    /// of hits already synced must not wait for the sync's answer to count (a charge of the
    /// whole limit right after it would be denied on an empty bucket).
    pub fn refund(&mut self, n: u64, now: u64, local: u64) {
        let mut own = self.own.at(now, &self.params);
        let taken = own.current.min(n);
        own.current -= taken;
        self.own = own;
        if n > taken {
            let mut base = self.base.at(now, &self.params);
            base.current = base.current.saturating_sub(n - taken);
            self.base = base;
        }
        self.pending.add(-i64::try_from(n).unwrap_or(i64::MAX), now, &self.params);
        self.dirtied(local);
    }

    /// Puts increments taken for a call back into `pending` (the call did not write them).
    pub fn put_back(&mut self, unsent: Unsent, local: u64) {
        let params = self.params;
        self.pending.merge(unsent, &params);
        self.dirtied(local);
    }

    /// Whether a call for this bucket is in flight (a sync's, or a claim's): it cannot be
    /// claimed until that call settles.
    pub fn is_busy(&self) -> bool {
        self.claimed || !self.inflight.is_empty()
    }

    fn dirtied(&mut self, local: u64) {
        if self.dirty_since == 0 {
            self.dirty_since = local.max(1);
        }
    }

    /// Raises the tier to that of the level at `now` if it is higher (never demotes: only
    /// a read does).
    pub fn promote(&mut self, now_redis: u64) {
        let tier = Tier::of(self.estimate(now_redis).level(now_redis, &self.params), self.params.limit);
        self.tier = self.tier.max(tier);
    }

    /// Moves `pending` to `inflight` for a send: what goes out.
    pub fn send(&mut self) -> Unsent {
        self.inflight = self.pending;
        self.pending = Unsent::default();
        self.dirty_since = 0;
        self.inflight
    }

    /// Folds a sync's or a read's answer taken at `now_redis` (`now_local` ours, `offset`
    /// the call's clock offset): Redis's counts (which include `inflight`) become the base,
    /// what was admitted during the call becomes `own`, and the tier is set from the level
    /// (a read may demote). An answer from before a reset this instance has seen
    /// (`reset_at`) only settles what it carried: the bucket stays to be read again.
    pub fn fold(&mut self, counts: Counts, now_redis: u64, now_local: u64, offset: i64) {
        if now_redis < self.reset_at {
            self.own = self.pending.as_counts(now_redis, &self.params);
            self.inflight = Unsent::default();
            return;
        }
        // Redis's counts hold what the call wrote; what is still to write holds this
        // instance's admissions since (`own`) and its refunds beyond them (off the base).
        self.base =
            counts.at(now_redis, &self.params).minus(self.pending.refunds_as_counts(now_redis, &self.params));
        self.base_at = now_redis;
        self.own = self.pending.as_counts(now_redis, &self.params);
        self.inflight = Unsent::default();
        self.read_at = now_local.max(1);
        self.offset = offset;
        self.failing_since = 0;
        self.tier = Tier::of(self.estimate(now_redis).level(now_redis, &self.params), self.params.limit);
    }

    /// An operator reset this bucket in Redis, visible from `at` (Redis µs): unless its base
    /// was read after that, what it held is gone — the base is emptied and the bucket is
    /// read again before its next decision (a first read). Increments not yet written stay
    /// (they are written into the new bucket: an error toward denying, never one toward
    /// admitting). `now_redis`: Redis's clock now.
    pub fn reset(&mut self, at: u64, now_redis: u64) {
        if self.base_at >= at {
            return;
        }
        self.reset_at = self.reset_at.max(at);
        self.base = Counts::default();
        self.own = self.pending.as_counts(now_redis, &self.params);
        self.read_at = 0;
        self.tier = Tier::Idle;
    }

    /// Puts a failed send back (`sent`: what the call carried; it is this bucket's
    /// `inflight`, or nothing when the bucket was evicted and made anew meanwhile).
    pub fn unsend(&mut self, sent: Unsent, local: u64) {
        let params = self.params;
        self.pending.merge(sent, &params);
        self.inflight = Unsent::default();
        if !sent.is_empty() {
            self.dirtied(local);
        }
        if self.failing_since == 0 {
            self.failing_since = local.max(1);
        }
    }

    /// Whether nothing of this bucket is left to say: no increment waiting or in flight,
    /// and both counts are past their windows at `now` (Redis clock).
    pub fn is_spent(&self, now: u64) -> bool {
        self.pending.is_empty() && self.inflight.is_empty() && {
            let e = self.estimate(now);
            e.current == 0 && e.previous == 0
        }
    }
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::Algorithm;

    fn sliding(limit: u64) -> Params {
        Params {
            algorithm: Algorithm::SlidingWindow,
            limit,
            unit_us: 1_000_000,
            burst: limit,
            penalty_us: 0,
            period: None,
        }
    }

    #[test]
    fn promotion_is_immediate_and_only_a_read_demotes() {
        let mut b = Bucket::new(sliding(10), 0);
        b.fold(Counts::default(), 0, 1_000, 0);
        assert_eq!(b.tier, Tier::Idle);
        b.admit(6, 100, 1_000);
        b.promote(100);
        assert_eq!(b.tier, Tier::Normal);
        b.admit(3, 200, 2_000);
        b.promote(200);
        assert_eq!(b.tier, Tier::Hot);
        // A read showing the bucket emptied (a reset) demotes it.
        b.send();
        b.fold(Counts { start: 0, current: 0, previous: 0 }, 300, 3_000, 0);
        assert_eq!(b.tier, Tier::Idle);
    }

    #[test]
    fn a_fold_keeps_what_was_admitted_during_the_call() {
        let mut b = Bucket::new(sliding(100), 0);
        b.admit(5, 10, 10);
        b.send();
        b.admit(2, 20, 20); // during the call
        b.fold(Counts { start: 0, current: 12, previous: 0 }, 30, 30, 0);
        assert_eq!(b.estimate(40).level(40, &b.params), 14);
        assert_eq!((b.pending.delta, b.inflight), (2, Unsent::default()));
    }

    #[test]
    fn a_refund_of_hits_already_synced_frees_their_room_before_the_next_sync() {
        let p = Params { algorithm: Algorithm::FixedWindow, ..sliding(10) };
        let mut b = Bucket::new(p, 0);
        b.admit(3, 10, 10);
        b.send();
        b.fold(Counts { start: 0, current: 3, previous: 0 }, 20, 20, 0);
        // All 3 are Redis's now (the base); one more admitted since (own).
        b.admit(1, 30, 30);
        b.refund(2, 40, 40);
        assert_eq!(b.estimate(50).level(50, &p), 2, "4 charged, 2 given back");
        assert_eq!(b.pending.delta, -1, "the sync takes 1 off Redis's count");
        // A refund made while the sync is out stays off the base its answer brings.
        b.send();
        b.refund(1, 60, 60);
        assert_eq!(b.estimate(65).level(65, &p), 1);
        b.fold(Counts { start: 0, current: 2, previous: 0 }, 70, 70, 0);
        assert_eq!(b.estimate(80).level(80, &p), 1, "Redis wrote -1; -1 more to write");
        // Never below 0.
        b.refund(9, 90, 90);
        assert_eq!(b.estimate(95).level(95, &p), 0);
    }

    #[test]
    fn a_failed_send_of_an_evicted_bucket_lands_in_its_successor() {
        let p = sliding(100);
        // The bucket made anew while the evicted one's call was in flight: nothing of its
        // own is in flight, the failed call's increments still come back.
        let mut fresh = Bucket::new(p, 0);
        fresh.admit(2, 1_100_000, 5);
        fresh.unsend(Unsent { start: 1_000_000, delta: 7, carry: 0 }, 9);
        assert_eq!(fresh.pending, Unsent { start: 1_000_000, delta: 9, carry: 0 });
        assert_eq!(fresh.failing_since, 9);
    }
}
