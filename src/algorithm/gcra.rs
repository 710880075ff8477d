//! GCRA (generic cell rate algorithm), the default: one integer of state, the theoretical
//! arrival time (TAT), smooth admission at `limit / unit` with `burst` requests of slack.
//!
//! Owns the math only: no I/O, no clock (`now` is passed in, µs since the epoch).
//! `src/store/lua/gcra.lua` is the same function for Redis; `tests/differential.rs` keeps
//! the two equal. All values are clamped to, and saturate at,
//! [`MAX_VALUE`](super::MAX_VALUE) (2^53 − 1), exactly as the script does.
//!
//! `emission = max(unit / limit, 1)`, `tolerance = emission * burst`. A request of `n`
//! hits moves the TAT to `max(tat, now) + emission * n` and is admitted iff that is at most
//! `now + tolerance`. Hence at most `burst + floor(t / emission)` hits are admitted in any
//! interval of length `t`: `burst` at once on a full bucket, then one per emission interval.
//! `burst == 0` admits nothing; a request with `n > burst` never passes.

use super::{add, clamp, mul, Decision, Hits, Outcome, Params, State, Write};

/// Applies GCRA to the stored TAT (`None` = never seen or expired).
///
/// Consume: allowed → `Put` the new TAT, expiring at the TAT itself (`Delete` if it is
/// not after `now`, which only a zero-hit consume can do), `remaining` = hits still
/// admissible now, `reset_us = new_tat - now` (time until the bucket is full again);
/// denied → `Keep`, `reset_us = new_tat - tolerance - now` (time until the same request
/// passes).
/// Peek: allowed iff one hit would pass; `remaining` and `reset_us = tat - now` describe
/// the bucket; a denied peek's reset is at least the time until one hit passes (only
/// `burst == 0` makes that longer than `tat - now`).
/// Refund: moves the TAT back by `emission * n`, never before `now`; always allowed;
/// `Delete` once the bucket is full.
/// `limit == 0`: consumes and peeks are denied with `reset_us = unit_us`; a refund is
/// allowed with nothing to give back (`remaining` and `reset_us` 0, `Keep`).
pub fn apply(tat: Option<u64>, now: u64, p: &Params, hits: Hits) -> Outcome {
    let now = clamp(now);
    let unit = clamp(p.unit_us).max(1);
    let limit = clamp(p.limit);
    if limit == 0 {
        return blocked(unit, hits);
    }
    let emission = (unit / limit).max(1);
    let bucket = Bucket {
        now,
        emission,
        tolerance: mul(emission, clamp(p.burst)),
        tat: tat.map_or(now, clamp).max(now),
    };
    match hits {
        Hits::Consume(n) => bucket.consume(clamp(n)),
        Hits::Peek => bucket.peek(),
        Hits::Refund(n) => bucket.refund(clamp(n)),
    }
}

/// `(fresh, now)`: hits a fresh bucket would admit at `now`, and hits this TAT admits.
/// For [`standing`](super::standing); `limit == 0` admits nothing either way.
pub(super) fn admissible(tat: u64, now: u64, p: &Params) -> (u64, u64) {
    let now = clamp(now);
    let limit = clamp(p.limit);
    if limit == 0 {
        return (0, 0);
    }
    let emission = (clamp(p.unit_us).max(1) / limit).max(1);
    let bucket = Bucket { now, emission, tolerance: mul(emission, clamp(p.burst)), tat: clamp(tat).max(now) };
    (bucket.remaining_at(now), bucket.remaining_at(bucket.tat))
}

/// `limit == 0`: nothing is ever admitted, and nothing is stored that could be refunded.
fn blocked(unit: u64, hits: Hits) -> Outcome {
    let decision = match hits {
        Hits::Refund(_) => Decision { allowed: true, remaining: 0, reset_us: 0 },
        Hits::Consume(_) | Hits::Peek => denied(unit).decision,
    };
    Outcome { decision, write: Write::Keep }
}

fn denied(reset_us: u64) -> Outcome {
    Outcome { decision: Decision { allowed: false, remaining: 0, reset_us }, write: Write::Keep }
}

/// One bucket at one instant; `tat >= now`, every field <= MAX_VALUE.
struct Bucket {
    now: u64,
    emission: u64,
    tolerance: u64,
    tat: u64,
}

impl Bucket {
    /// Hits admissible at `now` if the TAT were `tat` (>= now).
    fn remaining_at(&self, tat: u64) -> u64 {
        self.tolerance.saturating_sub(tat - self.now) / self.emission
    }

    /// An allowed answer for a bucket whose TAT is `tat` (>= now).
    fn allowed_at(&self, tat: u64) -> Decision {
        Decision { allowed: true, remaining: self.remaining_at(tat), reset_us: tat - self.now }
    }

    /// Stores `tat`, or drops the state when it carries no information (`tat <= now`).
    fn store(&self, tat: u64) -> Outcome {
        let write = if tat <= self.now {
            Write::Delete
        } else {
            Write::Put { state: State::Gcra { tat }, expires_at: tat }
        };
        Outcome { decision: self.allowed_at(tat), write }
    }

    fn consume(&self, n: u64) -> Outcome {
        let new = add(self.tat, mul(self.emission, n));
        let ahead = new - self.now;
        if ahead <= self.tolerance {
            self.store(new)
        } else {
            denied(ahead - self.tolerance)
        }
    }

    fn peek(&self) -> Outcome {
        let ahead = self.tat - self.now;
        if ahead + self.emission <= self.tolerance {
            Outcome { decision: self.allowed_at(self.tat), write: Write::Keep }
        } else if self.emission <= self.tolerance {
            // One hit passes in `ahead + emission - tolerance` <= `ahead`: report time to full.
            denied(ahead)
        } else {
            // burst == 0 admits nothing (not even on an empty bucket): report `ahead + emission`.
            denied(add(ahead, self.emission - self.tolerance))
        }
    }

    fn refund(&self, n: u64) -> Outcome {
        let back = self.tat.saturating_sub(mul(self.emission, n)).max(self.now);
        self.store(back)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::{Algorithm, MAX_VALUE};
    use proptest::prelude::*;

    const NOW: u64 = 1_700_000_000_000_000;

    fn params(limit: u64, unit_us: u64, burst: u64) -> Params {
        Params { algorithm: Algorithm::Gcra, limit, unit_us, burst }
    }

    /// Runs `hits` at `now` on `tat`, applying the write like a store would.
    fn step(tat: &mut Option<u64>, now: u64, p: &Params, hits: Hits) -> Decision {
        let out = apply(*tat, now, p, hits);
        match out.write {
            Write::Keep => {}
            Write::Delete => *tat = None,
            Write::Put { state, expires_at } => {
                assert_eq!(state, State::Gcra { tat: expires_at });
                *tat = Some(expires_at);
            }
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
        assert_eq!(tat, Some(NOW + 1_000_000), "a denial consumes nothing");
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
        assert_eq!(apply(Some(NOW + 9), NOW, &p, Hits::Peek).decision, dec(false, 0, 60_000_000));
        let refund = apply(None, NOW, &p, Hits::Refund(3));
        assert_eq!(refund.decision, dec(true, 0, 0));
        assert_eq!(refund.write, Write::Keep);
    }

    #[test]
    fn peek_describes_without_consuming() {
        let p = params(10, 1_000_000, 4);
        let fresh = apply(None, NOW, &p, Hits::Peek);
        assert_eq!(fresh, Outcome { decision: dec(true, 4, 0), write: Write::Keep });
        let half = apply(Some(NOW + 200_000), NOW, &p, Hits::Peek);
        assert_eq!(half.decision, dec(true, 2, 200_000));
        let full = apply(Some(NOW + 400_000), NOW, &p, Hits::Peek);
        assert_eq!(full, Outcome { decision: dec(false, 0, 400_000), write: Write::Keep });
    }

    #[test]
    fn refund_never_past_full() {
        let p = params(10, 1_000_000, 10);
        let part = apply(Some(NOW + 500_000), NOW, &p, Hits::Refund(2));
        assert_eq!(part.decision, dec(true, 7, 300_000));
        let tat = NOW + 300_000;
        assert_eq!(part.write, Write::Put { state: State::Gcra { tat }, expires_at: tat });
        let all = apply(Some(NOW + 500_000), NOW, &p, Hits::Refund(99));
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
        let back = apply(Some(NOW + 10), NOW - 5, &p, Hits::Peek).decision;
        assert_eq!(back.reset_us, 15, "a clock stepping back is tolerated");
        for &x in &[0, 1, MAX_VALUE, u64::MAX] {
            let p = params(x, x, x);
            for hits in [Hits::Consume(x), Hits::Peek, Hits::Refund(x), Hits::Consume(0)] {
                let d = apply(Some(x), x, &p, hits).decision;
                assert!(d.remaining <= MAX_VALUE && d.reset_us <= MAX_VALUE);
            }
        }
    }

    fn arb_params() -> impl Strategy<Value = Params> {
        (1u64..50, prop::sample::select(vec![1_000u64, 1_000_000, 60_000_000]), 0u64..60)
            .prop_map(|(limit, unit, burst)| params(limit, unit, burst))
    }

    fn arb_steps() -> impl Strategy<Value = Vec<(u64, Hits)>> {
        let hits = prop_oneof![
            6 => (1u64..6).prop_map(Hits::Consume),
            1 => Just(Hits::Peek),
            1 => (1u64..6).prop_map(Hits::Refund),
        ];
        prop::collection::vec((prop_oneof![Just(0u64), 0u64..200_000], hits), 1..80)
    }

    proptest! {
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
            let emission = (p.unit_us / p.limit).max(1);
            for i in 0..admitted.len() {
                let mut sum = 0;
                for &(t, n) in &admitted[i..] {
                    sum += n;
                    prop_assert!(sum <= p.burst + (t - admitted[i].0) / emission);
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
}
