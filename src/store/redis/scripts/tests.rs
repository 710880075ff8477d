//! Unit tests of `scripts`: the commands built for single charges and joint parts, and
//! their replies parsed into decisions (or server errors).

use redis::{Cmd, Value};

use super::*;
use crate::algorithm::{Algorithm, Decision, Hits, Params};
use crate::store::charge::{Charge, StoreError};

fn charge(algorithm: Algorithm, hits: Hits) -> Charge {
    Charge {
        key: "tg:k".into(),
        params: Params { algorithm, limit: 10, unit_us: 1_000_000, burst: 4, penalty_us: 0, period: None },
        hits,
    }
}

fn args(cmd: &Cmd) -> Vec<String> {
    cmd.args_iter()
        .map(|a| match a {
            redis::Arg::Simple(bytes) => String::from_utf8_lossy(bytes).into_owned(),
            _ => "<cursor>".into(),
        })
        .collect()
}

#[test]
fn commands_follow_the_script_contract() {
    let scripts = Scripts::new();
    let args = args(&scripts.command(&charge(Algorithm::Gcra, Hits::Refund(3)), Call::Sha));
    assert_eq!(args[0], "EVALSHA");
    assert_eq!(args[1], redis::Script::new(GCRA_LUA).get_hash());
    assert_eq!(&args[2..], ["1", "tg:k", "10", "1000000", "4", "2", "3"]);
    let eval = self::args(&scripts.command(&charge(Algorithm::FixedWindow, Hits::Peek), Call::Source));
    assert_eq!((eval[0].as_str(), eval[1].as_str()), ("EVAL", FIXED_LUA));
    assert_eq!(&eval[2..], ["1", "tg:k", "10", "1000000", "4", "1", "0"]);
    // A limit with a penalty: no test clock, then the penalty.
    let mut penalized = charge(Algorithm::Gcra, Hits::Consume(1));
    penalized.params.penalty_us = 600_000_000;
    let args = self::args(&scripts.command(&penalized, Call::Sha));
    assert_eq!(&args[2..], ["1", "tg:k", "10", "1000000", "4", "0", "1", "", "600000000"]);
}

#[test]
fn a_joint_call_names_each_key_once_and_every_member() {
    let scripts = Scripts::new();
    let mut other = charge(Algorithm::SlidingWindow, Hits::Consume(2));
    other.key = "tg:o".into();
    let batch = [charge(Algorithm::Gcra, Hits::Consume(1)), other, charge(Algorithm::Gcra, Hits::Peek)];
    let args = args(&scripts.part(&batch, &[0, 1, 2], false, Call::Sha));
    assert_eq!(args[0], "EVALSHA");
    assert_eq!(args[1], redis::Script::new(JOINT_LUA).get_hash());
    let expected = [
        "2",
        "tg:k",
        "tg:o",
        "3", // keys, then members
        "1",
        "gcra",
        "10",
        "1000000",
        "4",
        "0",
        "1",
        "0", //
        "2",
        "sliding_window",
        "10",
        "1000000",
        "4",
        "0",
        "2",
        "0", //
        "1",
        "gcra",
        "10",
        "1000000",
        "4",
        "1",
        "0",
        "0",
    ];
    assert_eq!(&args[2..], expected);
    let single = self::args(&scripts.part(&batch, &[1], false, Call::Source));
    let each = self::args(&scripts.part(&batch, &[0, 2], true, Call::Sha));
    assert_eq!(each[each.len() - 2..], ["", "1"], "a coalesced batch: no clock, then each");
    assert_eq!(
        (single[0].as_str(), single[1].as_str()),
        ("EVAL", SLIDING_LUA),
        "a part of one: its own script"
    );
}

#[test]
fn a_joint_reply_is_one_decision_per_member_or_one_error_for_all() {
    let decision = |a, r, t| Value::Array(vec![Value::Int(a), Value::Int(r), Value::Int(t)]);
    let reply = Value::Array(vec![decision(1, 3, 10), decision(0, 0, 99)]);
    assert_eq!(
        parse_part(Ok(reply), 2),
        [
            Ok(Decision { allowed: true, remaining: 3, reset_us: 10 }),
            Ok(Decision { allowed: false, remaining: 0, reset_us: 99 })
        ]
    );
    // Three members whose reply looks like one decision is still read as three.
    let three = Value::Array(vec![decision(1, 1, 1), decision(1, 2, 2), decision(1, 3, 3)]);
    assert!(parse_part(Ok(three), 3).iter().all(Result::is_ok));
    let short = parse_part(Ok(Value::Array(vec![decision(1, 1, 1)])), 2);
    assert!(short.iter().all(|r| matches!(r, Err(StoreError::Server(_)))), "{short:?}");
    assert_eq!(parse_part(Err(StoreError::Timeout), 2), [Err(StoreError::Timeout), Err(StoreError::Timeout)]);
}

#[test]
fn replies_parse_or_fail_as_server_errors() {
    let ok = Value::Array(vec![Value::Int(1), Value::Int(4), Value::Int(250)]);
    assert_eq!(parse(ok), Ok(Decision { allowed: true, remaining: 4, reset_us: 250 }));
    assert!(matches!(parse(Value::Nil), Err(StoreError::Server(_))));
    assert!(matches!(parse(Value::Array(vec![Value::Int(1)])), Err(StoreError::Server(_))));
}

#[test]
fn the_scripts_read_window_keys_only_when_told() {
    let scripts = Scripts::new();
    let sha = |scripts: &Scripts| {
        args(&scripts.command(&charge(Algorithm::FixedWindow, Hits::Consume(1)), Call::Sha))[1].clone()
    };
    assert_eq!(sha(&scripts), redis::Script::new(super::WITHOUT_WINDOW_KEYS.fixed).get_hash());
    scripts.read_window_keys(true);
    assert_eq!(sha(&scripts), redis::Script::new(super::WITH_WINDOW_KEYS.fixed).get_hash());
    // The two builds differ only in their first line: the flag fold reads.
    let (off, on) = (super::WITHOUT_WINDOW_KEYS.batch, super::WITH_WINDOW_KEYS.batch);
    let body = |s: &'static str| {
        s.split_once("local WINDOW_KEYS = ").map(|(_, rest)| &rest[rest.find('\n').unwrap_or(0)..])
    };
    assert!(off.contains("local WINDOW_KEYS = false") && on.contains("local WINDOW_KEYS = true"));
    assert_eq!(body(off), body(on));
}
