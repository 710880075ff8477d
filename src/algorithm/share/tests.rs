use proptest::prelude::*;

use super::*;

const SECOND: u64 = 1_000_000;
const MINUTE: u64 = 60 * SECOND;

fn gcra(limit: u64, unit_us: u64, burst: u64) -> Params {
    Params { algorithm: Algorithm::Gcra, limit, unit_us, burst, penalty_us: 0, period: None }
}

fn window(algorithm: Algorithm, limit: u64, unit_us: u64) -> Params {
    Params { algorithm, limit, unit_us, burst: limit, penalty_us: 0, period: None }
}

fn busy(demand: u64) -> Holder {
    Holder { demand, newcomer: false, claim: 0 }
}

fn newcomer() -> Holder {
    Holder { demand: 1, newcomer: true, claim: 0 }
}

fn bucket(grant: Grant) -> TokenBucket {
    match grant {
        Grant::TokenBucket(b) => b,
        Grant::DenyAll => panic!("expected a token bucket, got DENY_ALL"),
    }
}

fn total_tokens(grants: &[Grant]) -> u64 {
    grants.iter().map(|g| g.max_tokens()).sum()
}

/// Σ F/T ≤ limit / unit (tokens per second), in f64 with a relative margin far below
/// what any rounding up in `shares` would add (at least one token per interval).
fn rate_within(grants: &[Grant], params: &Params) -> bool {
    let sum: f64 = grants
        .iter()
        .map(|g| match g {
            Grant::TokenBucket(b) => f64::from(b.tokens_per_fill) / f64::from(b.fill_interval_s),
            Grant::DenyAll => 0.0,
        })
        .sum();
    let rate = params.limit as f64 * 1e6 / params.unit_us as f64;
    sum <= rate * (1.0 + 1e-12)
}

#[test]
fn one_holder_gets_the_whole_headroom_and_rate() {
    let params = gcra(120, MINUTE, 120);
    let grants = shares(&params, Headroom::Gcra { tokens: 120 }, &[busy(50)]);
    assert_eq!(bucket(grants[0]), TokenBucket { max_tokens: 120, tokens_per_fill: 120, fill_interval_s: 60 });
}

#[test]
fn gcra_headroom_is_capped_by_the_burst() {
    let params = gcra(100, SECOND, 10);
    let grants = shares(&params, Headroom::Gcra { tokens: 500 }, &[busy(1)]);
    assert_eq!(bucket(grants[0]).max_tokens, 10);
}

#[test]
fn demand_weights_capacity_and_rate() {
    let params = gcra(120, MINUTE, 120);
    let grants = shares(&params, Headroom::Gcra { tokens: 120 }, &[busy(300), busy(100)]);
    assert_eq!(bucket(grants[0]), TokenBucket { max_tokens: 90, tokens_per_fill: 90, fill_interval_s: 60 });
    assert_eq!(bucket(grants[1]), TokenBucket { max_tokens: 30, tokens_per_fill: 30, fill_interval_s: 60 });
}

#[test]
fn a_rate_share_under_one_token_per_second_is_one_token_per_whole_seconds() {
    // 1 per second shared by 3 equal holders: 1/3 token/s each → 1 per 3 s, never 0.33 s.
    let params = gcra(1, SECOND, 3);
    let grants = shares(&params, Headroom::Gcra { tokens: 3 }, &[busy(5), busy(5), busy(5)]);
    for g in &grants {
        let b = bucket(*g);
        assert_eq!((b.tokens_per_fill, b.fill_interval_s), (1, 3));
    }
    assert!(rate_within(&grants, &params));
    // 2 per second, 3 holders: ⌈3/2⌉ = 2 s each, 1.5 ≤ 2.
    let params = gcra(2, SECOND, 3);
    let grants = shares(&params, Headroom::Gcra { tokens: 3 }, &[busy(5), busy(5), busy(5)]);
    assert_eq!(bucket(grants[0]).fill_interval_s, 2);
    assert!(rate_within(&grants, &params));
}

#[test]
fn windows_fill_one_token_at_the_end_of_the_window() {
    for algorithm in [Algorithm::FixedWindow, Algorithm::SlidingWindow] {
        let params = window(algorithm, 100, MINUTE);
        let headroom = Headroom::Window { remaining: 40, left_us: 12_500_000 };
        let grants = shares(&params, headroom, &[busy(3), busy(1)]);
        assert_eq!(
            bucket(grants[0]),
            TokenBucket { max_tokens: 30, tokens_per_fill: 1, fill_interval_s: 13 }
        );
        assert_eq!(
            bucket(grants[1]),
            TokenBucket { max_tokens: 10, tokens_per_fill: 1, fill_interval_s: 13 }
        );
        // Accrual before the window ends: Σ F·left/T < 1 per holder, so the holders
        // together admit at most the remaining 40 in this window.
        for g in &grants {
            let b = bucket(*g);
            assert!(u64::from(b.tokens_per_fill) * 12_500_000 < u64::from(b.fill_interval_s) * SECOND);
        }
        // The last µs of a window still gets a whole-second interval.
        let grants = shares(&params, Headroom::Window { remaining: 5, left_us: 1 }, &[busy(1)]);
        assert_eq!(bucket(grants[0]).fill_interval_s, 1);
    }
}

#[test]
fn a_newcomer_gets_the_median_of_the_others_at_their_expense() {
    let params = gcra(100, SECOND, 100);
    let before = shares(&params, Headroom::Gcra { tokens: 100 }, &[busy(10), busy(30), busy(60)]);
    assert_eq!(before.iter().map(|g| g.max_tokens()).collect::<Vec<_>>(), [10, 30, 60]);
    let holders = [busy(10), busy(30), busy(60), newcomer()];
    let after = shares(&params, Headroom::Gcra { tokens: 100 }, &holders);
    // Median of 10, 30, 60 is 30: W = 130.
    assert_eq!(after.iter().map(|g| g.max_tokens()).collect::<Vec<_>>(), [7, 23, 46, 23]);
    for (b, a) in before.iter().zip(&after) {
        assert!(a.max_tokens() < b.max_tokens(), "every old holder shrinks at once");
    }
    assert!(total_tokens(&after) <= 100);
    assert!(rate_within(&after, &params));
}

#[test]
fn a_newcomer_alone_gets_everything() {
    let params = gcra(10, SECOND, 10);
    let grants = shares(&params, Headroom::Gcra { tokens: 10 }, &[newcomer()]);
    assert_eq!(bucket(grants[0]).max_tokens, 10);
    // Two newcomers and nobody else: weight 1 each.
    let grants = shares(&params, Headroom::Gcra { tokens: 10 }, &[newcomer(), newcomer()]);
    assert_eq!(total_tokens(&grants), 10);
    assert_eq!(grants[0], grants[1]);
}

#[test]
fn an_idle_holder_keeps_a_floor_but_takes_nothing_beyond_its_weight() {
    let params = gcra(1000, SECOND, 1000);
    let grants = shares(&params, Headroom::Gcra { tokens: 1000 }, &[busy(999), busy(0)]);
    assert_eq!(bucket(grants[0]).max_tokens, 999);
    assert_eq!(bucket(grants[1]).max_tokens, 1);
    assert_eq!(bucket(grants[1]).tokens_per_fill, 1);
    // A floor comes only out of the rounding leftover, never out of the busy share.
    let grants = shares(&params, Headroom::Gcra { tokens: 1000 }, &[busy(1_000_000), busy(0)]);
    assert_eq!(bucket(grants[0]).max_tokens, 999);
    assert_eq!(bucket(grants[1]).max_tokens, 1);
    let grants = shares(&params, Headroom::Gcra { tokens: 5 }, &[busy(1_000_000), busy(0)]);
    assert_eq!(grants[0].max_tokens(), 4);
    assert_eq!(grants[1].max_tokens(), 1);
}

#[test]
fn one_hot_and_49_idle() {
    let params = gcra(1000, SECOND, 1000);
    let mut holders = vec![busy(951)];
    holders.extend(std::iter::repeat_n(busy(0), 49));
    let grants = shares(&params, Headroom::Gcra { tokens: 1000 }, &holders);
    // W = 951 + 49 = 1000: the hot one 951, each idle one 1.
    assert_eq!(grants[0].max_tokens(), 951);
    assert!(grants[1..].iter().all(|g| g.max_tokens() == 1));
    assert_eq!(total_tokens(&grants), 1000);
    assert!(rate_within(&grants, &params));
}

#[test]
fn fifty_holders_with_little_headroom_floor_only_while_it_lasts() {
    let params = gcra(10, SECOND, 10);
    let holders: Vec<Holder> = (0..50).map(|i| busy(i + 1)).collect();
    let grants = shares(&params, Headroom::Gcra { tokens: 10 }, &holders);
    assert!(total_tokens(&grants) <= 10);
    let granted = grants.iter().filter(|g| g.max_tokens() > 0).count();
    assert!(granted <= 10, "no more holders with a token than tokens");
    assert!(grants.contains(&Grant::DenyAll));
    // The floors went to the heaviest holders first.
    assert!(grants[49].max_tokens() >= 1);
    assert_eq!(grants[0], Grant::DenyAll);
    assert!(rate_within(&grants, &params));
}

#[test]
fn no_headroom_or_no_limit_denies_everyone() {
    let holders = [busy(5), busy(0), newcomer()];
    let grants = shares(&gcra(100, SECOND, 100), Headroom::Gcra { tokens: 0 }, &holders);
    assert_eq!(grants, vec![Grant::DenyAll; 3]);
    let params = window(Algorithm::FixedWindow, 100, MINUTE);
    let grants = shares(&params, Headroom::Window { remaining: 0, left_us: 5 * SECOND }, &holders);
    assert_eq!(grants, vec![Grant::DenyAll; 3]);
    let grants = shares(&gcra(0, SECOND, 0), Headroom::Gcra { tokens: 10 }, &holders);
    assert_eq!(grants, vec![Grant::DenyAll; 3]);
    assert!(shares(&gcra(10, SECOND, 10), Headroom::Gcra { tokens: 10 }, &[]).is_empty());
}

#[test]
fn a_claim_just_under_the_target_is_kept() {
    let params = gcra(100, SECOND, 100);
    let held = Holder { demand: 1, newcomer: false, claim: 45 };
    let grants = shares(&params, Headroom::Gcra { tokens: 100 }, &[held, busy(1)]);
    assert_eq!(grants[0].max_tokens(), 45, "45 ≥ 7/8 of 50: unchanged");
    assert_eq!(grants[1].max_tokens(), 50);
    // Too far under, or over, the target: the target.
    let held = Holder { demand: 1, newcomer: false, claim: 40 };
    assert_eq!(shares(&params, Headroom::Gcra { tokens: 100 }, &[held, busy(1)])[0].max_tokens(), 50);
    let held = Holder { demand: 1, newcomer: false, claim: 60 };
    assert_eq!(shares(&params, Headroom::Gcra { tokens: 100 }, &[held, busy(1)])[0].max_tokens(), 50);
}

#[test]
fn huge_numbers_saturate_without_panicking() {
    let params = gcra(1 << 53, SECOND, 1 << 53);
    let holders = [busy(u64::MAX), Holder { demand: u64::MAX, newcomer: true, claim: u64::MAX }, busy(0)];
    let grants = shares(&params, Headroom::Gcra { tokens: u64::MAX }, &holders);
    let hot = bucket(grants[0]);
    assert_eq!(hot.max_tokens, u32::MAX, "clamped to u32");
    assert_eq!((hot.tokens_per_fill, hot.fill_interval_s), (u32::MAX, 1));
    // The newcomer takes the lower median of (1, 2^32): 1, so 2^53 / (2^32 + 2) tokens.
    assert_eq!(bucket(grants[1]).max_tokens, 2_097_151);
    assert!(rate_within(&grants, &params));
    // A tiny rate among huge demands: the light holder's share is under one token per
    // 2^32 s, an interval Envoy cannot be sent; shortening it would raise the rate.
    let params = gcra(1, 365 * 24 * 3600 * SECOND, 2);
    let holders = [busy(u64::MAX), busy(0)];
    let grants = shares(&params, Headroom::Gcra { tokens: 2 }, &holders);
    assert_eq!(bucket(grants[0]).max_tokens, 1);
    assert_eq!(grants[1], Grant::DenyAll);
    assert!(rate_within(&grants, &params));
    let params = window(Algorithm::SlidingWindow, u64::MAX, u64::MAX);
    let headroom = Headroom::Window { remaining: u64::MAX, left_us: u64::MAX };
    let holders = [busy(u64::MAX), busy(u64::MAX)];
    // A window ending past u32::MAX s from now cannot be given its one-token interval.
    assert_eq!(shares(&params, headroom, &holders), vec![Grant::DenyAll; 2]);
    let headroom = Headroom::Window { remaining: u64::MAX, left_us: 365 * 24 * 3600 * SECOND };
    let grants = shares(&params, headroom, &holders);
    for g in &grants {
        assert_eq!(
            bucket(*g),
            TokenBucket { max_tokens: u32::MAX, tokens_per_fill: 1, fill_interval_s: 31_536_000 }
        );
    }
    assert_eq!(bound(&params, u64::MAX), MAX_VALUE);
}

#[test]
fn the_bound_is_n_for_gcra_and_2n_for_windows() {
    assert_eq!(bound(&gcra(10, SECOND, 10), 50), 50);
    assert_eq!(bound(&window(Algorithm::FixedWindow, 10, SECOND), 50), 100);
    assert_eq!(bound(&window(Algorithm::SlidingWindow, 10, SECOND), 2), 4);
    assert_eq!(bound(&gcra(10, SECOND, 10), 0), 0);
}

fn algorithm() -> impl Strategy<Value = Algorithm> {
    prop_oneof![Just(Algorithm::Gcra), Just(Algorithm::FixedWindow), Just(Algorithm::SlidingWindow)]
}

fn holder() -> impl Strategy<Value = Holder> {
    (prop_oneof![0..100u64, 0..u64::MAX], any::<bool>(), prop_oneof![0..200u64, any::<u64>()])
        .prop_map(|(demand, newcomer, claim)| Holder { demand, newcomer, claim })
}

proptest! {
    #[test]
    fn never_over_grants(
        algorithm in algorithm(),
        limit in prop_oneof![1..1000u64, 1..(1u64 << 53)],
        unit_s in prop_oneof![Just(1u64), Just(60), Just(3600), Just(86_400)],
        burst in 0..2000u64,
        tokens in prop_oneof![0..2000u64, any::<u64>()],
        left_us in 0..(3600 * SECOND),
        holders in prop::collection::vec(holder(), 0..60),
    ) {
        let params = Params { algorithm, limit, unit_us: unit_s * SECOND, burst, penalty_us: 0, period: None };
        let headroom = match algorithm {
            Algorithm::Gcra => Headroom::Gcra { tokens },
            _ => Headroom::Window { remaining: tokens, left_us },
        };
        let grants = shares(&params, headroom, &holders);
        prop_assert_eq!(grants.len(), holders.len());
        prop_assert!(total_tokens(&grants) <= tokens, "Σ max_tokens ≤ H");
        for g in &grants {
            if let Grant::TokenBucket(b) = g {
                prop_assert!(b.max_tokens >= 1 && b.tokens_per_fill >= 1 && b.fill_interval_s >= 1);
                if algorithm != Algorithm::Gcra {
                    prop_assert_eq!(b.tokens_per_fill, 1);
                    prop_assert!(u64::from(b.fill_interval_s) * SECOND >= left_us);
                }
            }
        }
        if algorithm == Algorithm::Gcra {
            prop_assert!(total_tokens(&grants) <= burst);
            prop_assert!(rate_within(&grants, &params), "Σ F/T ≤ ρ");
        }
    }
}
