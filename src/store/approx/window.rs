//! The window arithmetic of an estimate: window counts as the window scripts store them
//! ([`Counts`]), rolled to now's window by the algorithm's own rule (a sliding window's
//! previous count is weighted down as the window slides; a fixed window starts again at 0),
//! and increments not yet written, kept per window ([`Unsent`]): an increment is written to
//! the window it was admitted in, so a refund that waited across a window edge frees nothing
//! in the next window, and one older than the window before is dropped.

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

    /// `other` taken off, never below 0 (two counts of the same window).
    pub fn minus(self, other: Counts) -> Counts {
        Counts {
            start: self.start,
            current: self.current.saturating_sub(other.current),
            previous: self.previous.saturating_sub(other.previous),
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
        State::Window { start: self.start, current: self.current, previous: self.previous, until: 0 }
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

    /// The refunds in it beyond its admissions (its negative parts), as counts in the window
    /// of `now`: what the write will take off Redis's counts.
    pub fn refunds_as_counts(&self, now: u64, p: &Params) -> Counts {
        let negative = |n: i64| n.min(0).unsigned_abs();
        Counts { start: self.start, current: negative(self.delta), previous: negative(self.carry) }.at(now, p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
