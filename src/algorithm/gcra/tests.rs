//! GCRA unit and property tests: exact counts at sub-µs emission intervals, and the
//! invariants (never more than `burst + floor(t * limit / unit)`, retry at reset passes,
//! resets monotone).

use super::*;
use crate::algorithm::Algorithm;
use proptest::prelude::*;

const NOW: u64 = 1_700_000_000_000_000;

fn params(limit: u64, unit_us: u64, burst: u64) -> Params {
    Params { algorithm: Algorithm::Gcra, limit, unit_us, burst, penalty_us: 0, period: None }
}

/// Runs `hits` at `now` on `tat`, applying the write like a store would.
fn step(tat: &mut Option<(u64, u64)>, now: u64, p: &Params, hits: Hits) -> Decision {
    let out = apply(*tat, now, p, hits);
    match out.write {
        Write::Keep => {}
        Write::Delete => *tat = None,
        Write::Put { state: State::Gcra { tat: us, rem, .. }, expires_at } => {
            assert!(rem < p.limit, "the remainder stays below the limit");
            assert_eq!(expires_at, us + u64::from(rem > 0), "expires at the TAT rounded up");
            *tat = Some((us, rem));
        }
        Write::Put { .. } => panic!("wrong state shape"),
    }
    out.decision
}

fn dec(allowed: bool, remaining: u64, reset_us: u64) -> Decision {
    Decision { allowed, remaining, reset_us }
}

#[test]
fn burst_then_one_per_emission() {
    let p = params(10, 1_000_000, 10); // emission 100 ms
    let mut tat = None;
    assert_eq!(step(&mut tat, NOW, &p, Hits::Consume(1)), dec(true, 9, 100_000));
    for i in 2..=10 {
        let d = step(&mut tat, NOW, &p, Hits::Consume(1));
        assert_eq!(d, dec(true, 10 - i, 100_000 * i));
    }
    assert_eq!(step(&mut tat, NOW, &p, Hits::Consume(1)), dec(false, 0, 100_000));
    assert_eq!(tat, Some((NOW + 1_000_000, 0)), "a denial consumes nothing");
    assert!(!step(&mut tat, NOW + 99_999, &p, Hits::Consume(1)).allowed);
    let d = step(&mut tat, NOW + 100_000, &p, Hits::Consume(1));
    assert_eq!(d, dec(true, 0, 1_000_000));
    assert!(!step(&mut tat, NOW + 100_000, &p, Hits::Consume(1)).allowed);
}

#[test]
fn burst_smaller_than_limit() {
    let p = params(60, 60_000_000, 3); // emission 1 s, burst 3
    let mut tat = None;
    let allowed = (0..4).filter(|_| step(&mut tat, NOW, &p, Hits::Consume(1)).allowed).count();
    assert_eq!(allowed, 3);
    assert_eq!(step(&mut tat, NOW, &p, Hits::Consume(2)), dec(false, 0, 2_000_000));
}

#[test]
fn limit_zero_blocks_without_dividing() {
    let p = params(0, 60_000_000, 5);
    assert_eq!(apply(None, NOW, &p, Hits::Consume(1)).decision, dec(false, 0, 60_000_000));
    assert_eq!(apply(Some((NOW + 9, 0)), NOW, &p, Hits::Peek).decision, dec(false, 0, 60_000_000));
    let refund = apply(None, NOW, &p, Hits::Refund(3));
    assert_eq!(refund.decision, dec(true, 0, 0));
    assert_eq!(refund.write, Write::Keep);
}

#[test]
fn peek_describes_without_consuming() {
    let p = params(10, 1_000_000, 4);
    let fresh = apply(None, NOW, &p, Hits::Peek);
    assert_eq!(fresh, Outcome { decision: dec(true, 4, 0), write: Write::Keep });
    let half = apply(Some((NOW + 200_000, 0)), NOW, &p, Hits::Peek);
    assert_eq!(half.decision, dec(true, 2, 200_000));
    let full = apply(Some((NOW + 400_000, 0)), NOW, &p, Hits::Peek);
    assert_eq!(full, Outcome { decision: dec(false, 0, 400_000), write: Write::Keep });
}

#[test]
fn refund_never_past_full() {
    let p = params(10, 1_000_000, 10);
    let part = apply(Some((NOW + 500_000, 0)), NOW, &p, Hits::Refund(2));
    assert_eq!(part.decision, dec(true, 7, 300_000));
    let tat = NOW + 300_000;
    assert_eq!(part.write, Write::Put { state: State::Gcra { tat, rem: 0, until: 0 }, expires_at: tat });
    let all = apply(Some((NOW + 500_000, 0)), NOW, &p, Hits::Refund(99));
    assert_eq!(all, Outcome { decision: dec(true, 10, 0), write: Write::Delete });
    assert_eq!(apply(None, NOW, &p, Hits::Refund(1)).write, Write::Delete);
}

#[test]
fn edge_cases_do_not_panic() {
    let p = params(1_000_000_000, 1, 0); // emission clamps to 1, burst 0 admits nothing
    assert_eq!(apply(None, NOW, &p, Hits::Consume(1)).decision, dec(false, 0, 1));
    assert_eq!(apply(None, NOW, &p, Hits::Peek).decision, dec(false, 0, 1));
    let p = params(1, 60_000_000, 5);
    let d = apply(None, NOW, &p, Hits::Consume(6)).decision;
    assert_eq!(d, dec(false, 0, 60_000_000), "n > burst never passes");
    let back = apply(Some((NOW + 10, 0)), NOW - 5, &p, Hits::Peek).decision;
    assert_eq!(back.reset_us, 15, "a clock stepping back is tolerated");
    for &x in &[0, 1, MAX_VALUE, u64::MAX] {
        let p = params(x, x, x);
        for hits in [Hits::Consume(x), Hits::Peek, Hits::Refund(x), Hits::Consume(0)] {
            let d = apply(Some((x, x)), x, &p, hits).decision;
            assert!(d.remaining <= MAX_VALUE && d.reset_us <= MAX_VALUE);
        }
    }
}

/// Low rates (emission a whole number of µs or close to it) and high ones, up to
/// 10,000,000/s, whose emission interval is a fraction of a µs.
fn arb_params() -> impl Strategy<Value = Params> {
    let units = prop::sample::select(vec![1_000u64, 1_000_000, 60_000_000]);
    prop_oneof![
        (1u64..50, units, 0u64..60).prop_map(|(limit, unit, burst)| params(limit, unit, burst)),
        (100_000u64..=10_000_000, 0u64..200).prop_map(|(limit, burst)| params(limit, 1_000_000, burst)),
    ]
}

fn arb_steps() -> impl Strategy<Value = Vec<(u64, Hits)>> {
    let hits = prop_oneof![
        6 => (1u64..6).prop_map(Hits::Consume),
        1 => (1u64..100).prop_map(Hits::Consume),
        1 => Just(Hits::Peek),
        1 => (1u64..6).prop_map(Hits::Refund),
    ];
    let dt = prop_oneof![Just(0u64), 0u64..20, 0u64..200_000];
    prop::collection::vec((dt, hits), 1..120)
}

#[test]
fn sub_microsecond_emission_keeps_the_remainder() {
    let p = params(3, 10, 3); // emission 10/3 µs
    let mut tat = None;
    assert_eq!(step(&mut tat, NOW, &p, Hits::Consume(1)), dec(true, 2, 4));
    assert_eq!(tat, Some((NOW + 3, 1)), "3 + 1/3 µs ahead");
    assert_eq!(step(&mut tat, NOW, &p, Hits::Consume(2)), dec(true, 0, 10));
    assert_eq!(tat, Some((NOW + 10, 0)), "three emissions are exactly 10 µs");
    assert_eq!(step(&mut tat, NOW + 3, &p, Hits::Consume(1)), dec(false, 0, 1));
    assert_eq!(step(&mut tat, NOW + 4, &p, Hits::Consume(1)), dec(true, 0, 10));
    assert_eq!(tat, Some((NOW + 13, 1)));
    let back = apply(tat, NOW + 4, &p, Hits::Refund(1));
    assert_eq!(
        back.write,
        Write::Put { state: State::Gcra { tat: NOW + 10, rem: 0, until: 0 }, expires_at: NOW + 10 }
    );
    // A remainder stored under a higher limit (before a reload) is clamped: < 1 µs.
    assert_eq!(apply(Some((NOW + 3, 999)), NOW, &p, Hits::Peek).decision, dec(true, 1, 4));
}

/// A greedy client takes every hit the bucket gives, µs after µs: over `t` µs from a full
/// bucket exactly `burst + floor(t * limit / unit)` pass. A rounded emission got these
/// wrong (300,000/s admitted 333,333/s; 400,000/s 500,000/s; 2,000,000/s 1,000,000/s).
/// Equality needs `(burst - 1) * emission >= 1 µs`, so that the TAT is still ahead at the
/// next µs; with less, a full bucket drops the credit that arrives between two polls
/// (it cannot hold it), and fewer pass — never more.
#[test]
fn exact_at_high_rates() {
    let t = 100_000;
    let cases = [(300_000, 2), (400_000, 7), (2_000_000, 3), (3_000_000, 4), (10_000_000, 11)];
    for (limit, burst) in cases {
        let p = params(limit, 1_000_000, burst);
        let (mut tat, mut admitted) = (None, 0);
        for now in NOW..=NOW + t {
            while step(&mut tat, now, &p, Hits::Consume(1)).allowed {
                admitted += 1;
            }
        }
        assert_eq!(admitted, burst + t * limit / 1_000_000, "limit {limit}/s, burst {burst}");
    }
}

#[test]
fn tolerance_bound() {
    let year = 365 * 86_400 * 1_000_000;
    assert!(tolerance_fits(&params(1, year, 71)));
    assert!(!tolerance_fits(&params(1, year, 72)), "72 years of burst");
    assert!(tolerance_fits(&params(0, year, u64::MAX)), "limit 0 never computes one");
    assert!(tolerance_fits(&params(1, MAX_TOLERANCE_US, 1)));
    assert!(!tolerance_fits(&params(2, MAX_TOLERANCE_US + 1, 2)));
    assert!(tolerance_fits(&params(u64::from(u32::MAX), year, u64::from(u32::MAX))));
}

proptest! {
    /// The bound is computed from the rate itself, not from any emission interval, and
    /// needs no slack: admission compares exact rationals (see the module docs), and
    /// times are whole µs, so `k` hits admitted in `[t0, t0 + t]` satisfy
    /// `k * unit / limit <= t + burst * unit / limit`.
    #[test]
    fn never_admits_more_than_burst_plus_rate(p in arb_params(), steps in arb_steps()) {
        let steps: Vec<_> = steps.into_iter()
            .map(|(dt, h)| (dt, if let Hits::Refund(n) = h { Hits::Consume(n) } else { h }))
            .collect();
        let (mut tat, mut now, mut admitted) = (None, NOW, Vec::new());
        for (dt, hits) in steps {
            now += dt;
            let d = step(&mut tat, now, &p, hits);
            prop_assert!(d.remaining <= p.burst);
            if let (true, Hits::Consume(n)) = (d.allowed, hits) {
                admitted.push((now, n));
            }
        }
        for i in 0..admitted.len() {
            let mut sum = 0;
            for &(t, n) in &admitted[i..] {
                sum += n;
                let rate = u128::from(t - admitted[i].0) * u128::from(p.limit) / u128::from(p.unit_us);
                prop_assert!(u128::from(sum) <= u128::from(p.burst) + rate);
            }
        }
    }

    #[test]
    fn denial_keeps_state_and_retry_at_reset_passes(p in arb_params(), steps in arb_steps()) {
        let (mut tat, mut now) = (None, NOW);
        for (dt, hits) in steps {
            now += dt;
            let out = apply(tat, now, &p, hits);
            if !out.decision.allowed {
                prop_assert_eq!(out.write, Write::Keep);
                prop_assert!(out.decision.reset_us > 0);
                if let Hits::Consume(n) = hits {
                    if n <= p.burst {
                        let at = now + out.decision.reset_us;
                        prop_assert!(apply(tat, at, &p, hits).decision.allowed);
                        prop_assert!(!apply(tat, at - 1, &p, hits).decision.allowed);
                    }
                }
            }
            step(&mut tat, now, &p, hits);
        }
    }

    #[test]
    fn reset_is_monotone_without_charges(
        p in arb_params(), steps in arb_steps(), n in 1u64..6,
        dts in prop::collection::vec(0u64..300_000, 1..30),
    ) {
        let (mut tat, mut now) = (None, NOW);
        for (dt, hits) in steps {
            now += dt;
            step(&mut tat, now, &p, hits);
        }
        let (mut last_peek, mut last_denied) = (u64::MAX, u64::MAX);
        for dt in dts {
            now += dt;
            let peek = apply(tat, now, &p, Hits::Peek).decision;
            prop_assert!(peek.reset_us <= last_peek);
            last_peek = peek.reset_us;
            let d = apply(tat, now, &p, Hits::Consume(n)).decision;
            if !d.allowed {
                prop_assert!(d.reset_us <= last_denied);
                last_denied = d.reset_us;
            }
        }
    }
}
