//! `--redis-windows plain` answers as the scripts do: for one client at a time, a random
//! sequence of consumes, peeks and refunds on a fixed or sliding window gets identical
//! `(allowed, remaining, reset_us)` from the plain path (`store::redis::plain`: its
//! commands, its reading of the replies, the give-back of a denial, and the script for a
//! stale bucket, composed as the store composes them) and from the script alone, each on
//! its own key of one real redis-server, and both keys hold the same window and count
//! after every step (the give-back run). Peeks and refunds keep their script on both sides.
//!
//! The fake clock runs a year ahead of real time (keys never expire in Redis during the
//! test): a bucket from an earlier window is still there when the clock has left it, which
//! is exactly the stale case the plain path must hand to the script.

use std::cell::{Cell, RefCell};

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use redis::Value;
use tollgate::algorithm::{Algorithm, Hits, Params};
use tollgate::store::redis::plain::{eligible, push_commands, read, Read, COMMANDS};
use tollgate::store::scripts::Call;
use tollgate::store::Charge;

use super::redis_support::RedisServer;
use super::{arb_tick, eval, load, real_now_us, Tick, DAY_US};

fn arb_case(algorithm: Algorithm) -> impl Strategy<Value = (Params, u64, Vec<(Tick, Hits)>)> {
    let unit = prop::sample::select(vec![7u64, 1_000, 1_000_000, 60_000_000, 3_600_000_000]);
    let params = (0u64..12, unit).prop_map(move |(limit, unit_us)| Params {
        algorithm,
        limit,
        unit_us,
        burst: limit,
        penalty_us: 0,
        period: None,
    });
    let hits = prop_oneof![
        8 => (1u64..5).prop_map(Hits::Consume),
        1 => (5u64..20).prop_map(Hits::Consume),
        2 => Just(Hits::Peek),
        2 => (1u64..4).prop_map(Hits::Refund),
    ];
    (params, 0..DAY_US, prop::collection::vec((arb_tick(), hits), 1..80))
}

/// The hash's window start, count and (sliding) previous count; a missing field is 0, as
/// the scripts read it.
fn stored(con: &mut redis::Connection, key: &str, sliding: bool) -> Result<Vec<u64>, TestCaseError> {
    let fields: Vec<Option<u64>> = redis::cmd("HMGET")
        .arg(key)
        .arg(&["s", "c", "p"])
        .query(con)
        .map_err(|e| TestCaseError::fail(format!("HMGET {key}: {e}")))?;
    let mut values: Vec<u64> = fields.into_iter().map(Option::unwrap_or_default).collect();
    if !sliding {
        values.truncate(2);
    }
    // An empty window is no state: the scripts delete it, and a plain denial on a fresh
    // bucket leaves `{s, c = 0}` until it expires.
    if values[1] == 0 && values.get(2).copied().unwrap_or(0) == 0 {
        values = Vec::new();
    }
    Ok(values)
}

/// One step on the plain side, as the store takes it: plain commands for a consume (the
/// give-back run at once, the script for a stale bucket), the script for the rest.
fn plain_step(
    con: &mut redis::Connection,
    sha: &str,
    charge: &Charge,
    now: u64,
) -> Result<Vec<i64>, TestCaseError> {
    let fail = |e: redis::RedisError| TestCaseError::fail(format!("plain step: {e}"));
    if !eligible(charge) {
        return eval(con, sha, &charge.key, &charge.params, charge.hits, Some(now)).map_err(fail);
    }
    let mut pipe = redis::pipe();
    push_commands(&mut pipe, charge, now);
    let replies: Vec<Value> = pipe.query(con).map_err(fail)?;
    prop_assert_eq!(replies.len(), COMMANDS);
    match read(charge, now, &replies) {
        Read::Decided(d, back) => {
            if let Some(back) = back {
                let _: i64 = back.command(Call::Source).query(con).map_err(fail)?;
            }
            Ok(vec![i64::from(d.allowed), d.remaining as i64, d.reset_us as i64])
        }
        Read::Stale(back) => {
            let _: i64 = back.command(Call::Source).query(con).map_err(fail)?;
            eval(con, sha, &charge.key, &charge.params, charge.hits, Some(now)).map_err(fail)
        }
        Read::Failed(e) => Err(TestCaseError::fail(format!("plain read failed: {e}"))),
    }
}

fn run(
    con: &mut redis::Connection,
    sha: &str,
    serial: u64,
    (p, offset, steps): (Params, u64, Vec<(Tick, Hits)>),
) -> Result<(), TestCaseError> {
    let sliding = p.algorithm == Algorithm::SlidingWindow;
    let (lua_key, plain_key) = (format!("lua:{serial}"), format!("plain:{serial}"));
    let mut now = real_now_us() + 365 * DAY_US + offset;
    for (i, (tick, hits)) in steps.into_iter().enumerate() {
        now = now.saturating_add(tick.resolve(now, p.unit_us));
        let lua = eval(con, sha, &lua_key, &p, hits, Some(now))
            .map_err(|e| TestCaseError::fail(format!("step {i}: script failed: {e}")))?;
        let charge = Charge { key: plain_key.clone(), params: p, hits };
        let plain = plain_step(con, sha, &charge, now)?;
        prop_assert_eq!(&plain, &lua, "step {} at now={} hits={:?}", i, now, hits);
        let (l, q) = (stored(con, &lua_key, sliding)?, stored(con, &plain_key, sliding)?);
        prop_assert_eq!(q, l, "step {} stored (s, c[, p]) after {:?}", i, hits);
    }
    Ok(())
}

fn plain_matches_lua(algorithm: Algorithm) {
    let server = RedisServer::start();
    let con = RefCell::new(server.client());
    let sha = load(&mut con.borrow_mut(), algorithm);
    let serial = Cell::new(0u64);
    let cases = std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(300);
    let mut runner = TestRunner::new(Config { cases, failure_persistence: None, ..Config::default() });
    let result = runner.run(&arb_case(algorithm), |case| {
        serial.set(serial.get() + 1);
        run(&mut con.borrow_mut(), &sha, serial.get(), case)
    });
    if let Err(e) = result {
        panic!("{}: plain and lua differ: {e}", algorithm.as_str());
    }
}

#[test]
fn plain_fixed_window_answers_and_stores_as_the_script() {
    plain_matches_lua(Algorithm::FixedWindow);
}

#[test]
fn plain_sliding_window_answers_and_stores_as_the_script() {
    plain_matches_lua(Algorithm::SlidingWindow);
}
