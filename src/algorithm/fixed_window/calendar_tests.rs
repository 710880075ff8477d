//! Calendar periods through the fixed window (`Params::period`): the period the caller
//! gives is the window, a later stored period wins over an earlier given one, and the
//! server's clock is clamped into the window.

use super::*;
use crate::algorithm::{Algorithm, MAX_VALUE};

const S: u64 = 1_000_000;
/// A 31-day period and the 30-day one after it (any bounds: the algorithm takes them as given).
const START: u64 = 1_780_000_000 * S;
const END: u64 = START + 31 * 86_400 * S;
const NEXT_END: u64 = END + 30 * 86_400 * S;

fn params(limit: u64, start_us: u64, end_us: u64) -> Params {
    Params {
        algorithm: Algorithm::FixedWindow,
        limit,
        unit_us: 30 * 86_400 * S,
        burst: limit,
        penalty_us: 0,
        period: Some(Period { start_us, end_us }),
    }
}

fn put(out: &Outcome) -> (u64, u64, u64, u64) {
    match out.write {
        Write::Put { state: State::Window { start, current, previous, .. }, expires_at } => {
            (start, current, previous, expires_at)
        }
        ref other => panic!("expected a window write, got {other:?}"),
    }
}

#[test]
fn the_period_is_the_window_and_its_end_is_stored() {
    let p = params(3, START, END);
    let out = apply(None, START + 10 * S, &p, Hits::Consume(2));
    assert_eq!(out.decision, Decision { allowed: true, remaining: 1, reset_us: END - START - 10 * S });
    assert_eq!(
        put(&out),
        (START, 2, END, END + CALENDAR_GRACE_US),
        "count, the period's end, expiring a grace after it"
    );
    let full = apply(Some((START, 3, END)), END - 1, &p, Hits::Consume(1));
    assert_eq!(full.decision, Decision { allowed: false, remaining: 0, reset_us: 1 });
    // The next period (the caller crossed): a fresh count, whatever the old one held.
    let next = params(3, END, NEXT_END);
    let out = apply(Some((START, 3, END)), END, &next, Hits::Consume(3));
    assert_eq!(out.decision, Decision { allowed: true, remaining: 0, reset_us: NEXT_END - END });
    assert_eq!(put(&out), (END, 3, NEXT_END, NEXT_END + CALENDAR_GRACE_US));
}

#[test]
fn a_later_stored_period_wins_so_a_lagging_caller_never_resets_it() {
    // Another instance crossed into the next period and spent it; this one still says the
    // old period: it counts in the stored one, and never writes the old period back.
    let lagging = params(3, START, END);
    let stored = Some((END, 3, NEXT_END));
    let out = apply(stored, END - 5, &lagging, Hits::Consume(1));
    assert_eq!(out.decision, Decision { allowed: false, remaining: 0, reset_us: NEXT_END - END });
    let stored = Some((END, 1, NEXT_END));
    let out = apply(stored, END + 7, &lagging, Hits::Consume(1));
    assert_eq!(put(&out), (END, 2, NEXT_END, NEXT_END + CALENDAR_GRACE_US));
    // An earlier stored period (or junk) is no count.
    let out = apply(Some((START - 1, 3, START)), START, &lagging, Hits::Peek);
    assert_eq!(out.decision, Decision { allowed: true, remaining: 3, reset_us: 0 });
    let junk = apply(Some((END, 3, 0)), START, &lagging, Hits::Peek);
    assert_eq!(junk.decision.remaining, 3, "a stored start without a later end is not a period");
}

#[test]
fn the_server_clock_is_clamped_into_the_period() {
    let p = params(2, START, END);
    // Behind the caller (before the period's start): counted from the start.
    let early = apply(None, START - 3 * S, &p, Hits::Consume(1));
    assert_eq!(early.decision.reset_us, END - START);
    assert_eq!(put(&early).0, START);
    // Past its end (the server crossed first): still this period, 1 µs left.
    let late = apply(Some((START, 2, END)), END + 3 * S, &p, Hits::Consume(1));
    assert_eq!(late.decision, Decision { allowed: false, remaining: 0, reset_us: 1 });
    // Past the grace, the old period's count is gone (the stores have dropped it too).
    let gone = apply(Some((START, 2, END)), END + CALENDAR_GRACE_US, &p, Hits::Peek);
    assert_eq!(gone.decision, Decision { allowed: true, remaining: 2, reset_us: 0 });
    // Degenerate bounds do not panic.
    for (s, e) in [(0, 0), (5, 5), (9, 2), (MAX_VALUE, MAX_VALUE), (u64::MAX, 0)] {
        let d = apply(Some((s, 1, e)), s, &params(1, s, e), Hits::Consume(1)).decision;
        assert!(d.reset_us >= 1 && d.remaining <= 1);
    }
}

#[test]
fn peek_refund_and_overdraw_work_in_a_period() {
    let p = params(5, START, END);
    let st = Some((START, 4, END));
    let peek = apply(st, START + S, &p, Hits::Peek);
    assert_eq!(
        peek,
        Outcome {
            decision: Decision { allowed: true, remaining: 1, reset_us: END - START - S },
            write: Write::Keep
        }
    );
    let refund = apply(st, START + S, &p, Hits::Refund(4));
    assert_eq!(refund.write, Write::Delete);
    let over = apply(st, START + S, &p, Hits::Overdraw(3));
    assert!(!over.decision.allowed);
    assert_eq!(put(&over), (START, 5, END, END + CALENDAR_GRACE_US), "the period spent to its end");
}
