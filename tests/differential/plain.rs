//! `--redis-windows plain` answers as the scripts do: for one client at a time, a random
//! sequence of consumes, peeks and refunds on a fixed or sliding window gets identical
//! `(allowed, remaining, reset_us)` from the plain path (`store::redis::plain`: its
//! commands, its reading of the replies and the give-back of a denial, composed as the
//! store composes them) and from the script alone, each on its own key of one real
//! redis-server, and both buckets count the same (current and previous window) after every
//! step (the give-back run): the script's bucket in its hash alone, the plain one in its
//! window keys and the hash share its scripts wrote. Peeks and refunds keep their script
//! on both sides, so the plain side's scripts read and lower window keys (`fold` and
//! `unfold` in `lua/prelude.lua`).
//!
//! The fake clock runs a year ahead of real time (keys never expire in Redis during the
//! test): a hash from an earlier window is still there when the clock has left it, and
//! must count for nothing in the window the clock is in.

use std::cell::{Cell, RefCell};

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use redis::Value;
use tollgate::algorithm::{Algorithm, Hits, Params};
use tollgate::store::key::window_key;
use tollgate::store::redis::plain::{commands, eligible, push_commands, read, Read};
use tollgate::store::scripts::Call;
use tollgate::store::Charge;

use super::redis_support::RedisServer;
use tollgate::store::scripts::WITH_WINDOW_KEYS;

use super::{arb_tick, eval, real_now_us, Tick, DAY_US};

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

/// What the bucket `key` counts at `now`: (current window, previous window for a sliding
/// one), the hash's share (when it is in that window) plus the window keys', as the
/// scripts fold them; a missing field or key is 0.
fn counted(
    con: &mut redis::Connection,
    key: &str,
    p: &Params,
    now: u64,
) -> Result<(u64, u64), TestCaseError> {
    let fail = |e: redis::RedisError| TestCaseError::fail(format!("reading {key}: {e}"));
    let fields: Vec<Option<u64>> =
        redis::cmd("HMGET").arg(key).arg(&["s", "c", "p"]).query(con).map_err(fail)?;
    let (s, c, prev) = (fields[0], fields[1].unwrap_or(0), fields[2].unwrap_or(0));
    let unit = p.unit_us.max(1);
    let ws = now - now % unit;
    let sliding = p.algorithm == Algorithm::SlidingWindow;
    let get = |con: &mut redis::Connection, start: u64| -> Result<u64, TestCaseError> {
        let v: Option<u64> = redis::cmd("GET").arg(window_key(key, start)).query(con).map_err(fail)?;
        Ok(v.unwrap_or(0))
    };
    let mut current = get(con, ws)?;
    let mut previous = if sliding && ws >= unit { get(con, ws - unit)? } else { 0 };
    if s == Some(ws) {
        current += c;
        previous += if sliding { prev } else { 0 };
    } else if sliding && ws >= unit && s == Some(ws - unit) {
        previous += c;
    }
    Ok((current, previous))
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
    prop_assert_eq!(replies.len(), commands(charge));
    match read(charge, now, &replies) {
        Read::Decided(d, back) => {
            if let Some(back) = back {
                let _: i64 = back.command(Call::Source).query(con).map_err(fail)?;
            }
            Ok(vec![i64::from(d.allowed), d.remaining as i64, d.reset_us as i64])
        }
        Read::Stale(back) => {
            if let Some(back) = back {
                let _: i64 = back.command(Call::Source).query(con).map_err(fail)?;
            }
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
    let (lua_key, plain_key) = (format!("lua:{serial}"), format!("plain:{serial}"));
    let mut now = real_now_us() + 365 * DAY_US + offset;
    for (i, (tick, hits)) in steps.into_iter().enumerate() {
        now = now.saturating_add(tick.resolve(now, p.unit_us));
        let lua = eval(con, sha, &lua_key, &p, hits, Some(now))
            .map_err(|e| TestCaseError::fail(format!("step {i}: script failed: {e}")))?;
        let charge = Charge { key: plain_key.clone(), params: p, hits };
        let plain = plain_step(con, sha, &charge, now)?;
        prop_assert_eq!(&plain, &lua, "step {} at now={} hits={:?}", i, now, hits);
        let (l, q) = (counted(con, &lua_key, &p, now)?, counted(con, &plain_key, &p, now)?);
        prop_assert_eq!(q, l, "step {} counts (current, previous) after {:?}", i, hits);
    }
    Ok(())
}

fn plain_matches_lua(algorithm: Algorithm) {
    let server = RedisServer::start();
    let con = RefCell::new(server.client());
    // The scripts of `--redis-windows plain`: built to read window keys.
    let source = match algorithm {
        Algorithm::SlidingWindow => WITH_WINDOW_KEYS.sliding,
        _ => WITH_WINDOW_KEYS.fixed,
    };
    let sha: String =
        redis::cmd("SCRIPT").arg("LOAD").arg(source).query(&mut *con.borrow_mut()).expect("loads");
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
