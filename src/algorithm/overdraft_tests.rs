//! An overdraft's debt is capped at one unit of the limit (`Hits::Overdraw`, issue 37 hole
//! 4): however large a reported usage, a GCRA bucket's TAT never passes
//! `now + tolerance + unit`, and a window's debt ends with its window (an overdrawn window
//! stores its limit: spent to its end, and the sliding window's next one weighs it as a
//! window that admitted exactly its limit, never as the report). Across the three
//! algorithms, through the dispatch (`algorithm::apply`) the stores call.

use super::*;
use proptest::prelude::*;

const NOW: u64 = 1_700_000_000_000_000;
const HOUR: u64 = 3_600_000_000;
const TRILLION: u64 = 1_000_000_000_000;

fn params(algorithm: Algorithm, limit: u64, unit_us: u64, burst: u64) -> Params {
    Params { algorithm, limit, unit_us, burst, penalty_us: 0, period: None }
}

/// A bucket as a store keeps it: the state and when it expires.
type Kept = Option<(State, u64)>;

/// What a store reads at `now`: the state unless it has expired.
fn read(kept: Kept, now: u64) -> Option<State> {
    kept.filter(|&(_, expires_at)| now < expires_at).map(|(s, _)| s)
}

/// Applies `hits` at `now` and keeps the write, as the memory store does.
fn step(kept: &mut Kept, now: u64, p: &Params, hits: Hits) -> Decision {
    let out = apply(read(*kept, now), now, p, hits);
    match out.write {
        Write::Keep => {}
        Write::Delete => *kept = None,
        Write::Put { state, expires_at } => *kept = Some((state, expires_at)),
    }
    out.decision
}

fn peek(kept: Kept, now: u64, p: &Params) -> Decision {
    apply(read(kept, now), now, p, Hits::Peek).decision
}

#[test]
fn a_gcra_debt_is_one_unit_past_the_tolerance() {
    // 1,000 an hour, the default burst (the limit): emission 3.6 s, tolerance 1 h.
    let p = params(Algorithm::Gcra, 1_000, HOUR, 1_000);
    let mut kept = None;
    let d = step(&mut kept, NOW, &p, Hits::Overdraw(TRILLION));
    // One hit fits again once the unit of debt and one emission have gone by.
    assert_eq!(d, Decision { allowed: false, remaining: 0, reset_us: HOUR + 3_600_000 });
    let tat = State::Gcra { tat: NOW + 2 * HOUR, rem: 0, until: 0 };
    assert_eq!(kept, Some((tat, NOW + 2 * HOUR)), "the TAT stops at now + tolerance + unit");
    assert_eq!(peek(kept, NOW, &p), Decision { allowed: false, remaining: 0, reset_us: 2 * HOUR });
    // Another one an hour later moves the cap with the clock, never past it.
    step(&mut kept, NOW + HOUR, &p, Hits::Overdraw(TRILLION));
    assert_eq!(kept.map(|(_, expires_at)| expires_at), Some(NOW + 3 * HOUR));
    let at = NOW + 2 * HOUR + 3_600_000;
    assert!(apply(read(kept, at), at, &p, Hits::Consume(1)).decision.allowed);
    assert!(!apply(read(kept, at - 1), at - 1, &p, Hits::Consume(1)).decision.allowed);
    assert_eq!(peek(kept, NOW + 3 * HOUR, &p), Decision { allowed: true, remaining: 1_000, reset_us: 0 });
}

#[test]
fn a_fixed_window_debt_ends_with_its_window() {
    let p = params(Algorithm::FixedWindow, 1_000, HOUR, 0);
    let start = NOW - NOW % HOUR;
    let mut kept = None;
    let d = step(&mut kept, start + 10, &p, Hits::Overdraw(TRILLION));
    assert_eq!(d, Decision { allowed: false, remaining: 0, reset_us: HOUR - 10 });
    let window = State::Window { start, current: 1_000, previous: 0, until: 0 };
    assert_eq!(kept, Some((window, start + HOUR)), "the window is spent, the count the limit");
    assert!(!peek(kept, start + HOUR - 1, &p).allowed);
    assert_eq!(peek(kept, start + HOUR, &p), Decision { allowed: true, remaining: 1_000, reset_us: 0 });
}

#[test]
fn a_sliding_window_debt_ends_with_its_window() {
    let p = params(Algorithm::SlidingWindow, 1_000, HOUR, 0);
    let start = NOW - NOW % HOUR;
    let mut kept = None;
    step(&mut kept, start + 5, &p, Hits::Consume(400));
    let d = step(&mut kept, start + 10, &p, Hits::Overdraw(TRILLION));
    // The next window weighs the limit, not 10^12: one hit fits 3.6 s into it.
    assert_eq!(d, Decision { allowed: false, remaining: 0, reset_us: HOUR - 10 + 3_600_000 });
    let window = State::Window { start, current: 1_000, previous: 0, until: 0 };
    assert_eq!(kept, Some((window, start + 2 * HOUR)), "the count stops at the limit");
    // From the next window on, the bucket is the one that admitted exactly its limit: one
    // hit fits once the limit's weight has slid below it (the report weighed ~10^12).
    for t in [0, 1, 3_599_999, 3_600_000, HOUR / 3, HOUR - 1, HOUR, HOUR + 1] {
        let at = start + HOUR + t;
        let one = apply(read(kept, at), at, &p, Hits::Consume(1)).decision;
        assert_eq!(one.allowed, t >= 3_600_000, "{t} µs into the next window: {one:?}");
    }
}

fn arb_params() -> impl Strategy<Value = Params> {
    let algorithm =
        prop_oneof![Just(Algorithm::Gcra), Just(Algorithm::SlidingWindow), Just(Algorithm::FixedWindow)];
    let unit = prop::sample::select(vec![1_000u64, 1_000_000, 60_000_000, HOUR]);
    (algorithm, 1..2_000u64, unit)
        .prop_flat_map(|(algorithm, limit, unit_us)| {
            (Just(algorithm), Just(limit), Just(unit_us), 1..=2 * limit)
        })
        .prop_map(|(algorithm, limit, unit_us, burst)| params(algorithm, limit, unit_us, burst))
}

fn arb_hits() -> impl Strategy<Value = Hits> {
    let huge = prop_oneof![Just(TRILLION), 1u64..(1 << 40), Just(MAX_VALUE), Just(u64::MAX)];
    prop_oneof![
        4 => (1u64..50).prop_map(Hits::Consume),
        1 => Just(Hits::Peek),
        1 => (1u64..5_000).prop_map(Hits::Refund),
        3 => (1u64..5_000).prop_map(Hits::Overdraw),
        3 => huge.prop_map(Hits::Overdraw),
    ]
}

/// How long a bucket may take to be full again: GCRA `tolerance + unit` (rounded up to the
/// µs), a fixed window its end, a sliding window the end of the next one.
fn full_within(p: &Params) -> u64 {
    let unit = p.unit_us;
    match p.algorithm {
        Algorithm::Gcra => {
            (u128::from(p.burst) * u128::from(unit)).div_ceil(u128::from(p.limit)) as u64 + unit
        }
        Algorithm::SlidingWindow => 2 * unit,
        Algorithm::FixedWindow => unit,
    }
}

proptest! {
    /// After any overdraw, however large: the bucket is full again within the bound, a
    /// peek's reset says when (exactly), and a denied overdraw's reset is when one hit fits
    /// again — at most a unit and one emission away.
    #[test]
    fn an_overdraft_recovers_within_one_unit(
        p in arb_params(),
        steps in prop::collection::vec((0u64..HOUR / 2, arb_hits()), 1..30),
    ) {
        let (mut kept, mut now) = (None, NOW);
        let fresh = apply(None, now, &p, Hits::Peek).decision.remaining;
        for (dt, hits) in steps {
            now += dt;
            let before = kept;
            let d = step(&mut kept, now, &p, hits);
            let full = peek(kept, now, &p);
            prop_assert!(full.reset_us <= full_within(&p), "{:?} {:?}: {:?}", p, hits, full);
            let at = now + full.reset_us;
            prop_assert_eq!(peek(kept, at, &p).remaining, fresh, "{:?} full at {}", p, full.reset_us);
            let Hits::Overdraw(_) = hits else { continue };
            if d.allowed {
                continue;
            }
            let emission = p.unit_us.div_ceil(p.limit);
            prop_assert!(d.reset_us <= p.unit_us + emission, "{:?} after {:?}: {:?}", p, before, d);
            let at = now + d.reset_us;
            prop_assert!(apply(read(kept, at), at, &p, Hits::Consume(1)).decision.allowed);
            prop_assert!(!apply(read(kept, at - 1), at - 1, &p, Hits::Consume(1)).decision.allowed);
        }
    }
}
