//! One bucket's local estimate in approximate mode, and the window arithmetic it needs.
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

use crate::algorithm::{mul_div_ceil, Algorithm, Params, State};

/// Window counts `(start, current, previous)` as the window scripts store them, in µs of
/// Redis's clock. `previous` is 0 for a fixed window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Counts {
    pub start: u64,
    pub current: u64,
    pub previous: u64,
}

impl Counts {
    /// The counts as they stand in the window of `now`: the same window keeps both, the
    /// one before rolls `current` into `previous` (sliding window only), anything older
    /// is empty. Counts from a window after `now` (the clocks moved) are read as now's.
    pub fn at(self, now: u64, p: &Params) -> Counts {
        let start = window_start(now, p);
        if self.start >= start {
            return Counts { start, ..self };
        }
        if p.algorithm == Algorithm::SlidingWindow && self.start + p.unit_us.max(1) == start {
            return Counts { start, current: 0, previous: self.current };
        }
        Counts { start, current: 0, previous: 0 }
    }

    /// The sum of two counts of the same window.
    pub fn plus(self, other: Counts) -> Counts {
        Counts {
            start: self.start,
            current: self.current.saturating_add(other.current),
            previous: self.previous.saturating_add(other.previous),
        }
    }

    /// The sliding estimate at `now` (the counts are of now's window): the previous
    /// window's share still covered, rounded up, plus the current count.
    pub fn level(self, now: u64, p: &Params) -> u64 {
        let unit = p.unit_us.max(1);
        let elapsed = now.saturating_sub(self.start).min(unit);
        mul_div_ceil(self.previous, unit - elapsed, unit).saturating_add(self.current)
    }

    /// As the algorithms' state.
    pub fn state(self) -> State {
        State::Window { start: self.start, current: self.current, previous: self.previous }
    }
}

/// The start of the window holding `now` (µs).
pub fn window_start(now: u64, p: &Params) -> u64 {
    now - now % p.unit_us.max(1)
}

/// Increments not yet written, by window: `delta` of the window starting at `start`,
/// `carry` of the window before it (a sliding window's previous count still weighs in).
/// Anything older is dropped: it no longer counts against the limit. Signed: a refund is
/// negative, and Redis never takes a count below 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Unsent {
    /// Window start (Redis clock, µs) of `delta`; 0 when nothing was ever added.
    pub start: u64,
    pub delta: i64,
    pub carry: i64,
}

impl Unsent {
    /// Nothing to write.
    pub fn is_empty(&self) -> bool {
        self.delta == 0 && self.carry == 0
    }

    /// Rolled forward to the window starting at `start` (never back: a clock that stepped
    /// back keeps the later window).
    fn roll(self, start: u64, p: &Params) -> Unsent {
        if self.start >= start {
            return self;
        }
        let before = p.algorithm == Algorithm::SlidingWindow && self.start + p.unit_us.max(1) == start;
        Unsent { start, delta: 0, carry: if before { self.delta } else { 0 } }
    }

    /// Adds `n` (signed) in the window of `now` (Redis clock).
    pub fn add(&mut self, n: i64, now: u64, p: &Params) {
        *self = self.roll(window_start(now, p), p);
        self.delta = self.delta.saturating_add(n);
    }

    /// Merged with `other` (a failed send put back), both in the later of their windows.
    pub fn merge(&mut self, other: Unsent, p: &Params) {
        let start = self.start.max(other.start);
        let (a, b) = (self.roll(start, p), other.roll(start, p));
        *self =
            Unsent { start, delta: a.delta.saturating_add(b.delta), carry: a.carry.saturating_add(b.carry) };
    }

    /// What this instance admitted and Redis has not seen, as counts of now's window.
    pub fn as_counts(&self, now: u64, p: &Params) -> Counts {
        let positive = |n: i64| u64::try_from(n).unwrap_or(0);
        Counts { start: self.start, current: positive(self.delta), previous: positive(self.carry) }.at(now, p)
    }
}

/// How close a bucket is to its limit, which sets how often its increments are written
/// (each write also reads the bucket back).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Tier {
    /// Below 10 % of the limit: written every 4 sync intervals.
    Idle,
    /// 10–50 %: written every interval.
    Low,
    /// 50–80 %: written every interval.
    Normal,
    /// Above 80 %: written every half interval.
    Hot,
}

impl Tier {
    /// The tier of `level` against `limit`.
    pub fn of(level: u64, limit: u64) -> Tier {
        // level / limit compared in integers: 10 × level against limit, and so on.
        let level = u128::from(level);
        let limit = u128::from(limit);
        if level * 10 > limit * 8 {
            Tier::Hot
        } else if level * 2 > limit {
            Tier::Normal
        } else if level * 10 >= limit {
            Tier::Low
        } else {
            Tier::Idle
        }
    }

    /// How long after a send the next one of a bucket with increments is due, in µs, for
    /// a sync interval of `interval` µs.
    pub fn send_after(self, interval: u64) -> u64 {
        match self {
            Tier::Idle => interval.saturating_mul(4),
            Tier::Low | Tier::Normal => interval,
            Tier::Hot => interval / 2,
        }
    }

    /// `idle`, `low`, `normal` or `hot`.
    pub fn as_str(self) -> &'static str {
        match self {
            Tier::Idle => "idle",
            Tier::Low => "low",
            Tier::Normal => "normal",
            Tier::Hot => "hot",
        }
    }
}

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

    /// Takes `n` refunded hits off `own` (never below 0) and sends `-n` with the next sync,
    /// to the window of `now`.
    pub fn refund(&mut self, n: u64, now: u64, local: u64) {
        let mut own = self.own.at(now, &self.params);
        own.current = own.current.saturating_sub(n);
        self.own = own;
        self.pending.add(-i64::try_from(n).unwrap_or(i64::MAX), now, &self.params);
        self.dirtied(local);
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
    /// (a read may demote).
    pub fn fold(&mut self, counts: Counts, now_redis: u64, now_local: u64, offset: i64) {
        self.base = counts;
        self.own = self.pending.as_counts(now_redis, &self.params);
        self.inflight = Unsent::default();
        self.read_at = now_local.max(1);
        self.offset = offset;
        self.failing_since = 0;
        self.tier = Tier::of(self.estimate(now_redis).level(now_redis, &self.params), self.params.limit);
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

    fn sliding(limit: u64) -> Params {
        Params { algorithm: Algorithm::SlidingWindow, limit, unit_us: 1_000_000, burst: limit }
    }

    #[test]
    fn counts_roll_by_the_algorithms_rule() {
        let p = sliding(10);
        let c = Counts { start: 5_000_000, current: 4, previous: 2 };
        assert_eq!(c.at(5_500_000, &p), c);
        assert_eq!(c.at(6_200_000, &p), Counts { start: 6_000_000, current: 0, previous: 4 });
        assert_eq!(c.at(7_000_000, &p), Counts { start: 7_000_000, current: 0, previous: 0 });
        let fixed = Params { algorithm: Algorithm::FixedWindow, ..p };
        assert_eq!(c.at(6_200_000, &fixed), Counts { start: 6_000_000, current: 0, previous: 0 });
        // A quarter into the window, three quarters of previous still count (rounded up).
        let rolled = c.at(6_250_000, &p);
        assert_eq!(rolled.level(6_250_000, &p), 3);
    }

    #[test]
    fn tiers_follow_the_level() {
        assert_eq!(Tier::of(0, 100), Tier::Idle);
        assert_eq!(Tier::of(9, 100), Tier::Idle);
        assert_eq!(Tier::of(10, 100), Tier::Low);
        assert_eq!(Tier::of(50, 100), Tier::Low);
        assert_eq!(Tier::of(51, 100), Tier::Normal);
        assert_eq!(Tier::of(80, 100), Tier::Normal);
        assert_eq!(Tier::of(81, 100), Tier::Hot);
        assert_eq!(Tier::of(1, 0), Tier::Hot);
        assert_eq!(Tier::Hot.send_after(250), 125);
        assert_eq!(Tier::Idle.send_after(250), 1000);
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
    fn unsent_increments_stay_in_their_window() {
        let p = sliding(100);
        let mut u = Unsent::default();
        u.add(5, 1_500_000, &p);
        u.add(-2, 1_700_000, &p);
        assert_eq!(u, Unsent { start: 1_000_000, delta: 3, carry: 0 });
        // Across one edge the window before is carried (it still weighs in)...
        u.add(-1, 2_100_000, &p);
        assert_eq!(u, Unsent { start: 2_000_000, delta: -1, carry: 3 });
        // ...across two, it is dropped.
        u.add(4, 3_100_000, &p);
        assert_eq!(u, Unsent { start: 3_000_000, delta: 4, carry: -1 });
        u.add(1, 5_000_000, &p);
        assert_eq!(u, Unsent { start: 5_000_000, delta: 1, carry: 0 });
        // A fixed window carries nothing: the window before no longer counts.
        let fixed = Params { algorithm: Algorithm::FixedWindow, ..p };
        let mut f = Unsent::default();
        f.add(-3, 1_500_000, &fixed);
        f.add(2, 2_500_000, &fixed);
        assert_eq!(f, Unsent { start: 2_000_000, delta: 2, carry: 0 });
        // A failed send merges into the later window.
        let mut later = Unsent { start: 2_000_000, delta: 1, carry: 0 };
        later.merge(Unsent { start: 1_000_000, delta: 7, carry: 9 }, &p);
        assert_eq!(later, Unsent { start: 2_000_000, delta: 1, carry: 7 });
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
