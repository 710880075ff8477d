//! Fixed window, as envoyproxy/ratelimit: epoch-aligned windows of `unit` µs
//! (`ws = now - now % unit`), one counter reset when the window changes — except that a
//! denied request consumes nothing.
//!
//! A calendar limit (`Params::period`) is the same counter over the period the caller
//! computed (a day, ISO week, month or year in a time zone) instead of `unit`-aligned
//! windows: see [`apply`].
//!
//! Owns the math only: no I/O, no clock (`now` is passed in, µs since the epoch).
//! `src/store/lua/fixed_window.lua` is the same function for Redis;
//! `tests/differential.rs` keeps the two equal. All values are clamped to, and saturate
//! at, [`MAX_VALUE`](super::MAX_VALUE) (2^53 − 1), exactly as the script does.

use super::bucket::{Decision, Hits, Outcome, Params, Period, State, Write};
use super::saturating::{add, clamp};

/// Applies the fixed window to the stored `(start, count, _)` (`None` = never seen or
/// expired; the third field is ignored and stored as 0).
///
/// The count carries over only if the stored start is this window's start. A start in the
/// future (a clock that stepped back) is treated as `now = start`.
///
/// Consume: allowed iff `count + n <= limit` → `Put` (expiring at the window's end),
/// `remaining = limit - count'`, `reset_us` = time to the window's end; denied → `Keep`,
/// `reset_us` = time to the window's end, when the count starts over (also reported when
/// `n > limit` and the request can never pass).
/// Peek: allowed iff one hit would pass; `remaining = limit - count`; `reset_us` = time to
/// the window's end, or 0 when nothing is counted; a denied peek reports the window's end.
/// Refund: `count - n` (never below 0), always allowed, `Delete` once the count is 0.
/// Overdraw: as a consume when it fits; otherwise recorded all the same, the count capped
/// at the limit (the window spent to its end, where the debt ends), and denied.
///
/// Calendar periods (`p.period = Some([start, end))`, computed by the caller from its own
/// clock): the window is that period, and its end is stored as the state's third field.
/// A stored period that starts later than the given one and ends after its own start (an
/// instance whose clock crossed the boundary first) is the window instead: the count is
/// never reset by a caller that has not crossed yet. `now` (Redis `TIME` in the scripts)
/// is then clamped into the window (`[start, end − 1]`): a clock behind the caller counts
/// from the period's start, a clock past its end counts in it until the caller crosses
/// (`reset_us` then 1 µs). So which period a charge falls in is the callers' clocks'
/// decision, never the server's; the server's clock only measures the time left. A period's
/// state expires [`CALENDAR_GRACE_US`] after its end (so a caller a little behind still
/// finds the count it must not reset); state read after that is no state.
pub fn apply(state: Option<(u64, u64, u64)>, now: u64, p: &Params, hits: Hits) -> Outcome {
    let window = Window::observe(state, now, p);
    match hits {
        Hits::Consume(n) => {
            let n = clamp(n);
            if window.count + n <= window.limit {
                window.charged(window.count + n)
            } else {
                window.denied()
            }
        }
        Hits::Peek if window.count < window.limit => {
            Outcome { decision: window.describe(window.count), write: Write::Keep }
        }
        Hits::Peek => window.denied(),
        Hits::Refund(n) => window.charged(window.count.saturating_sub(clamp(n))),
        Hits::Overdraw(n) => {
            // Recorded whether or not it fits, up to the limit (as the sliding window: the
            // window is spent to its end, where the debt ends); denied past the limit.
            let count = add(window.count, clamp(n));
            if count <= window.limit {
                window.charged(count)
            } else {
                let write = window.charged(window.limit).write;
                Outcome { decision: window.denied().decision, write }
            }
        }
    }
}

/// How long a calendar period's count outlives the period's end: callers whose clocks have
/// not crossed the boundary yet (behind the server's, or a charge planned just before it)
/// still count in the period, never in a fresh copy of it. Clocks further apart than this
/// are a broken deployment: such a caller would count in an empty copy of its period.
pub const CALENDAR_GRACE_US: u64 = 60_000_000;

/// `(fresh, now)`: hits a fresh window admits (`limit`), and hits the stored count still
/// admits at `now`. For [`standing`](super::standing).
pub(super) fn admissible(state: Option<(u64, u64, u64)>, now: u64, p: &Params) -> (u64, u64) {
    let window = Window::observe(state, now, p);
    (window.limit, window.limit.saturating_sub(window.count))
}

/// One bucket at one instant; every field <= MAX_VALUE.
struct Window {
    limit: u64,
    /// Start of the current window (`now - now % unit`, `now = max(now, stored start)`).
    start: u64,
    /// Time until the window ends, in `[1, unit]`.
    left: u64,
    count: u64,
    /// What the state's third field stores: 0, or a calendar period's end.
    end: u64,
    /// When the state expires: the window's end (a calendar period's: that plus
    /// [`CALENDAR_GRACE_US`]).
    expires_at: u64,
}

impl Window {
    fn observe(state: Option<(u64, u64, u64)>, now: u64, p: &Params) -> Window {
        if let Some(period) = p.period {
            return Window::calendar(state, now, p, period);
        }
        let unit = clamp(p.unit_us).max(1);
        let stored = state.map(|(s, c, _)| (clamp(s), clamp(c)));
        let now = stored.map_or(clamp(now), |(s, _)| clamp(now).max(s));
        let elapsed = now % unit;
        let start = now - elapsed;
        let count = match stored {
            Some((s, c)) if s == start => c,
            _ => 0,
        };
        // Not saturated: a store must never see it as passed while it still counts.
        let expires_at = start + unit;
        Window { limit: clamp(p.limit), start, left: unit - elapsed, count, end: 0, expires_at }
    }

    /// The window of a calendar limit at `now` (see [`apply`]).
    fn calendar(state: Option<(u64, u64, u64)>, now: u64, p: &Params, period: Period) -> Window {
        let now = clamp(now);
        let stored = state
            .map(|(s, c, e)| (clamp(s), clamp(c), clamp(e)))
            .filter(|&(_, _, e)| add(e, CALENDAR_GRACE_US) > now);
        let mut start = clamp(period.start_us);
        let mut end = clamp(period.end_us).max(add(start, 1));
        if let Some((s, _, e)) = stored {
            if s > start && e > s {
                (start, end) = (s, e);
            }
        }
        let now = now.max(start).min(end - 1);
        let count = match stored {
            Some((s, c, _)) if s == start => c,
            _ => 0,
        };
        let expires_at = add(end, CALENDAR_GRACE_US);
        Window { limit: clamp(p.limit), start, left: end - now, count, end, expires_at }
    }

    /// An allowed answer for a window holding `count`.
    fn describe(&self, count: u64) -> Decision {
        Decision {
            allowed: true,
            remaining: self.limit.saturating_sub(count),
            reset_us: if count > 0 { self.left } else { 0 },
        }
    }

    fn denied(&self) -> Outcome {
        Outcome {
            decision: Decision { allowed: false, remaining: 0, reset_us: self.left },
            write: Write::Keep,
        }
    }

    /// Allowed, leaving `count` in the window: stores it (or drops an empty window).
    fn charged(&self, count: u64) -> Outcome {
        let write = if count == 0 {
            Write::Delete
        } else {
            Write::Put {
                state: State::Window { start: self.start, current: count, previous: self.end, until: 0 },
                expires_at: self.expires_at,
            }
        };
        Outcome { decision: self.describe(count), write }
    }
}

#[cfg(test)]
mod calendar_tests;
#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::{Algorithm, MAX_VALUE};
    use proptest::prelude::*;

    const UNIT: u64 = 1_000_000;
    const WS: u64 = 1_700_000_000 * UNIT;

    fn params(limit: u64, unit_us: u64) -> Params {
        Params { algorithm: Algorithm::FixedWindow, limit, unit_us, burst: 0, penalty_us: 0, period: None }
    }

    type St = Option<(u64, u64, u64)>;

    fn step(state: &mut St, now: u64, p: &Params, hits: Hits) -> Decision {
        let out = apply(*state, now, p, hits);
        match out.write {
            Write::Keep => {}
            Write::Delete => *state = None,
            Write::Put { state: State::Window { start, current, previous: 0, .. }, expires_at } => {
                assert_eq!(expires_at, start + p.unit_us.max(1));
                *state = Some((start, current, 0));
            }
            Write::Put { .. } => panic!("wrong state shape"),
        }
        out.decision
    }

    fn dec(allowed: bool, remaining: u64, reset_us: u64) -> Decision {
        Decision { allowed, remaining, reset_us }
    }

    #[test]
    fn counts_then_starts_over() {
        let p = params(3, UNIT);
        let mut st = None;
        let now = WS + 250_000;
        assert_eq!(step(&mut st, now, &p, Hits::Consume(1)), dec(true, 2, 750_000));
        assert_eq!(step(&mut st, now, &p, Hits::Consume(2)), dec(true, 0, 750_000));
        assert_eq!(step(&mut st, now + 1, &p, Hits::Consume(1)), dec(false, 0, 749_999));
        assert_eq!(st, Some((WS, 3, 0)), "a denial consumes nothing");
        assert_eq!(step(&mut st, WS + UNIT, &p, Hits::Consume(3)), dec(true, 0, UNIT));
        assert_eq!(step(&mut st, WS + UNIT, &p, Hits::Consume(4)), dec(false, 0, UNIT));
    }

    #[test]
    fn limit_zero_and_oversized_requests_report_the_window_end() {
        let d = apply(None, WS + 1, &params(0, UNIT), Hits::Consume(1)).decision;
        assert_eq!(d, dec(false, 0, UNIT - 1));
        let d = apply(None, WS + 1, &params(0, UNIT), Hits::Peek).decision;
        assert_eq!(d, dec(false, 0, UNIT - 1));
        let d = apply(None, WS, &params(2, UNIT), Hits::Consume(3)).decision;
        assert_eq!(d, dec(false, 0, UNIT));
    }

    #[test]
    fn peek_and_refund() {
        let p = params(5, UNIT);
        let st = Some((WS, 2, 0));
        let peek = apply(st, WS + 10, &p, Hits::Peek);
        assert_eq!(peek, Outcome { decision: dec(true, 3, UNIT - 10), write: Write::Keep });
        assert_eq!(apply(None, WS + 10, &p, Hits::Peek).decision, dec(true, 5, 0));
        let full = apply(Some((WS, 5, 0)), WS + 10, &p, Hits::Peek).decision;
        assert_eq!(full, dec(false, 0, UNIT - 10));
        let one = apply(st, WS + 10, &p, Hits::Refund(1));
        let state = State::Window { start: WS, current: 1, previous: 0, until: 0 };
        assert_eq!(one.write, Write::Put { state, expires_at: WS + UNIT });
        assert_eq!(one.decision, dec(true, 4, UNIT - 10));
        let all = apply(st, WS + 10, &p, Hits::Refund(7));
        assert_eq!(all, Outcome { decision: dec(true, 5, 0), write: Write::Delete });
        let stale = apply(st, WS + UNIT, &p, Hits::Refund(1));
        assert_eq!(stale.decision, dec(true, 5, 0));
    }

    #[test]
    fn edge_cases_do_not_panic() {
        let p = params(5, UNIT);
        let future = apply(Some((WS + UNIT, 5, 0)), WS, &p, Hits::Consume(1));
        assert_eq!(future.decision, dec(false, 0, UNIT), "time stands still");
        for &x in &[0, 1, 3, MAX_VALUE, u64::MAX] {
            for hits in [Hits::Consume(x), Hits::Peek, Hits::Refund(x)] {
                let d = apply(Some((x, x, x)), x, &params(x, x), hits).decision;
                assert!(d.remaining <= MAX_VALUE && d.reset_us <= MAX_VALUE);
            }
        }
    }

    fn arb_params() -> impl Strategy<Value = Params> {
        (0u64..30, prop::sample::select(vec![1u64, 7, 1_000, UNIT]))
            .prop_map(|(limit, unit)| params(limit, unit))
    }

    fn arb_steps() -> impl Strategy<Value = Vec<(u64, Hits)>> {
        let hits = prop_oneof![
            6 => (1u64..6).prop_map(Hits::Consume),
            1 => Just(Hits::Peek),
            1 => (1u64..6).prop_map(Hits::Refund),
        ];
        let dt = prop_oneof![Just(0u64), 0u64..2_000, 0u64..3_000_000];
        prop::collection::vec((dt, hits), 1..80)
    }

    proptest! {
        #[test]
        fn never_more_than_limit_per_window(p in arb_params(), steps in arb_steps()) {
            let (mut st, mut now) = (None, WS);
            let mut admitted = std::collections::HashMap::new();
            for (dt, hits) in steps {
                let hits = if let Hits::Refund(n) = hits { Hits::Consume(n) } else { hits };
                now += dt;
                let d = step(&mut st, now, &p, hits);
                prop_assert!(d.remaining <= p.limit);
                if let (true, Hits::Consume(n)) = (d.allowed, hits) {
                    *admitted.entry(now / p.unit_us).or_insert(0) += n;
                }
            }
            prop_assert!(admitted.values().all(|&sum| sum <= p.limit));
        }

        #[test]
        fn denial_keeps_state_and_retry_at_reset_passes(p in arb_params(), steps in arb_steps()) {
            let (mut st, mut now) = (None, WS);
            for (dt, hits) in steps {
                now += dt;
                let out = apply(st, now, &p, hits);
                prop_assert!(out.decision.remaining <= p.limit);
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
            dts in prop::collection::vec(0u64..400_000, 1..30),
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
