//! Sliding window as a two-epoch weighted counter: epoch-aligned windows of `unit` µs, the
//! count of the current window plus the previous window's count weighted by the part of
//! it the sliding window still covers.
//!
//! Owns the math only: no I/O, no clock (`now` is passed in, µs since the epoch).
//! `src/store/lua/sliding_window.lua` is the same function for Redis;
//! `tests/differential.rs` keeps the two equal. All values are clamped to, and saturate
//! at, [`MAX_VALUE`](super::MAX_VALUE) (2^53 − 1), exactly as the script does.
//!
//! With `ws = now - now % unit` and `elapsed = now - ws`, the estimate is
//! `previous * (unit - elapsed) / unit + current`, and `n` hits are admitted iff
//! `previous * (unit - elapsed) + (current + n) * unit <= limit * unit`. No floats: that
//! is evaluated as `ceil(previous * (unit - elapsed) / unit) + current + n <= limit`, which
//! is the same inequality (the right side is an integer) and keeps every number in range.

use super::bucket::{Decision, Hits, Outcome, Params, State, Write};
use super::saturating::{add, clamp, mul_div, mul_div_ceil};

/// Applies the sliding window to the stored `(start, current, previous)` (`None` = never
/// seen or expired).
///
/// A stored start equal to this window's start keeps both counters; one window older
/// rolls `current` into `previous`; anything else starts empty. A start in the future (a
/// clock that stepped back) is treated as `now = start`: time stands still, nothing panics.
///
/// Consume: allowed → `Put` (expiring two windows after `ws`), `remaining` = hits still
/// admissible now, `reset_us` = time until the estimate is 0 again; denied → `Keep`,
/// `reset_us` = the exact time until the same request would pass (rounded up to the µs;
/// if `n > limit` it never passes and the end of the next window is reported).
/// Peek: allowed iff one hit would pass; `remaining`/`reset_us` describe the bucket as it
/// is; when denied the reset is at least the time until one hit passes.
/// Refund: takes `n` off `current` only (never below 0; `previous` is left alone), always
/// allowed, `Delete` once both counters are 0.
/// Overdraw: as a consume when it fits; otherwise recorded all the same, `current` capped
/// at the limit, and denied until one hit fits again. The cap is what ends the debt with
/// its window: the window is spent to its end, and the next one weighs it as a window that
/// admitted exactly its limit (one hit fits `unit / limit` into it), never as the report.
pub fn apply(state: Option<(u64, u64, u64)>, now: u64, p: &Params, hits: Hits) -> Outcome {
    let window = Window::observe(state, now, p);
    match hits {
        Hits::Consume(n) => {
            let n = clamp(n);
            if window.fits(n) {
                window.charged(window.current + n)
            } else {
                window.denied(window.until_fits(n))
            }
        }
        Hits::Peek => {
            let decision = if window.fits(1) {
                window.describe()
            } else {
                let reset_us = window.until_full().max(window.until_fits(1));
                window.denied(reset_us).decision
            };
            Outcome { decision, write: Write::Keep }
        }
        Hits::Refund(n) => window.charged(window.current.saturating_sub(clamp(n))),
        Hits::Overdraw(n) => {
            let n = clamp(n);
            if window.fits(n) {
                return window.charged(window.current + n);
            }
            // Recorded all the same, up to the limit: the debt ends with its window (a
            // larger count would weigh on the next one as its previous count). Denied,
            // until one more hit fits.
            let after = Window { current: add(window.current, n).min(window.limit), ..window };
            let reset_us = after.until_fits(1);
            let write = window.charged(after.current).write;
            Outcome { decision: Decision { allowed: false, remaining: 0, reset_us }, write }
        }
    }
}

/// `(fresh, now)`: hits a fresh bucket would admit at `now` (`limit`), and hits the
/// stored windows admit. For [`standing`](super::standing).
pub(super) fn admissible(state: Option<(u64, u64, u64)>, now: u64, p: &Params) -> (u64, u64) {
    let window = Window::observe(state, now, p);
    (window.limit, window.remaining())
}

/// One bucket at one instant (`now = max(now, stored start)`), after the rollover; every
/// field <= MAX_VALUE.
#[derive(Debug, Clone, Copy)]
struct Window {
    unit: u64,
    limit: u64,
    /// Start of the current window (`now - now % unit`).
    start: u64,
    /// `now - start`, in `[0, unit)`.
    elapsed: u64,
    current: u64,
    previous: u64,
}

impl Window {
    fn observe(state: Option<(u64, u64, u64)>, now: u64, p: &Params) -> Window {
        let unit = clamp(p.unit_us).max(1);
        let stored = state.map(|(s, c, p)| (clamp(s), clamp(c), clamp(p)));
        let now = stored.map_or(clamp(now), |(s, _, _)| clamp(now).max(s));
        let elapsed = now % unit;
        let start = now - elapsed;
        let (current, previous) = match stored {
            Some((s, c, p)) if s == start => (c, p),
            Some((s, c, _)) if start >= unit && s == start - unit => (0, c),
            _ => (0, 0),
        };
        Window { unit, limit: clamp(p.limit), start, elapsed, current, previous }
    }

    /// `ceil(previous * (unit - elapsed) / unit)`: the previous window's share, rounded up
    /// so that comparing it plus integers against `limit` is the exact inequality.
    fn weighted_previous(&self) -> u64 {
        mul_div_ceil(self.previous, self.unit - self.elapsed, self.unit)
    }

    fn fits(&self, n: u64) -> bool {
        // Three values <= 2^53: no u64 overflow, and no saturation that could admit.
        self.weighted_previous() + self.current + n <= self.limit
    }

    fn remaining(&self) -> u64 {
        self.limit.saturating_sub(self.weighted_previous() + self.current)
    }

    /// Time until the estimate is 0 with no more charges.
    fn until_full(&self) -> u64 {
        let left = self.unit - self.elapsed;
        if self.current > 0 {
            add(left, self.unit)
        } else if self.previous > 0 {
            left
        } else {
            0
        }
    }

    /// Exact time until `n` hits fit, with no more charges; `n` does not fit now.
    fn until_fits(&self, n: u64) -> u64 {
        let left = self.unit - self.elapsed;
        if n > self.limit {
            return add(left, self.unit);
        }
        if self.previous > 0 && self.current + n <= self.limit {
            // This window, at elapsed e: previous * (unit - e) <= room * unit, so the part
            // of the previous window still covered may be at most `covered` (< left, as
            // n does not fit now).
            let room = self.limit - self.current - n;
            let covered = mul_div(room, self.unit, self.previous);
            if covered >= 1 {
                return left.saturating_sub(covered);
            }
        }
        // Next window: previous' = current, current' = 0.
        if self.current == 0 {
            return left;
        }
        let covered = mul_div(self.limit - n, self.unit, self.current);
        add(left, self.unit.saturating_sub(covered))
    }

    fn describe(&self) -> Decision {
        Decision { allowed: true, remaining: self.remaining(), reset_us: self.until_full() }
    }

    fn denied(&self, reset_us: u64) -> Outcome {
        Outcome { decision: Decision { allowed: false, remaining: 0, reset_us }, write: Write::Keep }
    }

    /// Allowed, with `current` set to `current`: stores the window (or drops an empty one).
    fn charged(mut self, current: u64) -> Outcome {
        self.current = current;
        let write = if self.current == 0 && self.previous == 0 {
            Write::Delete
        } else {
            Write::Put {
                state: State::Window {
                    start: self.start,
                    current: self.current,
                    previous: self.previous,
                    until: 0,
                },
                // Not saturated: a store must never see it as passed while it still counts.
                expires_at: self.start + 2 * self.unit,
            }
        };
        Outcome { decision: self.describe(), write }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::{Algorithm, MAX_VALUE};
    use proptest::prelude::*;

    const UNIT: u64 = 60_000_000;
    const WS: u64 = 28_333_333 * UNIT; // an aligned window start near 2023

    fn params(limit: u64, unit_us: u64) -> Params {
        Params { algorithm: Algorithm::SlidingWindow, limit, unit_us, burst: 0, penalty_us: 0, period: None }
    }

    type St = Option<(u64, u64, u64)>;

    fn step(state: &mut St, now: u64, p: &Params, hits: Hits) -> Decision {
        let out = apply(*state, now, p, hits);
        match out.write {
            Write::Keep => {}
            Write::Delete => *state = None,
            Write::Put { state: State::Window { start, current, previous, .. }, expires_at } => {
                assert_eq!(expires_at, start + 2 * p.unit_us.max(1));
                *state = Some((start, current, previous));
            }
            Write::Put { .. } => panic!("wrong state shape"),
        }
        out.decision
    }

    fn dec(allowed: bool, remaining: u64, reset_us: u64) -> Decision {
        Decision { allowed, remaining, reset_us }
    }

    #[test]
    fn counts_within_one_window() {
        let p = params(3, UNIT);
        let mut st = None;
        let now = WS + 10_000_000;
        assert_eq!(step(&mut st, now, &p, Hits::Consume(2)), dec(true, 1, 2 * UNIT - 10_000_000));
        assert_eq!(st, Some((WS, 2, 0)));
        // Next window: previous' = 2 needs 2 * (unit - e) <= 1 * unit, e >= unit / 2.
        let d = step(&mut st, now, &p, Hits::Consume(2));
        assert_eq!(d, dec(false, 0, UNIT - 10_000_000 + UNIT / 2));
        assert_eq!(st, Some((WS, 2, 0)), "a denial consumes nothing");
        assert_eq!(step(&mut st, now, &p, Hits::Consume(1)).remaining, 0);
    }

    #[test]
    fn rollover_weights_the_previous_window() {
        let p = params(10, UNIT);
        // 10 in the previous window; a quarter into this one they weigh ceil(7.5) = 8.
        let st = Some((WS - UNIT, 10, 3));
        let now = WS + UNIT / 4;
        let d = apply(st, now, &p, Hits::Consume(2));
        assert_eq!(d.decision, dec(true, 0, 2 * UNIT - UNIT / 4));
        let state = State::Window { start: WS, current: 2, previous: 10, until: 0 };
        assert_eq!(d.write, Write::Put { state, expires_at: WS + 2 * UNIT });
        // 3 hits: need 10 * (unit - e) <= 7 * unit, e >= 0.3 unit.
        let d = apply(st, now, &p, Hits::Consume(3)).decision;
        assert_eq!(d, dec(false, 0, UNIT * 3 / 10 - UNIT / 4));
        // Two windows later nothing is left.
        assert_eq!(apply(st, WS + UNIT, &p, Hits::Peek).decision, dec(true, 10, 0));
    }

    #[test]
    fn denied_reset_in_the_next_window_and_never() {
        let p = params(4, 1_000);
        let st = Some((0, 4, 0));
        // Full now; next window previous' = 4: n = 2 needs 4 * (1000 - e) <= 2 * 1000.
        assert_eq!(apply(st, 250, &p, Hits::Consume(2)).decision, dec(false, 0, 750 + 500));
        assert_eq!(apply(st, 250, &p, Hits::Consume(4)).decision, dec(false, 0, 750 + 1_000));
        assert_eq!(apply(st, 250, &p, Hits::Consume(5)).decision, dec(false, 0, 1_750));
        let zero = params(0, 1_000);
        assert_eq!(apply(None, 250, &zero, Hits::Consume(1)).decision, dec(false, 0, 1_750));
        assert_eq!(apply(None, 250, &zero, Hits::Peek).decision, dec(false, 0, 1_750));
    }

    #[test]
    fn peek_and_refund() {
        let p = params(5, UNIT);
        let st = Some((WS, 3, 0));
        let peek = apply(st, WS, &p, Hits::Peek);
        assert_eq!(peek, Outcome { decision: dec(true, 2, 2 * UNIT), write: Write::Keep });
        let refund = apply(st, WS, &p, Hits::Refund(1));
        assert_eq!(refund.decision, dec(true, 3, 2 * UNIT));
        let all = apply(st, WS, &p, Hits::Refund(9));
        assert_eq!(all, Outcome { decision: dec(true, 5, 0), write: Write::Delete });
        let rolled = apply(st, WS + UNIT, &p, Hits::Refund(9));
        assert_eq!(rolled.decision, dec(true, 2, UNIT));
    }

    #[test]
    fn edge_cases_do_not_panic() {
        let p = params(5, UNIT);
        let future = apply(Some((WS + UNIT, 5, 0)), WS, &p, Hits::Consume(1));
        assert_eq!(future.decision, dec(false, 0, UNIT + UNIT / 5), "time stands still");
        for &x in &[0, 1, 3, MAX_VALUE, u64::MAX] {
            for hits in [Hits::Consume(x), Hits::Peek, Hits::Refund(x)] {
                let d = apply(Some((x, x, x)), x, &params(x, x), hits).decision;
                assert!(d.remaining <= MAX_VALUE && d.reset_us <= MAX_VALUE);
            }
        }
    }

    fn arb_params() -> impl Strategy<Value = Params> {
        (0u64..30, prop::sample::select(vec![1u64, 7, 1_000, 60_000_000]))
            .prop_map(|(limit, unit)| params(limit, unit))
    }

    fn arb_steps() -> impl Strategy<Value = Vec<(u64, Hits)>> {
        let hits = prop_oneof![
            6 => (1u64..6).prop_map(Hits::Consume),
            1 => Just(Hits::Peek),
            1 => (1u64..6).prop_map(Hits::Refund),
        ];
        let dt = prop_oneof![Just(0u64), 0u64..2_000, 0u64..100_000_000];
        prop::collection::vec((dt, hits), 1..80)
    }

    proptest! {
        #[test]
        fn estimate_never_exceeds_limit(p in arb_params(), steps in arb_steps()) {
            let (mut st, mut now) = (None, WS);
            for (dt, hits) in steps {
                now += dt;
                let d = step(&mut st, now, &p, hits);
                prop_assert!(d.remaining <= p.limit);
                if let (true, Hits::Consume(_), Some((s, c, prev))) = (d.allowed, hits, st) {
                    let (u, e) = (u128::from(p.unit_us), u128::from(now - s));
                    let weighted = u128::from(prev) * (u - e) + u128::from(c) * u;
                    prop_assert!(weighted <= u128::from(p.limit) * u);
                }
            }
        }

        #[test]
        fn denial_keeps_state_and_retry_at_reset_passes(p in arb_params(), steps in arb_steps()) {
            let (mut st, mut now) = (None, WS);
            for (dt, hits) in steps {
                now += dt;
                let out = apply(st, now, &p, hits);
                if !out.decision.allowed {
                    prop_assert_eq!(out.write, Write::Keep);
                    prop_assert!(out.decision.reset_us > 0);
                    if let Hits::Consume(n) = hits {
                        if n <= p.limit {
                            let at = now + out.decision.reset_us;
                            prop_assert!(apply(st, at, &p, hits).decision.allowed);
                            prop_assert!(!apply(st, at - 1, &p, hits).decision.allowed);
                        }
                    }
                }
                step(&mut st, now, &p, hits);
            }
        }

        #[test]
        fn reset_is_monotone_without_charges(
            p in arb_params(), steps in arb_steps(), n in 1u64..6,
            dts in prop::collection::vec(0u64..40_000_000, 1..30),
        ) {
            let (mut st, mut now) = (None, WS);
            for (dt, hits) in steps {
                now += dt;
                step(&mut st, now, &p, hits);
            }
            let (mut last_peek, mut last_denied) = (u64::MAX, u64::MAX);
            for dt in dts {
                now += dt;
                let peek = apply(st, now, &p, Hits::Peek).decision;
                if p.limit > 0 {
                    prop_assert!(peek.reset_us <= last_peek);
                }
                last_peek = peek.reset_us;
                let d = apply(st, now, &p, Hits::Consume(n)).decision;
                if !d.allowed && n <= p.limit {
                    prop_assert!(d.reset_us <= last_denied);
                    last_denied = d.reset_us;
                }
            }
        }
    }
}
