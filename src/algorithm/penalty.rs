//! Penalties (`penalty: 10m` of a limit): once a consume is denied, the bucket denies
//! everything for that long after the breach, whatever refills meanwhile; the denials it
//! causes do not extend it.
//!
//! Pure, like the rest of `algorithm`, and the same for every algorithm: the end of the
//! penalty, `until` (µs since the epoch), is kept beside the algorithm's own state
//! (`State::until`), and [`super::apply`] consults it before the algorithm and sets it
//! after a denial. `src/store/lua/algorithm/penalty.lua` is the same function for Redis
//! (kept equal by `tests/differential.rs`).
//!
//! - `now < until`: a consume or a peek is denied, `reset_us = until - now`; a refund is
//!   answered allowed with nothing admissible (`remaining` 0, the same reset) and changes
//!   nothing: what it would give back is not spendable before the penalty ends, and the
//!   penalty's point is that nothing refills it.
//! - Otherwise the algorithm decides. A *consume* it denies, on a limit with a penalty,
//!   is a breach: the state as read is stored again with `until = now + penalty`, and the
//!   denial's `reset_us` becomes the longer of the algorithm's wait and the penalty (a
//!   client told to come back then is not denied again by the window either). A denied
//!   peek (`hits_addend: 0`) is no breach: it asks, it does not spend.
//! - The penalty costs nothing on a limit without one: `penalty_us == 0` and a state with no
//!   `until` go straight to the algorithm.

use super::bucket::{Algorithm, Decision, Hits, Outcome, Params, State, Write};
use super::saturating::{add, clamp};

/// The answer while the bucket is penalized (`now < until`): nothing is written.
pub(super) fn during(until: u64, now: u64, hits: Hits) -> Outcome {
    let reset_us = until - now;
    let allowed = matches!(hits, Hits::Refund(_));
    Outcome { decision: Decision { allowed, remaining: 0, reset_us }, write: Write::Keep }
}

/// A breach at `now`: `denial` (the algorithm's) with the penalty's wait, and the state as
/// read (`None` or expired: a fresh bucket's) stored again with the penalty's end.
pub(super) fn start(state: Option<State>, now: u64, p: &Params, denial: Decision) -> Outcome {
    let now = clamp(now);
    let penalty = clamp(p.penalty_us);
    let until = add(now, penalty);
    let unit = clamp(p.unit_us).max(1);
    // A state that carries nothing any more (past its own expiry) is marked as a fresh
    // bucket's: the store may or may not have dropped it yet, and both must store the same.
    let state = state.filter(|s| expiry(*s, p.algorithm, unit) > now);
    let marked = match state {
        Some(State::Gcra { tat, rem, .. }) => State::Gcra { tat, rem, until },
        Some(State::Window { start, current, previous, .. }) => {
            State::Window { start, current, previous, until }
        }
        None if p.algorithm == Algorithm::Gcra => State::Gcra { tat: now, rem: 0, until },
        None => State::Window { start: now - now % unit, current: 0, previous: 0, until },
    };
    // As the algorithms' own writes, the expiry is not clamped (the scripts' saturates at
    // MAX_VALUE, where time stands still).
    let expires_at = match marked {
        State::Gcra { tat, rem, .. } => tat + u64::from(rem > 0),
        State::Window { start, .. } if p.algorithm == Algorithm::SlidingWindow => {
            start.saturating_add(unit.saturating_mul(2))
        }
        State::Window { start, .. } => start.saturating_add(unit),
    }
    .max(until);
    let decision = Decision { reset_us: denial.reset_us.max(penalty), ..denial };
    Outcome { decision, write: Write::Put { state: marked, expires_at } }
}

/// When `state` carries no information under its algorithm, as the algorithms' own writes
/// expire it (GCRA at the TAT rounded up, a sliding window two windows after its start, a
/// fixed window at its end), saturating at `MAX_VALUE` as the scripts do.
fn expiry(state: State, algorithm: Algorithm, unit: u64) -> u64 {
    match state {
        State::Gcra { tat, rem, .. } => add(clamp(tat), u64::from(rem > 0)),
        State::Window { start, .. } if algorithm == Algorithm::SlidingWindow => {
            add(add(clamp(start), unit), unit)
        }
        State::Window { start, .. } => add(clamp(start), unit),
    }
}

#[cfg(test)]
mod tests {
    use super::super::{apply, standing, Algorithm, Decision, Hits, Params, State, Write};

    const NOW: u64 = 1_700_000_000_000_000;
    const MINUTE: u64 = 60_000_000;
    const PENALTY: u64 = 10 * MINUTE;

    fn params(algorithm: Algorithm) -> Params {
        Params { algorithm, limit: 2, unit_us: MINUTE, burst: 2, penalty_us: PENALTY, period: None }
    }

    /// Charges `hits` at `now`, keeping the state as a store would.
    fn step(state: &mut Option<State>, now: u64, p: &Params, hits: Hits) -> Decision {
        let out = apply(*state, now, p, hits);
        match out.write {
            Write::Put { state: s, .. } => *state = Some(s),
            Write::Delete => *state = None,
            Write::Keep => {}
        }
        out.decision
    }

    #[test]
    fn a_breach_denies_for_the_penalty_whatever_refills() {
        for algorithm in [Algorithm::Gcra, Algorithm::SlidingWindow, Algorithm::FixedWindow] {
            let p = params(algorithm);
            let start = NOW - NOW % MINUTE;
            let mut state = None;
            assert!(step(&mut state, start, &p, Hits::Consume(2)).allowed, "{algorithm:?}");
            // The breach: denied, told to come back when the penalty ends.
            let breach = step(&mut state, start + 1, &p, Hits::Consume(1));
            assert_eq!(breach, Decision { allowed: false, remaining: 0, reset_us: PENALTY }, "{algorithm:?}");
            assert_eq!(state.map(State::until), Some(start + 1 + PENALTY));
            // Long after the window refilled, still denied; the denials do not extend it,
            // and a peek says the same.
            for at in [start + 3 * MINUTE, start + PENALTY] {
                let d = step(&mut state, at, &p, Hits::Consume(1));
                assert_eq!(d, Decision { allowed: false, remaining: 0, reset_us: start + 1 + PENALTY - at });
                assert!(!step(&mut state, at, &p, Hits::Peek).allowed);
            }
            assert_eq!(state.map(State::until), Some(start + 1 + PENALTY), "{algorithm:?}");
            // A refund is answered, changes nothing.
            let refund = step(&mut state, start + PENALTY, &p, Hits::Refund(2));
            assert_eq!((refund.allowed, refund.remaining), (true, 0));
            // At the end of the penalty the bucket is what it was, refilled by then.
            let end = start + 1 + PENALTY;
            assert!(step(&mut state, end, &p, Hits::Consume(1)).allowed, "{algorithm:?}");
        }
    }

    #[test]
    fn a_denied_peek_is_no_breach_and_no_penalty_costs_nothing() {
        let p = params(Algorithm::Gcra);
        let mut state = None;
        step(&mut state, NOW, &p, Hits::Consume(2));
        let peek = step(&mut state, NOW, &p, Hits::Peek);
        assert!(!peek.allowed && peek.reset_us <= MINUTE, "{peek:?}");
        assert_eq!(state.map(State::until), Some(0));
        // Without a penalty a denial writes nothing, as before penalties existed.
        let plain = Params { penalty_us: 0, ..p };
        assert_eq!(apply(state, NOW, &plain, Hits::Consume(1)).write, Write::Keep);
    }

    #[test]
    fn the_reset_is_the_longer_of_the_penalty_and_the_window() {
        // A fixed hour window denies for up to an hour; a 10-minute penalty does not
        // shorten that.
        let p = Params {
            algorithm: Algorithm::FixedWindow,
            limit: 1,
            unit_us: 60 * MINUTE,
            burst: 0,
            penalty_us: PENALTY,
            period: None,
        };
        let start = NOW - NOW % p.unit_us;
        let mut state = None;
        step(&mut state, start, &p, Hits::Consume(1));
        assert_eq!(step(&mut state, start, &p, Hits::Consume(1)).reset_us, 60 * MINUTE);
    }

    #[test]
    fn a_penalized_bucket_ranks_last_for_eviction() {
        let p = params(Algorithm::SlidingWindow);
        let mut state = None;
        step(&mut state, NOW, &p, Hits::Consume(2));
        step(&mut state, NOW, &p, Hits::Consume(1));
        let later = NOW + 5 * MINUTE;
        let s = standing(state.expect("stored"), later, &p);
        assert!(s.at_limit && s.given_back == 2, "{s:?}");
    }
}
