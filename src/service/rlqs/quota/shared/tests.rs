//! The pure part of an assignment: the shares over several limits, the claims cap, who
//! must shrink and when to look again.

use super::*;
use crate::algorithm::{Hits, Params};

fn params(algorithm: Algorithm, limit: u64, unit_s: u64) -> Params {
    Params { algorithm, limit, unit_us: unit_s * 1_000_000, burst: limit, penalty_us: 0, period: None }
}

fn charge(params: Params) -> Charge {
    Charge { key: "k".into(), params, hits: Hits::Peek }
}

fn other(name: &str, demand: u64, claim: u64, live: bool) -> Holding {
    Holding { holder: name.into(), demand, newcomer: false, live, claim, instance: "i".into() }
}

fn decision(remaining: u64, reset_us: u64) -> Decision {
    Decision { allowed: remaining > 0, remaining, reset_us }
}

fn tokens(grant: Grant) -> u32 {
    match grant {
        Grant::TokenBucket(b) => b.max_tokens,
        Grant::DenyAll => 0,
    }
}

#[test]
fn a_lone_holder_gets_the_whole_headroom() {
    let held = Held { demand: 10, ..Held::default() };
    let shared =
        shared(&[charge(params(Algorithm::Gcra, 100, 60))], &[decision(100, 0)], &held, &Holders::default());
    assert_eq!(tokens(shared.grant), 100);
    assert!(shared.shrink.is_empty());
    assert_eq!(shared.wake, None, "GCRA with room: the next report is soon enough");
}

#[test]
fn other_holders_claims_cap_this_one() {
    let held = Held { demand: 100, ..Held::default() };
    // The other holder is idle (weight 1 of 101) but still holds a claim of 60.
    let holders = Holders { claim: 0, others: vec![other("b", 0, 60, true)] };
    let shared = shared(
        &[charge(params(Algorithm::FixedWindow, 100, 60))],
        &[decision(100, 30_000_000)],
        &held,
        &holders,
    );
    assert_eq!(tokens(shared.grant), 40, "100 of headroom, 60 claimed by b");
    let shrink: Vec<&str> = shared.shrink.iter().map(|s| s.holder.as_str()).collect();
    assert_eq!(shrink, ["b"], "b's share (1 of 101) is below its claim");
    assert_eq!(shared.wake, Some(Duration::from_millis(30_050)), "a window is looked at again past its edge");
}

#[test]
fn a_claim_of_a_holder_whose_stream_ended_still_counts_but_it_does_not_weigh() {
    let held = Held { demand: 1, ..Held::default() };
    let holders = Holders { claim: 0, others: vec![other("gone", 1_000, 30, false)] };
    let shared = shared(&[charge(params(Algorithm::Gcra, 100, 60))], &[decision(100, 0)], &held, &holders);
    assert_eq!(tokens(shared.grant), 70, "alone in weight, less the 30 still claimed");
    assert!(shared.shrink.is_empty(), "a holder without a stream is not pushed");
}

#[test]
fn nothing_left_is_deny_all_and_a_wake_when_a_token_is_back() {
    let held = Held { demand: 5, ..Held::default() };
    let shared = shared(
        &[charge(params(Algorithm::Gcra, 10, 1))],
        &[decision(0, 100_000)],
        &held,
        &Holders::default(),
    );
    assert_eq!(shared.grant, Grant::DenyAll);
    assert_eq!(
        shared.wake,
        Some(Duration::from_secs(1)),
        "one token per 100 ms, looked at no sooner than 1 s"
    );
}

#[test]
fn several_limits_take_the_smallest_capacity_and_the_slowest_refill() {
    let held = Held { demand: 5, ..Held::default() };
    let charges = [charge(params(Algorithm::Gcra, 600, 60)), charge(params(Algorithm::Gcra, 1_000, 3_600))];
    let shared = shared(&charges, &[decision(600, 0), decision(50, 0)], &held, &Holders::default());
    let Grant::TokenBucket(bucket) = shared.grant else { panic!("a bucket: {shared:?}") };
    assert_eq!(bucket.max_tokens, 50, "the hourly limit has 50 left");
    // 600/min = 10/s against 1000/h ≈ 0.28/s: the hourly refill.
    assert_eq!((bucket.tokens_per_fill, bucket.fill_interval_s), (1_000, 3_600));
    let one_denies = shared_of(&charges, &[decision(600, 0), decision(0, 0)]);
    assert_eq!(one_denies, Grant::DenyAll, "one exhausted limit denies");
}

fn shared_of(charges: &[Charge], decisions: &[Decision]) -> Grant {
    shared(charges, decisions, &Held { demand: 1, ..Held::default() }, &Holders::default()).grant
}

#[test]
fn fifty_holders_never_hold_more_than_the_headroom() {
    let p = params(Algorithm::FixedWindow, 1_000, 60);
    let mut claims: Vec<u64> = vec![0; 50];
    // Each reports in turn with the claims the others hold; the sum stays within 1000.
    for round in 0..3 {
        for i in 0..50 {
            let others: Vec<Holding> = (0..50)
                .filter(|&j| j != i)
                .map(|j| other(&format!("e{j}"), (j as u64 + round) % 7, claims[j], true))
                .collect();
            let held = Held { demand: (i as u64) % 5, ..Held::default() };
            let grant = shared(
                &[charge(p)],
                &[decision(1_000, 40_000_000)],
                &held,
                &Holders { claim: claims[i], others },
            )
            .grant;
            claims[i] = u64::from(tokens(grant));
            assert!(claims.iter().sum::<u64>() <= 1_000, "round {round}, holder {i}: {claims:?}");
        }
    }
}

#[test]
fn a_full_window_sets_no_wake_up_so_an_edge_never_loops() {
    let held = Held { demand: 1, ..Held::default() };
    // A fixed window with no count answers reset 0: nothing to look at again.
    let full = shared(
        &[charge(params(Algorithm::FixedWindow, 10, 1))],
        &[decision(10, 0)],
        &held,
        &Holders::default(),
    );
    assert_eq!(full.wake, None);
}

#[test]
fn a_window_with_no_count_refills_over_the_whole_unit_never_per_second() {
    // The first look in a new window peeks a key not yet written: reset 0. Its refill is
    // one token per unit (10 s), not per second (+9 tokens per holder per window).
    let held = Held { demand: 20, ..Held::default() };
    let grant = shared(
        &[charge(params(Algorithm::FixedWindow, 20, 10))],
        &[decision(20, 0)],
        &held,
        &Holders { claim: 0, others: vec![other("b", 20, 0, true)] },
    )
    .grant;
    let Grant::TokenBucket(bucket) = grant else { panic!("room for both: {grant:?}") };
    assert_eq!((bucket.max_tokens, bucket.tokens_per_fill, bucket.fill_interval_s), (10, 1, 10));
    for algorithm in [Algorithm::FixedWindow, Algorithm::SlidingWindow] {
        let grant =
            shared(&[charge(params(algorithm, 20, 60))], &[decision(20, 0)], &held, &Holders::default())
                .grant;
        let Grant::TokenBucket(bucket) = grant else { panic!("{algorithm:?}: {grant:?}") };
        assert_eq!(bucket.fill_interval_s, 60, "{algorithm:?}");
    }
}

#[test]
fn a_holder_left_nothing_by_others_claims_looks_again_soon() {
    let held = Held { demand: 5, newcomer: true, ..Held::default() };
    let holders = Holders { claim: 0, others: vec![other("a", 9, 90, true)] };
    let starved = shared(&[charge(params(Algorithm::Gcra, 100, 3600))], &[decision(89, 0)], &held, &holders);
    assert_eq!(starved.grant, Grant::DenyAll, "a holds 90 of the 89 left");
    assert_eq!(starved.wake, Some(Duration::from_secs(1)), "once a has shrunk, not at the next report");
    assert_eq!(starved.shrink.len(), 1);
}

#[test]
fn a_grant_shrunk_to_what_fits_keeps_its_refill_and_nothing_is_deny_all() {
    let bucket = TokenBucket { max_tokens: 19, tokens_per_fill: 1, fill_interval_s: 9 };
    assert_eq!(
        shrunk(Grant::TokenBucket(bucket), 5),
        Grant::TokenBucket(TokenBucket { max_tokens: 5, ..bucket })
    );
    assert_eq!(shrunk(Grant::TokenBucket(bucket), 40), Grant::TokenBucket(bucket));
    assert_eq!(shrunk(Grant::TokenBucket(bucket), 0), Grant::DenyAll);
    assert_eq!(shrunk(Grant::DenyAll, 7), Grant::DenyAll);
}
