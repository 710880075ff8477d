//! Rust and Lua agree from a state no charge of this version leaves: a GCRA TAT far past
//! `now + tolerance + unit`, window counts far past the limit — what an uncapped overdraft
//! of an earlier version stored (issue 37, hole 4), or a limit lowered by a reload. Both
//! sides plant the same state (Redis as the scripts store it), then run a random sequence
//! with huge overdraws among the charges; an overdraw there must cap the debt the same way.

use std::cell::{Cell, RefCell};

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use tollgate::algorithm::{Algorithm, Params, State, MAX_VALUE};

use super::redis_support::RedisServer;
use super::{arb_case, load, run_case_from, Kept};

/// What an earlier version may have left, relative to the start instant: a TAT `ahead` µs
/// ahead (with a remainder), or window counts in this window or the one before.
#[derive(Debug, Clone, Copy)]
enum Seed {
    Tat { ahead: u64, rem: u64 },
    Window { back: bool, current: u64, previous: u64 },
}

/// A seed of the shape `algorithm` stores.
fn arb_seed(algorithm: Algorithm) -> BoxedStrategy<Seed> {
    if algorithm == Algorithm::Gcra {
        return (1u64..(1 << 50), any::<u64>()).prop_map(|(ahead, rem)| Seed::Tat { ahead, rem }).boxed();
    }
    let count = prop_oneof![Just(1_000_000_000_000u64), 1u64..1_000, (1u64 << 20)..(1 << 53)];
    (any::<bool>(), count.clone(), count)
        .prop_map(|(back, current, previous)| Seed::Window { back, current, previous })
        .boxed()
}

/// Puts `seed` under `key` at `now` as the scripts store state, and returns it as Rust
/// keeps it.
fn plant(
    con: &mut redis::Connection,
    key: &str,
    p: &Params,
    seed: Seed,
    now: u64,
) -> Result<Kept, TestCaseError> {
    let fail = |e: redis::RedisError| TestCaseError::fail(format!("planting {key}: {e}"));
    let unit = p.unit_us.clamp(1, MAX_VALUE);
    let (state, expires_at) = match seed {
        Seed::Tat { ahead, rem } => {
            let tat = now.saturating_add(ahead).min(MAX_VALUE);
            let rem = if tat == MAX_VALUE { 0 } else { rem % p.limit.clamp(1, MAX_VALUE) };
            let value = if rem > 0 { format!("{tat}:{rem}") } else { tat.to_string() };
            let expires_at = tat + u64::from(rem > 0);
            let at = expires_at.min(MAX_VALUE).div_ceil(1000);
            redis::cmd("SET").arg(key).arg(value).arg("PXAT").arg(at).query::<()>(con).map_err(fail)?;
            (State::Gcra { tat, rem, until: 0 }, expires_at)
        }
        Seed::Window { back, current, previous } => {
            let ws = now - now % unit;
            let start = if back { ws.saturating_sub(unit) } else { ws };
            let sliding = p.algorithm == Algorithm::SlidingWindow;
            let previous = if sliding { previous } else { 0 };
            let expires_at = start.saturating_add(if sliding { 2 * unit } else { unit });
            redis::cmd("HSET")
                .arg(key)
                .arg(&[("s", start), ("c", current), ("p", previous)])
                .query::<()>(con)
                .map_err(fail)?;
            let at = expires_at.min(MAX_VALUE).div_ceil(1000).max(1);
            redis::cmd("PEXPIREAT").arg(key).arg(at).query::<()>(con).map_err(fail)?;
            (State::Window { start, current, previous, until: 0 }, expires_at)
        }
    };
    Ok(Some((state, expires_at)))
}

fn legacy(algorithm: Algorithm, cases: u32) {
    let server = RedisServer::start();
    let con = RefCell::new(server.client());
    let sha = load(&mut con.borrow_mut(), algorithm);
    let serial = Cell::new(0u64);
    let cases = std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(cases);
    let mut runner = TestRunner::new(Config { cases, failure_persistence: None, ..Config::default() });
    let result = runner.run(&(arb_seed(algorithm), arb_case(algorithm)), |(seed, case)| {
        serial.set(serial.get() + 1);
        let key = format!("diff:legacy:{}:{}", algorithm.as_str(), serial.get());
        let p = case.0;
        run_case_from(&mut con.borrow_mut(), &sha, &key, |con, now| plant(con, &key, &p, seed, now), case)
    });
    if let Err(e) = result {
        panic!("{} differs from its Lua script from a legacy state: {e}", algorithm.as_str());
    }
}

#[test]
fn gcra_rust_and_lua_agree_from_a_legacy_debt() {
    legacy(Algorithm::Gcra, 200);
}

#[test]
fn sliding_window_rust_and_lua_agree_from_a_legacy_debt() {
    legacy(Algorithm::SlidingWindow, 200);
}

#[test]
fn fixed_window_rust_and_lua_agree_from_a_legacy_debt() {
    legacy(Algorithm::FixedWindow, 200);
}
