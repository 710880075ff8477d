//! Unit tests of `plain`: which charges go plain, and what replies mean (the answers
//! themselves are checked against the scripts on a real Redis: `tests/differential/plain.rs`).

use redis::Value;

use super::*;
use crate::algorithm::{Algorithm, Hits, Params};

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
fn the_window_key_and_the_hash_in_this_window_count_and_a_denial_gives_back() {
    let now = 10 * MINUTE + 5;
    let ws = (10 * MINUTE).to_string();
    let c = charge(Algorithm::FixedWindow, Hits::Consume(2));
    // The window key holds 3 with this consume; the hash (a script's share) 2 in this window.
    let replies = |count, hash_start: &str| {
        [
            Value::Okay,
            Value::Int(count),
            Value::Array(vec![bulk(hash_start), bulk("2"), Value::Nil, Value::Nil]),
        ]
    };
    match read(&c, now, &replies(3, &ws)) {
        Read::Decided(d, None) => assert_eq!((d.allowed, d.remaining), (true, 0)),
        other => panic!("{other:?}"),
    }
    match read(&c, now, &replies(4, &ws)) {
        Read::Decided(d, Some(back)) => {
            assert!(!d.allowed);
            assert_eq!(back, GiveBack { key: format!("{{k}}:{ws}"), n: 2 });
        }
        other => panic!("{other:?}"),
    }
    // A hash of the previous window is no share of this one.
    let old = (9 * MINUTE).to_string();
    match read(&c, now, &replies(5, &old)) {
        Read::Decided(d, None) => assert_eq!((d.allowed, d.remaining), (true, 0)),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_sliding_window_adds_the_previous_windows_key_and_the_hash_of_that_window() {
    let now = 10 * MINUTE + MINUTE / 2;
    let c = charge(Algorithm::SlidingWindow, Hits::Consume(1));
    let old = (9 * MINUTE).to_string();
    // Previous: 2 in the hash (of the previous window) + 4 in its key = 6, weighted by half:
    // 3; current 1 (this consume) + 3 = 4 > 5? no: 3 + 1 = 4 ≤ 5 allowed, 1 remaining.
    let replies = [
        Value::Okay,
        Value::Int(1),
        Value::Array(vec![bulk(&old), bulk("2"), Value::Nil, Value::Nil]),
        bulk("4"),
    ];
    match read(&c, now, &replies) {
        Read::Decided(d, None) => assert_eq!((d.allowed, d.remaining), (true, 1)),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_penalty_is_stale_and_errors_fail() {
    let now = 10 * MINUTE + 5;
    let c = charge(Algorithm::SlidingWindow, Hits::Consume(1));
    let ws = (10 * MINUTE).to_string();
    let penalized = [
        Value::Nil,
        Value::Int(1),
        Value::Array(vec![bulk(&ws), Value::Nil, Value::Nil, bulk("1")]),
        Value::Nil,
    ];
    assert_eq!(read(&c, now, &penalized), Read::Stale(Some(GiveBack { key: format!("{{k}}:{ws}"), n: 1 })));
    assert!(matches!(read(&c, now, &[]), Read::Failed(StoreError::Server(_))));
}

fn error(line: &str) -> Value {
    redis::parse_redis_value(format!("-{line}\r\n").as_bytes()).expect("an error reply")
}

#[test]
fn unreadable_keys_go_to_the_script_and_other_errors_fail() {
    let now = 10 * MINUTE + 5;
    let c = charge(Algorithm::SlidingWindow, Hits::Consume(1));
    let ws = (10 * MINUTE).to_string();
    let back = Some(GiveBack { key: format!("{{k}}:{ws}"), n: 1 });
    let wrong_type = || error("WRONGTYPE Operation against a key holding the wrong kind of value");
    let bucket_a_string = [Value::Nil, Value::Int(1), wrong_type(), Value::Nil];
    assert_eq!(read(&c, now, &bucket_a_string), Read::Stale(back));
    let text =
        [Value::Nil, error("ERR value is not an integer or out of range"), Value::Array(vec![]), Value::Nil];
    assert_eq!(read(&c, now, &text), Read::Stale(None), "no increment ran: none to give back");
    let overflow =
        [Value::Nil, error("ERR increment or decrement would overflow"), Value::Array(vec![]), Value::Nil];
    assert_eq!(read(&c, now, &overflow), Read::Stale(None));
    let previous_a_hash = [Value::Nil, Value::Int(1), Value::Array(vec![]), wrong_type()];
    assert!(matches!(read(&c, now, &previous_a_hash), Read::Stale(Some(_))));
    let read_only = error("READONLY You can't write against a read only replica.");
    let failover = [read_only.clone(), read_only, Value::Array(vec![]), Value::Nil];
    assert!(matches!(read(&c, now, &failover), Read::Failed(StoreError::Unavailable(_))));
    let mixed =
        [error("OOM command not allowed"), error("ERR value is not an integer"), Value::Nil, Value::Nil];
    assert!(matches!(read(&c, now, &mixed), Read::Failed(StoreError::Server(_))), "any other error fails");
}

#[test]
fn window_keys_share_the_buckets_slot() {
    use crate::store::key::{window_key, window_keys_around};
    use crate::store::redis::slots::key_slot;
    for bucket in ["tg:f1:3:abc", "tg:m:{x}f1:1:n", "a{b", "p{}x"] {
        let key = window_key(bucket, 60_000_000);
        assert!(key.ends_with(":60000000"), "{key}");
        if bucket != "p{}x" {
            assert_eq!(key_slot(key.as_bytes()), key_slot(bucket.as_bytes()), "{bucket} -> {key}");
        }
    }
    assert_eq!(window_key("k", 7), "{k}:7");
    assert_eq!(
        window_keys_around("k", MINUTE, 10 * MINUTE + 5),
        ["{k}:540000000", "{k}:600000000", "{k}:660000000"]
    );
}

#[test]
fn windows_parse_from_their_names() {
    assert_eq!("plain".parse::<Windows>(), Ok(Windows::Plain));
    assert_eq!("lua".parse::<Windows>().map(Windows::as_str), Ok("lua"));
    assert_eq!("read".parse::<Windows>().map(Windows::reads_window_keys), Ok(true));
    assert!(!Windows::Lua.reads_window_keys() && Windows::Plain.reads_window_keys());
    assert!("fast".parse::<Windows>().is_err());
}
