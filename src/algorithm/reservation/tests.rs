use super::*;
use crate::algorithm::{apply as apply_one, Write};

const NOW: u64 = 1_700_000_000_000_000;
const MINUTE: u64 = 60_000_000;

fn params(algorithm: Algorithm, limit: u64) -> Params {
    Params { algorithm, limit, unit_us: MINUTE, burst: limit, penalty_us: 0, period: None }
}

fn member(p: Params, hits: Hits) -> Member {
    Member { key: 0, params: p, hits }
}

/// Runs one call on one bucket and one book, applying what it writes.
fn call(state: &mut Option<State>, book: &mut Book, now: u64, m: Member) -> (Outcome, u64) {
    let (record, expired) = book.open(b"r", now);
    let out = apply(&[*state], record.as_ref(), now, &[m]);
    for w in out.joint.writes.iter().flatten().chain(&out.joint.marks) {
        match w.write {
            Write::Put { state: s, .. } => *state = Some(s),
            Write::Delete => *state = None,
            Write::Keep => {}
        }
    }
    if let Some(r) = out.record.clone() {
        book.put(b"r", r, now, 10 * MINUTE);
    }
    (out, expired)
}

fn remaining(state: Option<State>, p: &Params, now: u64) -> u64 {
    apply_one(state, now, p, Hits::Peek).decision.remaining
}

#[test]
fn reserve_then_settle_gives_back_what_was_not_used() {
    for algorithm in [Algorithm::Gcra, Algorithm::SlidingWindow, Algorithm::FixedWindow] {
        let p = params(algorithm, 100);
        let (mut st, mut book) = (None, Book::default());
        let (out, _) = call(&mut st, &mut book, NOW, member(p, Hits::Consume(60)));
        assert_eq!((out.phase, out.joint.decisions[0].remaining), (Phase::Reserved, 40), "{algorithm:?}");
        assert_eq!(remaining(st, &p, NOW), 40, "held counts as spent");
        let (out, _) = call(&mut st, &mut book, NOW, member(p, Hits::Consume(25)));
        assert_eq!(out.phase, Phase::Settled);
        assert_eq!(remaining(st, &p, NOW), 75, "{algorithm:?}: 35 came back");
        // Gone: a later call is a plain charge, or a peek with 0 hits.
        let (out, _) = call(&mut st, &mut book, NOW, member(p, Hits::Consume(5)));
        assert_eq!((out.phase, out.joint.decisions[0].remaining), (Phase::Plain, 70));
        let (out, _) = call(&mut st, &mut book, NOW, member(p, Hits::Peek));
        assert_eq!((out.phase, out.joint.decisions[0].remaining), (Phase::Plain, 70));
    }
}

#[test]
fn an_estimate_that_does_not_fit_is_refused_and_holds_nothing() {
    let p = params(Algorithm::FixedWindow, 10);
    let (mut st, mut book) = (None, Book::default());
    let (out, _) = call(&mut st, &mut book, NOW, member(p, Hits::Consume(11)));
    assert_eq!((out.phase, out.joint.decisions[0].allowed), (Phase::Refused, false));
    assert_eq!(remaining(st, &p, NOW), 10);
    // The stream-end call of a refused request is plain.
    let (out, _) = call(&mut st, &mut book, NOW, member(p, Hits::Consume(3)));
    assert_eq!((out.phase, remaining(st, &p, NOW)), (Phase::Plain, 7));
}

#[test]
fn an_overrun_is_recorded_whatever_the_limit_says_within_one_unit_of_debt() {
    let p = params(Algorithm::FixedWindow, 10);
    let (mut st, mut book) = (None, Book::default());
    call(&mut st, &mut book, NOW, member(p, Hits::Consume(8)));
    let (out, _) = call(&mut st, &mut book, NOW, member(p, Hits::Consume(1_000)));
    assert_eq!(out.phase, Phase::Settled);
    assert!(!out.joint.decisions[0].allowed, "past the limit");
    assert_eq!(remaining(st, &p, NOW), 0);
    assert_eq!(remaining(st, &p, NOW + MINUTE), 10, "a fixed window's debt ends with it");
}

#[test]
fn a_settle_after_the_window_ended_drops_the_refund_and_charges_an_overrun_now() {
    let p = params(Algorithm::FixedWindow, 10);
    let start = NOW - NOW % MINUTE;
    let (mut st, mut book) = (None, Book::default());
    call(&mut st, &mut book, start + 1, member(p, Hits::Consume(8)));
    let (mut late, mut late_book) = (st, book.clone());
    call(&mut st, &mut book, start + MINUTE + 1, member(p, Hits::Consume(2)));
    assert_eq!(remaining(st, &p, start + MINUTE + 1), 10, "no refund into the next window");
    call(&mut late, &mut late_book, start + MINUTE + 1, member(p, Hits::Consume(12)));
    assert_eq!(remaining(late, &p, start + MINUTE + 1), 6, "the overrun of 4 lands in this window");
}

#[test]
fn several_limits_each_reserve_and_settle() {
    let (a, b) = (params(Algorithm::Gcra, 100), params(Algorithm::SlidingWindow, 50));
    let members = |hits| [Member { key: 0, params: a, hits }, Member { key: 1, params: b, hits }];
    let mut book = Book::default();
    let out = apply(&[None, None], None, NOW, &members(Hits::Consume(60)));
    assert_eq!(out.phase, Phase::Refused, "60 does not fit 50: neither holds");
    assert!(out.joint.writes.is_none());
    let out = apply(&[None, None], None, NOW, &members(Hits::Consume(40)));
    assert_eq!(
        out.record,
        Some(Record::Held(vec![Held { n: 40, window: 0 }, Held { n: 40, window: NOW - NOW % MINUTE }]))
    );
    book.put(b"r", out.record.clone().unwrap_or(Record::Done), NOW, MINUTE);
    let states: Vec<Option<State>> = out
        .joint
        .writes
        .iter()
        .flatten()
        .map(|w| match w.write {
            Write::Put { state, .. } => Some(state),
            _ => None,
        })
        .collect();
    let (record, _) = book.open(b"r", NOW);
    let settled = apply(&states, record.as_ref(), NOW, &members(Hits::Consume(10)));
    assert_eq!(settled.phase, Phase::Settled);
    let rem: Vec<u64> = settled.joint.decisions.iter().map(|d| d.remaining).collect();
    assert_eq!(rem, [90, 40]);
}

#[test]
fn zero_hits_with_no_record_is_a_peek_that_holds_nothing() {
    let p = params(Algorithm::Gcra, 5);
    let out = apply(&[None], None, NOW, &[member(p, Hits::Peek)]);
    assert_eq!((out.phase, out.record, out.joint.decisions[0].remaining), (Phase::Plain, None, 5));
}

#[test]
fn records_expire_after_the_ttl_still_charged_and_counted() {
    let mut book = Book::default();
    book.put(b"r", Record::Held(vec![Held { n: 30, window: 0 }]), NOW, 2 * MINUTE);
    for i in 0..(SWEEP as u8 + 3) {
        book.put(&[b'x', i], Record::Held(vec![]), NOW, MINUTE);
    }
    book.put(b"d", Record::Done, NOW, MINUTE);
    let (record, expired) = book.open(b"r", NOW + MINUTE);
    assert!(record.is_some(), "not expired yet");
    assert_eq!(
        expired,
        SWEEP as u64 - 1,
        "bounded per call, soonest then by id: the done one is not counted"
    );
    let (record, expired) = book.open(b"r", NOW + 2 * MINUTE);
    assert_eq!((record, expired), (None, 4 + 1), "the rest, then its own");
    assert!(book.is_empty());
}

#[test]
fn the_bound_estimate_at_least_actual_never_overspends() {
    // Requests in flight each reserve 10 against 100 and use at most their estimate: the
    // budget's spend never passes 100, whatever order they settle in.
    let p = params(Algorithm::FixedWindow, 100);
    let (mut st, mut book) = (None, Book::default());
    let mut admitted = Vec::new();
    for i in 0..15u8 {
        let (record, _) = book.open(&[i], NOW);
        let out = apply(&[st], record.as_ref(), NOW, &[member(p, Hits::Consume(10))]);
        if let Some(Write::Put { state, .. }) = out.joint.writes.iter().flatten().map(|w| w.write).next() {
            st = Some(state);
        }
        if out.phase == Phase::Reserved {
            admitted.push(i);
        }
        if let Some(r) = out.record {
            book.put(&[i], r, NOW, MINUTE);
        }
    }
    assert_eq!(admitted.len(), 10);
    let mut used = 0;
    for (j, i) in admitted.iter().enumerate() {
        let actual = (j as u64 * 7) % 11;
        used += actual;
        let (record, _) = book.open(&[*i], NOW);
        let out = apply(&[st], record.as_ref(), NOW, &[member(p, Hits::Consume(actual))]);
        if let Some(Write::Put { state, .. }) = out.joint.writes.iter().flatten().map(|w| w.write).next() {
            st = Some(state);
        }
        assert!(100 - remaining(st, &p, NOW) <= 100);
    }
    assert_eq!(100 - remaining(st, &p, NOW), used);
}
