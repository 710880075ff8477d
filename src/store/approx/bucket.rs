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
//! since the last send, and sent in the call now in flight. They are signed (a refund is
//! negative) and never lost: a failed call puts `inflight` back into `pending`.

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
        let unit = p.unit_us.max(1);
        let start = now - now % unit;
        if self.start >= start {
            return Counts { start, ..self };
        }
        if p.algorithm == Algorithm::SlidingWindow && self.start + unit == start {
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

/// How close a bucket is to its limit, which sets how often it is read from Redis.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Tier {
    /// Below 10 % of the limit: never read (its increments are still written).
    Idle,
    /// 10–50 %: read every 4 sync intervals.
    Low,
    /// 50–80 %: read every interval.
    Normal,
    /// Above 80 %: read every half interval.
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

    /// How long after a read the next one is due, in µs, for a sync interval of
    /// `interval` µs; `None`: never (idle).
    pub fn read_after(self, interval: u64) -> Option<u64> {
        match self {
            Tier::Idle => None,
            Tier::Low => Some(interval.saturating_mul(4)),
            Tier::Normal => Some(interval),
            Tier::Hot => Some(interval / 2),
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
    pub pending: i64,
    /// Sent in the sync call now in flight.
    pub inflight: i64,
    /// Local µs of the last sync that answered for this bucket; 0: never.
    pub read_at: u64,
    /// Local µs at which a read is due; `u64::MAX`: none (idle).
    pub next_read: u64,
    /// Local µs of this bucket's first failed sync since its last good one; 0: none.
    pub failing_since: u64,
    pub tier: Tier,
}

impl Bucket {
    /// A bucket never synced: empty until its first sync says otherwise.
    pub fn new(params: Params) -> Bucket {
        Bucket {
            params,
            base: Counts::default(),
            own: Counts::default(),
            pending: 0,
            inflight: 0,
            read_at: 0,
            // No read of its own: its first sync is its first write (or a promotion's
            // read); until then the share rule caps it (see `approx`).
            next_read: u64::MAX,
            failing_since: 0,
            tier: Tier::Idle,
        }
    }

    /// The estimate at `now` (Redis clock): base plus own, in now's window.
    pub fn estimate(&self, now: u64) -> Counts {
        let p = &self.params;
        self.base.at(now, p).plus(self.own.at(now, p))
    }

    /// Adds `n` admitted hits at `now` (Redis clock) to `own` and `pending`.
    pub fn admit(&mut self, n: u64, now: u64) {
        let mut own = self.own.at(now, &self.params);
        own.current = own.current.saturating_add(n);
        self.own = own;
        self.pending = self.pending.saturating_add(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// Takes `n` refunded hits off `own` (never below 0) and sends `-n` with the next sync.
    pub fn refund(&mut self, n: u64, now: u64) {
        let mut own = self.own.at(now, &self.params);
        own.current = own.current.saturating_sub(n);
        self.own = own;
        self.pending = self.pending.saturating_sub(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// Raises the tier to that of the level at `now` if it is higher, moving the next read
    /// forward to the new tier's (never demotes: only a read does).
    pub fn promote(&mut self, now_redis: u64, now_local: u64, interval: u64) {
        let tier = Tier::of(self.estimate(now_redis).level(now_redis, &self.params), self.params.limit);
        if tier > self.tier {
            self.tier = tier;
            if let Some(after) = tier.read_after(interval) {
                let from = if self.read_at == 0 { now_local } else { self.read_at };
                self.next_read = self.next_read.min(from.saturating_add(after));
            }
        }
    }

    /// Folds a sync's answer: Redis's counts (which include `inflight`) become the base,
    /// what was admitted during the call becomes `own`, and the tier is set from the level
    /// (a read may demote).
    pub fn fold(&mut self, counts: Counts, now_redis: u64, now_local: u64, interval: u64) {
        self.base = counts;
        let during = u64::try_from(self.pending).unwrap_or(0);
        self.own = Counts { start: counts.start, current: during, previous: 0 }.at(now_redis, &self.params);
        self.inflight = 0;
        self.read_at = now_local;
        self.failing_since = 0;
        self.tier = Tier::of(self.estimate(now_redis).level(now_redis, &self.params), self.params.limit);
        self.next_read =
            self.tier.read_after(interval).map_or(u64::MAX, |after| now_local.saturating_add(after));
    }

    /// Whether nothing of this bucket is left to say: no increment waiting or in flight,
    /// and both counts are past their windows at `now` (Redis clock).
    pub fn is_spent(&self, now: u64) -> bool {
        self.pending == 0 && self.inflight == 0 && {
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
        assert_eq!(Tier::Hot.read_after(250), Some(125));
        assert_eq!(Tier::Idle.read_after(250), None);
    }

    #[test]
    fn promotion_is_immediate_and_only_a_read_demotes() {
        let mut b = Bucket::new(sliding(10));
        assert_eq!(b.next_read, u64::MAX, "a new bucket is synced by its first write");
        b.fold(Counts::default(), 0, 1_000, 250_000);
        assert_eq!((b.tier, b.next_read), (Tier::Idle, u64::MAX));
        b.admit(6, 100);
        b.promote(100, 1_000, 250_000);
        assert_eq!(b.tier, Tier::Normal);
        assert_eq!(b.next_read, 251_000, "one interval after the last read");
        b.admit(3, 200);
        b.promote(200, 2_000, 250_000);
        assert_eq!(b.tier, Tier::Hot);
        assert_eq!(b.next_read, 126_000, "the new tier counts from the last read");
        // A read showing the bucket emptied (a reset) demotes it.
        b.inflight = b.pending;
        b.pending = 0;
        b.fold(Counts { start: 0, current: 0, previous: 0 }, 300, 3_000, 250_000);
        assert_eq!(b.tier, Tier::Idle);
        assert_eq!(b.next_read, u64::MAX);
    }

    #[test]
    fn a_fold_keeps_what_was_admitted_during_the_call() {
        let mut b = Bucket::new(sliding(100));
        b.admit(5, 10);
        b.inflight = b.pending;
        b.pending = 0;
        b.admit(2, 20); // during the call
        b.fold(Counts { start: 0, current: 12, previous: 0 }, 30, 30, 250_000);
        assert_eq!(b.estimate(40).level(40, &b.params), 14);
        assert_eq!((b.pending, b.inflight), (2, 0));
    }
}
