//! Rate-limit algorithms as pure functions of `(state, now, params, hits)`.
//!
//! This module owns the math and nothing else: no I/O, no clock, no tokio, redis or
//! prometheus. Time is integer microseconds since the Unix epoch, passed in by the caller.
//! The memory store calls these functions directly; the Lua scripts in `src/store/lua/`
//! implement the same math for Redis, and a differential test keeps the two in step.
//!
//! Layout: `gcra.rs` (default), `sliding_window.rs` (two-epoch weighted counter),
//! `fixed_window.rs` (epoch-aligned, as envoyproxy/ratelimit); `joint.rs` decides a group
//! of charges that stand or fall together (several limits of one descriptor, a domain
//! charged all-or-nothing) with those three.

pub mod fixed_window;
pub mod gcra;
pub mod joint;
pub mod sliding_window;

/// Which algorithm a rule uses. A closed set: the YAML `algorithm` field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// Generic cell rate algorithm: smooth, with a configurable burst. The default.
    Gcra,
    /// Two-epoch weighted counter: smooths fixed-window edges without per-request state.
    SlidingWindow,
    /// Epoch-aligned fixed windows, as envoyproxy/ratelimit (denials consume nothing).
    FixedWindow,
}

impl Algorithm {
    /// The name used in YAML, metrics and `/rlconfig`.
    pub fn as_str(self) -> &'static str {
        match self {
            Algorithm::Gcra => "gcra",
            Algorithm::SlidingWindow => "sliding_window",
            Algorithm::FixedWindow => "fixed_window",
        }
    }
}

/// The numbers one limit is enforced with. Built once at config compile time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Params {
    pub algorithm: Algorithm,
    /// Requests admitted per `unit_us`. 0 denies everything (never divided by).
    pub limit: u64,
    /// Length of the unit (second, minute, ... year) in microseconds.
    pub unit_us: u64,
    /// GCRA only: how many requests may arrive at once on a full bucket.
    /// Equal to `limit` unless the rule says otherwise; ignored by the window algorithms.
    pub burst: u64,
}

/// How a descriptor charges its bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hits {
    /// Consume `n` (n >= 1) if all of them fit; a denial consumes nothing.
    Consume(u64),
    /// `hits_addend: 0`: answer whether one hit would pass now and describe the bucket;
    /// consume nothing.
    Peek,
    /// `is_negative_hits`: give `n` back, never past a full bucket; always allowed.
    Refund(u64),
}

/// The answer for one bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    pub allowed: bool,
    /// Requests still admissible after this charge; 0 when denied.
    pub remaining: u64,
    /// Allowed: microseconds until the bucket is fully restored.
    /// Denied: microseconds until this same request would pass.
    pub reset_us: u64,
}

/// State kept per bucket, in memory or (with the same fields) in Redis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// GCRA: the theoretical arrival time, `tat + rem / limit` µs since the epoch
    /// (`rem < limit`): whole µs plus the sub-µs remainder, so that an emission interval
    /// `unit / limit` that is not a whole number of µs is never rounded (see `gcra`).
    Gcra { tat: u64, rem: u64 },
    /// Both window algorithms: the start of the current window and its counters
    /// (`previous` is always 0 for the fixed window).
    Window { start: u64, current: u64, previous: u64 },
}

/// What the store must do with the bucket after a decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Write {
    /// Nothing changed (denials, peeks).
    Keep,
    /// Store the new state; it carries no information after `expires_at` (µs since epoch).
    Put { state: State, expires_at: u64 },
    /// The bucket is back to full: the state can be dropped.
    Delete,
}

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

/// One application of an algorithm: the answer and the state change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    pub decision: Decision,
    pub write: Write,
}

/// Applies `params.algorithm` to the stored `state` (None = never seen or expired).
///
/// A state of the wrong shape for the algorithm (after a config change) is treated as
/// absent. `now` is µs since the epoch; callers must not let it step backwards within a
/// bucket, but the functions tolerate it.
pub fn apply(state: Option<State>, now: u64, params: &Params, hits: Hits) -> Outcome {
    match params.algorithm {
        Algorithm::Gcra => {
            let tat = match state {
                Some(State::Gcra { tat, rem }) => Some((tat, rem)),
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
    let (full, left) = match (params.algorithm, state) {
        (Algorithm::Gcra, State::Gcra { tat, rem }) => gcra::admissible((tat, rem), now, params),
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
        Some(State::Window { start, current, previous }) => Some((start, current, previous)),
        _ => None,
    }
}

/// The largest value the algorithms take in, store, compute with or return: 2^53 − 1.
///
/// Every input (limit, unit, burst, hits, `now`, stored state) is clamped to it and every
/// sum or product saturates at it. It is the largest integer a Lua number (a double) holds
/// exactly, so the Redis scripts, which clamp and saturate the same way, give bit-for-bit
/// the same answers on every input. As µs since the epoch it is the year 2255; as a count,
/// 9·10^15 — no real limit comes near it.
pub const MAX_VALUE: u64 = (1 << 53) - 1;

/// `x` clamped to [`MAX_VALUE`].
pub(crate) fn clamp(x: u64) -> u64 {
    x.min(MAX_VALUE)
}

/// `a + b`, saturating at [`MAX_VALUE`].
pub(crate) fn add(a: u64, b: u64) -> u64 {
    a.saturating_add(b).min(MAX_VALUE)
}

/// `floor(a * b / c)` computed exactly (no intermediate overflow), saturating at
/// [`MAX_VALUE`]; `c == 0` saturates.
pub(crate) fn mul_div(a: u64, b: u64, c: u64) -> u64 {
    match u128::from(a).saturating_mul(u128::from(b)).checked_div(u128::from(c)) {
        Some(q) => u64::try_from(q).map_or(MAX_VALUE, clamp),
        None => MAX_VALUE,
    }
}

/// `(floor(a * b / c), (a * b) % c)` computed exactly, the quotient saturating at
/// [`MAX_VALUE`] (the remainder is exact even then); `c == 0` gives `(MAX_VALUE, 0)`.
/// The Lua scripts' `muldiv` gives the same pair for `a, b, c <= MAX_VALUE`.
pub(crate) fn mul_div_rem(a: u64, b: u64, c: u64) -> (u64, u64) {
    let product = u128::from(a) * u128::from(b);
    match (product.checked_div(u128::from(c)), product.checked_rem(u128::from(c))) {
        (Some(q), Some(r)) => (u64::try_from(q).map_or(MAX_VALUE, clamp), u64::try_from(r).unwrap_or(0)),
        _ => (MAX_VALUE, 0),
    }
}

/// `ceil(a * b / c)`, exactly, saturating at [`MAX_VALUE`]; `c == 0` saturates.
pub(crate) fn mul_div_ceil(a: u64, b: u64, c: u64) -> u64 {
    let product = u128::from(a).saturating_mul(u128::from(b));
    match product.checked_div(u128::from(c)) {
        Some(q) => {
            let q = q + u128::from(product % u128::from(c) != 0);
            u64::try_from(q).map_or(MAX_VALUE, clamp)
        }
        None => MAX_VALUE,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const NOW: u64 = 1_700_000_000_000_000;
    const HOUR: u64 = 3_600_000_000;

    fn params(algorithm: Algorithm, limit: u64, unit_us: u64, burst: u64) -> Params {
        Params { algorithm, limit, unit_us, burst }
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
            .prop_map(|(algorithm, limit, unit_us, burst)| Params { algorithm, limit, unit_us, burst })
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
