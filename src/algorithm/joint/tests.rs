use proptest::prelude::*;

use super::*;
use crate::algorithm::Algorithm;

const NOW: u64 = 1_700_000_000_000_000;
const MINUTE: u64 = 60_000_000;

fn params(algorithm: Algorithm, limit: u64) -> Params {
    Params { algorithm, limit, unit_us: MINUTE, burst: limit, penalty_us: 0, period: None }
}

fn member(key: usize, params: Params, hits: Hits) -> Member {
    Member { key, params, hits }
}

/// The state after `n` single hits at `NOW` on a fresh bucket.
fn charged(p: &Params, n: u64) -> Option<State> {
    let mut state = None;
    for _ in 0..n {
        match apply_one(state, NOW, p, Hits::Consume(1)).write {
            Write::Put { state: s, .. } => state = Some(s),
            Write::Delete => state = None,
            Write::Keep => {}
        }
    }
    state
}

fn remaining(state: Option<State>, p: &Params) -> u64 {
    apply_one(state, NOW, p, Hits::Peek).decision.remaining
}

/// Applies a group's writes to the states, as a store would.
fn written(stored: &[Option<State>], joint: &Joint) -> Vec<Option<State>> {
    let mut states = stored.to_vec();
    for w in joint.writes.iter().flatten() {
        states[w.key] = match w.write {
            Write::Put { state, .. } => Some(state),
            Write::Delete => None,
            Write::Keep => states[w.key],
        };
    }
    states
}

#[test]
fn a_passing_group_charges_every_member() {
    let a = params(Algorithm::Gcra, 5);
    let b = params(Algorithm::FixedWindow, 3);
    let stored = [None, charged(&b, 1)];
    let joint = apply(&stored, NOW, &[member(0, a, Hits::Consume(2)), member(1, b, Hits::Consume(1))]);
    assert!(joint.passed());
    assert_eq!(joint.decisions[0], apply_one(None, NOW, &a, Hits::Consume(2)).decision);
    assert_eq!(joint.decisions[1], apply_one(stored[1], NOW, &b, Hits::Consume(1)).decision);
    assert_eq!(joint.writes.as_ref().map(Vec::len), Some(2));
    let after = written(&stored, &joint);
    assert_eq!((remaining(after[0], &a), remaining(after[1], &b)), (3, 1));
}

#[test]
fn one_denied_member_charges_none_and_the_others_describe_their_bucket() {
    let a = params(Algorithm::SlidingWindow, 10);
    let b = params(Algorithm::Gcra, 2);
    let stored = [charged(&a, 4), charged(&b, 2)];
    let joint = apply(&stored, NOW, &[member(0, a, Hits::Consume(1)), member(1, b, Hits::Consume(1))]);
    assert!(!joint.passed(), "nothing is written");
    assert_eq!(joint.decisions[1], apply_one(stored[1], NOW, &b, Hits::Consume(1)).decision);
    assert!(!joint.decisions[1].allowed);
    let peek = apply_one(stored[0], NOW, &a, Hits::Peek).decision;
    assert_eq!(joint.decisions[0], Decision { allowed: true, ..peek });
    assert_eq!(joint.decisions[0].remaining, 6, "as stored: the member's hit is not counted");
}

#[test]
fn a_bucket_met_twice_sees_the_earlier_member() {
    let p = params(Algorithm::Gcra, 5);
    let twice = apply(&[None], NOW, &[member(0, p, Hits::Consume(2)), member(0, p, Hits::Consume(2))]);
    assert!(twice.passed());
    assert_eq!((twice.decisions[0].remaining, twice.decisions[1].remaining), (3, 1));
    let writes = twice.writes.clone().unwrap_or_default();
    assert_eq!(writes.len(), 1, "one final write per bucket: {writes:?}");
    assert_eq!(remaining(written(&[None], &twice)[0], &p), 1);

    let over = apply(&[None], NOW, &[member(0, p, Hits::Consume(3)), member(0, p, Hits::Consume(3))]);
    assert!(!over.passed());
    assert!(!over.decisions[1].allowed, "the second sees the first's 3 hits");
    assert_eq!(
        over.decisions[0],
        Decision { allowed: true, remaining: 5, reset_us: 0 },
        "the bucket as stored"
    );
}

#[test]
fn refunds_and_peeks_follow_the_order() {
    let p = params(Algorithm::FixedWindow, 2);
    let full = charged(&p, 2);
    // A refund makes room for the consume after it: both are written as one state.
    let joint = apply(&[full], NOW, &[member(0, p, Hits::Refund(1)), member(0, p, Hits::Consume(1))]);
    assert!(joint.passed());
    assert_eq!(remaining(written(&[full], &joint)[0], &p), 0);
    // A peek on an exhausted bucket denies the group; before the consume it passes.
    let joint = apply(&[full], NOW, &[member(0, p, Hits::Peek)]);
    assert!(!joint.passed() && !joint.decisions[0].allowed);
    let one = charged(&p, 1);
    let peek_first = apply(&[one], NOW, &[member(0, p, Hits::Peek), member(0, p, Hits::Consume(1))]);
    assert!(peek_first.passed());
    let peek_last = apply(&[one], NOW, &[member(0, p, Hits::Consume(1)), member(0, p, Hits::Peek)]);
    assert!(!peek_last.passed(), "the peek sees the consume before it: exhausted");
    assert_eq!(
        peek_last.decisions[0],
        Decision { allowed: true, ..apply_one(one, NOW, &p, Hits::Peek).decision }
    );
}

#[test]
fn a_refund_in_a_denied_group_is_not_written_and_answers_allowed() {
    let p = params(Algorithm::Gcra, 0);
    let q = params(Algorithm::SlidingWindow, 3);
    let stored = [None, charged(&q, 2)];
    let joint = apply(&stored, NOW, &[member(1, q, Hits::Refund(1)), member(0, p, Hits::Consume(1))]);
    assert!(!joint.passed());
    assert!(joint.decisions[0].allowed);
    assert_eq!(joint.decisions[0].remaining, 1, "the refund was not applied");
}

fn arb_params() -> impl Strategy<Value = Params> {
    let algorithm =
        prop_oneof![Just(Algorithm::Gcra), Just(Algorithm::SlidingWindow), Just(Algorithm::FixedWindow)];
    let penalty = prop_oneof![Just(0u64), Just(MINUTE / 2), Just(10 * MINUTE)];
    (algorithm, 0..8u64, 0..8u64, penalty).prop_map(|(algorithm, limit, burst, penalty_us)| Params {
        algorithm,
        limit,
        unit_us: MINUTE,
        burst,
        penalty_us,
        period: None,
    })
}

fn arb_hits() -> impl Strategy<Value = Hits> {
    prop_oneof![4 => (0..4u64).prop_map(Hits::Consume), 1 => Just(Hits::Peek), 1 => (1..3u64).prop_map(Hits::Refund)]
}

proptest! {
    /// A group that passes ends exactly where its members applied one by one end; a group
    /// that is denied writes nothing, and its allowed members describe their stored bucket.
    #[test]
    fn joint_is_sequential_or_nothing(
        keys in prop::collection::vec((arb_params(), 0..6u64), 1..4),
        picks in prop::collection::vec((0..4usize, arb_hits()), 1..6),
    ) {
        let stored: Vec<Option<State>> = keys.iter().map(|(p, n)| charged(p, *n)).collect();
        let members: Vec<Member> =
            picks.iter().map(|&(k, hits)| member(k % keys.len(), keys[k % keys.len()].0, hits)).collect();
        let joint = apply(&stored, NOW, &members);
        let mut sequential = stored.clone();
        let mut decisions = Vec::new();
        for m in &members {
            let out = apply_one(sequential[m.key], NOW, &m.params, m.hits);
            match out.write {
                Write::Put { state, .. } => sequential[m.key] = Some(state),
                Write::Delete => sequential[m.key] = None,
                Write::Keep => {}
            }
            decisions.push(out.decision);
        }
        // Without the veto: exactly the single charges in order, whatever was denied.
        let each = apply_each(&stored, NOW, &members);
        prop_assert_eq!(&each.decisions, &decisions);
        prop_assert_eq!(written(&stored, &each), sequential.clone());
        if decisions.iter().all(|d| d.allowed) {
            prop_assert_eq!(&joint.decisions, &decisions);
            prop_assert_eq!(written(&stored, &joint), sequential);
        } else {
            prop_assert!(joint.writes.is_none());
            for ((got, alone), m) in joint.decisions.iter().zip(&decisions).zip(&members) {
                if alone.allowed {
                    prop_assert_eq!(*got, describe(stored[m.key], NOW, &m.params));
                } else {
                    prop_assert_eq!(got, alone);
                }
            }
        }
    }
}

/// A penalty (`penalty_us`) started by the member that denied a group.
const PENALTY: u64 = 10 * MINUTE;

#[test]
fn a_vetoed_group_still_writes_the_penalty_it_started() {
    let wide = Params {
        algorithm: Algorithm::Gcra,
        limit: 100,
        unit_us: MINUTE,
        burst: 100,
        penalty_us: 0,
        period: None,
    };
    let narrow = Params {
        algorithm: Algorithm::FixedWindow,
        limit: 2,
        unit_us: MINUTE,
        burst: 2,
        penalty_us: PENALTY,
        period: None,
    };
    let members = [
        Member { key: 0, params: wide, hits: Hits::Consume(1) },
        Member { key: 1, params: narrow, hits: Hits::Consume(3) },
    ];
    let out = apply(&[None, None], NOW, &members);
    assert!(!out.passed());
    assert_eq!(out.decisions[1].reset_us, PENALTY);
    assert_eq!(out.marks.len(), 1, "{out:?}");
    assert_eq!(out.marks[0].key, 1);
    let Write::Put { state, expires_at } = out.marks[0].write else { panic!("{out:?}") };
    assert_eq!((state.until(), expires_at), (NOW + PENALTY, NOW + PENALTY));
    // The member that passed charged nothing.
    assert_eq!(out.decisions[0].remaining, 100);
}
