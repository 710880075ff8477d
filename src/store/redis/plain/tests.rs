//! Unit tests of `plain`: which charges go plain, and what replies mean (the answers
//! themselves are checked against the scripts on a real Redis: `tests/differential/plain.rs`).

use redis::Value;

use super::*;
use crate::algorithm::Params;

const MINUTE: u64 = 60_000_000;

fn charge(algorithm: Algorithm, hits: Hits) -> Charge {
    let params = Params { algorithm, limit: 5, unit_us: MINUTE, burst: 5, penalty_us: 0, period: None };
    Charge { key: "k".into(), params, hits }
}

fn bulk(s: &str) -> Value {
    Value::BulkString(s.as_bytes().to_vec())
}

#[test]
fn only_window_consumes_alone_in_their_group_go_plain() {
    let fixed = charge(Algorithm::FixedWindow, Hits::Consume(1));
    let batch = vec![
        fixed.clone(),
        charge(Algorithm::Gcra, Hits::Consume(1)),
        charge(Algorithm::SlidingWindow, Hits::Peek),
        charge(Algorithm::SlidingWindow, Hits::Consume(2)),
        fixed.clone(),
        fixed.clone(),
    ];
    // The last two stand or fall together: their script decides them.
    let split = split(&batch, &Groups::from_ends(vec![1, 2, 3, 4, 6])).expect("some go plain");
    assert_eq!(split.plain, [0, 3]);
    assert_eq!(split.rest, [1, 2, 4, 5]);
    assert_eq!(split.rest_groups.ranges(4).collect::<Vec<_>>(), [0..1, 1..2, 2..4]);
    let penalized = Charge { params: Params { penalty_us: 1, ..fixed.params }, ..fixed.clone() };
    let none = [penalized, charge(Algorithm::FixedWindow, Hits::Refund(1))];
    assert_eq!(split_of(&none), None);
}

fn split_of(batch: &[Charge]) -> Option<Split> {
    split(batch, &Groups::each())
}

#[test]
fn replies_in_this_window_are_decided_and_a_denial_gives_back() {
    let now = 10 * MINUTE + 5;
    let ws = (10 * MINUTE).to_string();
    let c = charge(Algorithm::FixedWindow, Hits::Consume(2));
    let replies = |count| {
        [
            Value::Int(0),
            Value::Array(vec![bulk(&ws), Value::Nil, Value::Nil]),
            Value::Int(count),
            Value::Int(0),
        ]
    };
    match read(&c, now, &replies(5)) {
        Read::Decided(d, None) => assert_eq!((d.allowed, d.remaining), (true, 0)),
        other => panic!("{other:?}"),
    }
    match read(&c, now, &replies(6)) {
        Read::Decided(d, Some(back)) => {
            assert!(!d.allowed);
            assert_eq!(back, GiveBack { key: "k".into(), start: ws.clone(), n: 2 });
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn another_window_or_a_penalty_is_stale_and_errors_fail() {
    let now = 10 * MINUTE + 5;
    let c = charge(Algorithm::SlidingWindow, Hits::Consume(1));
    let old = (9 * MINUTE).to_string();
    let stale =
        [Value::Int(0), Value::Array(vec![bulk(&old), bulk("3"), Value::Nil]), Value::Int(4), Value::Int(0)];
    assert_eq!(read(&c, now, &stale), Read::Stale(GiveBack { key: "k".into(), start: old, n: 1 }));
    let ws = (10 * MINUTE).to_string();
    let penalized =
        [Value::Int(0), Value::Array(vec![bulk(&ws), Value::Nil, bulk("1")]), Value::Int(1), Value::Int(0)];
    assert!(matches!(read(&c, now, &penalized), Read::Stale(_)));
    assert!(matches!(read(&c, now, &[]), Read::Failed(StoreError::Server(_))));
}

#[test]
fn windows_parse_from_their_names() {
    assert_eq!("plain".parse::<Windows>(), Ok(Windows::Plain));
    assert_eq!("lua".parse::<Windows>().map(Windows::as_str), Ok("lua"));
    assert!("fast".parse::<Windows>().is_err());
}
