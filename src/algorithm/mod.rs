//! Rate-limit algorithms as pure functions of `(state, now, params, hits)`.
//!
//! This module owns the math and nothing else: no I/O, no clock, no tokio, redis or
//! prometheus. Time is integer microseconds since the Unix epoch, passed in by the caller.
//! The memory store calls these functions directly; the Lua scripts in `src/store/lua/`
//! implement the same math for Redis, and a differential test keeps the two in step.
//!
//! Layout: `bucket.rs` (the vocabulary: params, hits, state, decision) and
//! `saturating.rs` (arithmetic capped at `MAX_VALUE`) at the bottom; `gcra.rs` (default),
//! `sliding_window.rs` (two-epoch weighted counter), `fixed_window.rs` (epoch-aligned, as
//! envoyproxy/ratelimit) over them; this file dispatches to those three (`apply`,
//! `standing`); `joint.rs`, over the dispatch, decides a group of charges that stand or
//! fall together (several limits of one descriptor, a domain charged all-or-nothing);
//! `reservation.rs`, over `joint`, reserves an estimate and settles it with the usage.
//! Layers inside, top to bottom (`tests/layers.rs`): `reservation`; `joint`; `fixed_window`, `gcra`,
//! `penalty`, `sliding_window`; this file; `bucket`, `saturating`.

mod bucket;
pub mod fixed_window;
pub mod gcra;
pub mod joint;
mod penalty;
pub mod reservation;
mod saturating;
pub mod share;
pub mod sliding_window;

pub use bucket::{Algorithm, Decision, Hits, Outcome, Params, Period, State, Write};
use saturating::clamp;
pub(crate) use saturating::mul_div_ceil;
pub use saturating::MAX_VALUE;

/// What forgetting a bucket's state would hand its owner: how a capped store ranks
/// buckets for eviction. Ordered so that the bucket to evict first is the smallest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Standing {
    /// One more hit would be denied now: forgetting the state is a free reset. Such a
    /// bucket sorts after every bucket that still admits something.
    pub at_limit: bool,
    /// Requests a fresh bucket would admit now beyond what this one admits: what its
    /// loss gives back (GCRA: `ceil((tat - now) / emission)`; windows: the count still
    /// counting, the previous window weighted). 0 means the state carries nothing.
    pub given_back: u64,
}

impl Standing {
    /// From what a fresh bucket admits (`full`) and what this one admits (`left`).
    fn new(full: u64, left: u64) -> Standing {
        // A bucket that admits nothing even when fresh (limit or burst 0) loses nothing.
        Standing { at_limit: left == 0 && full > 0, given_back: full.saturating_sub(left) }
    }
}

/// Applies `params.algorithm` to the stored `state` (None = never seen or expired), and
/// the limit's penalty (`penalty`: a bucket penalized is denied before the algorithm is
/// asked; a consume the algorithm denies starts one).
///
/// A state of the wrong shape for the algorithm (after a config change) is treated as
/// absent. `now` is µs since the epoch; callers must not let it step backwards within a
/// bucket, but the functions tolerate it.
pub fn apply(state: Option<State>, now: u64, params: &Params, hits: Hits) -> Outcome {
    let state = state.filter(|s| fits(*s, params.algorithm));
    let until = state.map_or(0, State::until);
    if clamp(now) < until {
        return penalty::during(until, clamp(now), hits);
    }
    let outcome = decide(state, now, params, hits);
    if params.penalty_us > 0 && !outcome.decision.allowed && matches!(hits, Hits::Consume(_)) {
        return penalty::start(state, now, params, outcome.decision);
    }
    outcome
}

/// Whether `state` is of the shape `algorithm` stores.
fn fits(state: State, algorithm: Algorithm) -> bool {
    matches!(
        (state, algorithm),
        (State::Gcra { .. }, Algorithm::Gcra)
            | (State::Window { .. }, Algorithm::SlidingWindow | Algorithm::FixedWindow)
    )
}

/// The algorithm alone, without the penalty.
fn decide(state: Option<State>, now: u64, params: &Params, hits: Hits) -> Outcome {
    match params.algorithm {
        Algorithm::Gcra => {
            let tat = match state {
                Some(State::Gcra { tat, rem, .. }) => Some((tat, rem)),
                _ => None,
            };
            gcra::apply(tat, now, params, hits)
        }
        Algorithm::SlidingWindow => sliding_window::apply(window(state), now, params, hits),
        Algorithm::FixedWindow => fixed_window::apply(window(state), now, params, hits),
    }
}

/// How much the stored `state` still counts at `now` under `params` (see [`Standing`]).
///
/// Pure and O(1): a store may call it on every bucket it samples for eviction. A state of
/// the wrong shape for the algorithm counts nothing, as [`apply`] would ignore it.
pub fn standing(state: State, now: u64, params: &Params) -> Standing {
    if fits(state, params.algorithm) && clamp(now) < state.until() {
        // Penalized: forgetting the state lifts the penalty, a free reset of everything.
        let full = decide(None, now, params, Hits::Peek).decision.remaining;
        return Standing { at_limit: true, given_back: full };
    }
    let (full, left) = match (params.algorithm, state) {
        (Algorithm::Gcra, State::Gcra { tat, rem, .. }) => gcra::admissible((tat, rem), now, params),
        (Algorithm::SlidingWindow, State::Window { .. }) => {
            sliding_window::admissible(window(Some(state)), now, params)
        }
        (Algorithm::FixedWindow, State::Window { .. }) => {
            fixed_window::admissible(window(Some(state)), now, params)
        }
        _ => (0, 0),
    };
    Standing::new(full, left)
}

fn window(state: Option<State>) -> Option<(u64, u64, u64)> {
    match state {
        Some(State::Window { start, current, previous, .. }) => Some((start, current, previous)),
        _ => None,
    }
}

#[cfg(test)]
mod overdraft_tests;

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const NOW: u64 = 1_700_000_000_000_000;
    const HOUR: u64 = 3_600_000_000;

    fn params(algorithm: Algorithm, limit: u64, unit_us: u64, burst: u64) -> Params {
        Params { algorithm, limit, unit_us, burst, penalty_us: 0, period: None }
    }

    /// The state after `n` single hits at `now` on a fresh bucket.
    fn charged(p: &Params, n: u64, now: u64) -> State {
        let mut state = None;
        for _ in 0..n {
            if let Write::Put { state: s, .. } = apply(state, now, p, Hits::Consume(1)).write {
                state = Some(s);
            }
        }
        state.expect("charged at least once")
    }

    #[test]
    fn standing_counts_what_forgetting_gives_back() {
        for algorithm in [Algorithm::Gcra, Algorithm::SlidingWindow, Algorithm::FixedWindow] {
            let p = params(algorithm, 5, HOUR, 5);
            let one = standing(charged(&p, 1, NOW), NOW, &p);
            assert_eq!(one, Standing { at_limit: false, given_back: 1 }, "{algorithm:?}");
            let four = standing(charged(&p, 4, NOW), NOW, &p);
            assert_eq!(four, Standing { at_limit: false, given_back: 4 }, "{algorithm:?}");
            let five = standing(charged(&p, 5, NOW), NOW, &p);
            assert_eq!(five, Standing { at_limit: true, given_back: 5 }, "{algorithm:?}");
            assert!(one < four && four < five, "an exhausted bucket sorts last");
        }
    }

    #[test]
    fn standing_follows_time() {
        // GCRA 5/hour: one request refills every 12 minutes; a fraction still counts as one.
        let p = params(Algorithm::Gcra, 5, HOUR, 5);
        let state = charged(&p, 5, NOW);
        assert_eq!(standing(state, NOW + HOUR / 5, &p), Standing { at_limit: false, given_back: 4 });
        assert_eq!(standing(state, NOW + HOUR / 5 - 1, &p), Standing { at_limit: true, given_back: 5 });
        assert_eq!(standing(state, NOW + HOUR, &p), Standing { at_limit: false, given_back: 0 });
        // Fixed window: the count stops counting when the window ends.
        let p = params(Algorithm::FixedWindow, 5, HOUR, 0);
        let start = NOW - NOW % HOUR;
        let state = charged(&p, 5, start);
        assert_eq!(standing(state, start + HOUR, &p).given_back, 0);
        // Sliding window: the previous window counts by the part still covered.
        let p = params(Algorithm::SlidingWindow, 4, HOUR, 0);
        let state = charged(&p, 4, start);
        assert_eq!(standing(state, start + HOUR + HOUR / 2, &p), Standing { at_limit: false, given_back: 2 });
        assert_eq!(standing(state, start + 2 * HOUR, &p).given_back, 0);
    }

    #[test]
    fn an_overdraw_is_recorded_past_the_limit_and_answered_as_a_consume() {
        for algorithm in [Algorithm::Gcra, Algorithm::SlidingWindow, Algorithm::FixedWindow] {
            let p = params(algorithm, 1_000, HOUR, 1_000);
            let start = NOW - NOW % HOUR;
            let mut state = None;
            let mut charge = |hits: Hits| {
                let out = apply(state, start, &p, hits);
                if let Write::Put { state: s, .. } = out.write {
                    state = Some(s);
                }
                out.decision
            };
            assert!(charge(Hits::Overdraw(600)).allowed, "{algorithm:?}");
            // 400 left: 600 more do not fit, are recorded all the same, and answered denied.
            let over = charge(Hits::Overdraw(600));
            assert!(!over.allowed && over.remaining == 0 && over.reset_us > 0, "{algorithm:?} {over:?}");
            // 200 overdrawn: nothing passes, not even a peek, until it has refilled.
            assert!(!charge(Hits::Peek).allowed, "{algorithm:?}");
            assert!(!charge(Hits::Consume(1)).allowed, "{algorithm:?}");
            // A plain consume of the same 600 would have been denied and recorded nothing.
            let plain = apply(Some(charged(&p, 600, start)), start, &p, Hits::Consume(600));
            assert_eq!(plain.write, Write::Keep, "{algorithm:?}");
        }
    }

    #[test]
    fn a_state_of_another_algorithm_counts_nothing() {
        let gcra = params(Algorithm::Gcra, 5, HOUR, 5);
        let window = params(Algorithm::FixedWindow, 5, HOUR, 0);
        assert_eq!(standing(charged(&gcra, 5, NOW), NOW, &window).given_back, 0);
        assert_eq!(standing(charged(&window, 5, NOW), NOW, &gcra).given_back, 0);
    }

    fn arb_params() -> impl Strategy<Value = Params> {
        let algorithm =
            prop_oneof![Just(Algorithm::Gcra), Just(Algorithm::SlidingWindow), Just(Algorithm::FixedWindow)];
        (algorithm, 1..50u64, prop_oneof![Just(1_000_000u64), Just(60_000_000), Just(HOUR)], 0..60u64)
            .prop_map(|(algorithm, limit, unit_us, burst)| Params {
                algorithm,
                limit,
                unit_us,
                burst,
                penalty_us: 0,
                period: None,
            })
    }

    proptest! {
        /// `at_limit` is exactly "one more hit is denied", and `given_back` is exactly what
        /// a fresh bucket admits beyond this one (peeks describe both).
        #[test]
        fn standing_agrees_with_apply(p in arb_params(), steps in prop::collection::vec((0..HOUR / 4, 1..4u64), 1..40)) {
            let mut state = None;
            let mut now = NOW;
            for (dt, n) in steps {
                now += dt;
                match apply(state, now, &p, Hits::Consume(n)).write {
                    Write::Put { state: s, .. } => state = Some(s),
                    Write::Delete => state = None,
                    Write::Keep => {}
                }
                let Some(s) = state else { continue };
                let at = now + dt / 2;
                let got = standing(s, at, &p);
                let one = apply(state, at, &p, Hits::Consume(1)).decision;
                let left = apply(state, at, &p, Hits::Peek).decision.remaining;
                let fresh = apply(None, at, &p, Hits::Peek).decision.remaining;
                prop_assert_eq!(got.at_limit, !one.allowed && fresh > 0, "{:?} {:?}", p, s);
                prop_assert_eq!(got.given_back + left, fresh, "{:?} {:?}", p, s);
            }
        }
    }
}
