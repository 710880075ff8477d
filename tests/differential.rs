//! Rust and Lua agree: every algorithm in `tollgate::algorithm` and its script in
//! `src/store/lua/` give identical `(allowed, remaining, reset_us)` on random sequences,
//! run against a real redis-server (started per test, on a free port).
//!
//! GCRA also runs a high-rate suite (100,000 to 10,000,000 per second, µs-scale ticks),
//! where the emission interval is a fraction of a µs and the stored remainder decides, and
//! its stored `"<tat>[:<rem>]"` must equal the Rust state after every step.
//!
//! `joint` does the same for groups charged together (`algorithm::joint`, `joint.lua`), and
//! for coalesced batches of independent charges (`apply_each`, `joint.lua`'s `each` mode).
//!
//! The scripts get the fake clock through ARGV[6] (`joint.lua`: after its members). Redis expires keys on its real clock,
//! so the fake clock starts a year ahead of real time and only moves forward: no key ever
//! expires in Redis during a test, and the scripts must (and do) read stale state as
//! absent, while the Rust side drops state at `expires_at` as the memory store does.

#[allow(dead_code)]
#[path = "support/redis.rs"]
mod redis_support;

#[path = "differential/joint.rs"]
mod joint;

#[path = "differential/batch.rs"]
mod batch;

#[path = "differential/legacy.rs"]
mod legacy;

#[path = "differential/junk.rs"]
mod junk;

#[path = "differential/calendar.rs"]
mod calendar;
#[path = "differential/reserve.rs"]
mod reserve;

#[path = "differential/plain.rs"]
mod plain;

use std::cell::{Cell, RefCell};
use std::time::{SystemTime, UNIX_EPOCH};

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use redis_support::RedisServer;
use tollgate::algorithm::{apply, Algorithm, Hits, Params, State, Write, MAX_VALUE};

// The bodies exactly as the stores send them (prelude, algorithm functions, entry).
use tollgate::store::scripts::{FIXED_LUA, GCRA_LUA, SLIDING_LUA};

const DAY_US: u64 = 86_400_000_000;

fn script(algorithm: Algorithm) -> &'static str {
    match algorithm {
        Algorithm::Gcra => GCRA_LUA,
        Algorithm::SlidingWindow => SLIDING_LUA,
        Algorithm::FixedWindow => FIXED_LUA,
    }
}

/// SCRIPT LOAD, as the store does; calls then go through EVALSHA.
fn load(con: &mut redis::Connection, algorithm: Algorithm) -> String {
    redis::cmd("SCRIPT").arg("LOAD").arg(script(algorithm)).query(con).expect("script loads")
}

/// One EVALSHA with the documented ARGV; `now` = None uses the server's TIME.
fn eval(
    con: &mut redis::Connection,
    sha: &str,
    key: &str,
    p: &Params,
    hits: Hits,
    now: Option<u64>,
) -> redis::RedisResult<Vec<i64>> {
    let (mode, n) = match hits {
        Hits::Consume(n) => (0, n),
        Hits::Peek => (1, 0),
        Hits::Refund(n) => (2, n),
        Hits::Overdraw(n) => (3, n),
    };
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(sha).arg(1).arg(key);
    cmd.arg(p.limit).arg(p.unit_us).arg(p.burst).arg(mode).arg(n);
    match now {
        Some(now) => cmd.arg(now),
        None => cmd.arg(""),
    };
    // As the store: the penalty only for a limit that has one (the argument is optional).
    if p.penalty_us > 0 {
        cmd.arg(p.penalty_us);
    }
    cmd.query(con)
}

fn real_now_us() -> u64 {
    let since = SystemTime::now().duration_since(UNIX_EPOCH);
    u64::try_from(since.expect("clock after 1970").as_micros()).expect("fits u64")
}

/// How far the fake clock moves before a step; resolved against `now` and the unit so
/// that window boundaries are hit exactly and just missed.
#[derive(Debug, Clone, Copy)]
enum Tick {
    Stay,
    Micros(u64),
    /// `unit * permille / 1000`.
    Share(u64),
    /// To the next window boundary, plus `offset - 2` µs.
    Boundary(u64),
    Jump(u64),
}

impl Tick {
    fn resolve(self, now: u64, unit: u64) -> u64 {
        let unit = unit.max(1);
        match self {
            Tick::Stay => 0,
            Tick::Micros(us) => us,
            Tick::Share(permille) => {
                u64::try_from(u128::from(unit) * u128::from(permille) / 1000).unwrap_or(u64::MAX)
            }
            Tick::Boundary(offset) => (unit - now % unit).saturating_add(offset).saturating_sub(2),
            Tick::Jump(us) => us,
        }
    }
}

fn arb_tick() -> impl Strategy<Value = Tick> {
    prop_oneof![
        4 => Just(Tick::Stay),
        4 => (1u64..1_000).prop_map(Tick::Micros),
        4 => (0u64..1_500).prop_map(Tick::Share),
        3 => (0u64..5).prop_map(Tick::Boundary),
        1 => (0u64..(1 << 45)).prop_map(Tick::Jump),
    ]
}

/// Mostly realistic numbers, with a tail of extreme ones (the clamps must agree too).
fn arb_count() -> impl Strategy<Value = u64> {
    prop_oneof![
        1 => Just(0u64),
        8 => 1u64..12,
        4 => 1u64..1_000,
        2 => 1u64..(1 << 32),
        1 => any::<u64>(),
    ]
}

fn arb_unit() -> impl Strategy<Value = u64> {
    let named = vec![1u64, 7, 1_000, 1_000_000, 60_000_000, 3_600_000_000, DAY_US, 30 * DAY_US, 365 * DAY_US];
    prop_oneof![
        8 => prop::sample::select(named),
        2 => 1u64..10_000_000,
        1 => any::<u64>(),
    ]
}

/// No penalty half of the time; else a penalty shorter and longer than the units, now and
/// then an extreme one.
pub(crate) fn arb_penalty() -> impl Strategy<Value = u64> {
    let named = vec![1u64, 999, 1_000_000, 60_000_000, 3_600_000_000, DAY_US];
    prop_oneof![
        6 => Just(0u64),
        5 => prop::sample::select(named),
        1 => any::<u64>(),
    ]
}

fn arb_params(algorithm: Algorithm) -> impl Strategy<Value = Params> {
    (arb_count(), arb_unit(), arb_count(), arb_penalty()).prop_map(
        move |(limit, unit_us, burst, penalty_us)| Params {
            algorithm,
            limit,
            unit_us,
            burst,
            penalty_us,
            period: None,
        },
    )
}

fn arb_hits() -> impl Strategy<Value = Hits> {
    let n = prop_oneof![8 => 1u64..6, 2 => arb_count()];
    prop_oneof![
        6 => n.clone().prop_map(Hits::Consume),
        2 => Just(Hits::Peek),
        1 => n.clone().prop_map(Hits::Refund),
        1 => Just(Hits::Consume(0)),
        2 => n.prop_map(Hits::Overdraw),
        1 => arb_huge().prop_map(Hits::Overdraw),
    ]
}

/// A reported usage far past any limit (an LLM's 10^12 tokens, a garbled report): the
/// overdraft's cap at one unit of debt must be the same on both sides.
fn arb_huge() -> impl Strategy<Value = u64> {
    prop_oneof![Just(1_000_000_000_000u64), (1u64 << 32)..(1 << 53), Just(MAX_VALUE), Just(u64::MAX),]
}

/// A random sequence (parameters, start offset, steps) for one bucket.
fn arb_case(algorithm: Algorithm) -> impl Strategy<Value = (Params, u64, Vec<(Tick, Hits)>)> {
    (arb_params(algorithm), 0..DAY_US, prop::collection::vec((arb_tick(), arb_hits()), 1..90))
}

/// GCRA at 100,000 to 10,000,000 per second (per minute now and then), bursts from 1 to
/// the limit, ticks of a few µs: emission intervals of 0.1 to 10 µs, rarely whole.
fn arb_high_rate_case() -> impl Strategy<Value = (Params, u64, Vec<(Tick, Hits)>)> {
    let params = (100_000u64..=10_000_000, prop::sample::select(vec![1_000_000u64, 60_000_000]))
        .prop_flat_map(|(limit, unit_us)| {
            let burst = prop_oneof![3 => 0u64..20, 1 => 0..=limit];
            burst.prop_map(move |burst| Params {
                algorithm: Algorithm::Gcra,
                limit,
                unit_us,
                burst,
                penalty_us: 0,
                period: None,
            })
        });
    let tick = prop_oneof![
        3 => Just(Tick::Stay),
        6 => (1u64..5).prop_map(Tick::Micros),
        2 => (1u64..1_000).prop_map(Tick::Micros),
        1 => (0u64..1_500).prop_map(Tick::Share),
    ];
    let n = prop_oneof![4 => 1u64..6, 1 => 1u64..500];
    let hits = prop_oneof![
        6 => n.clone().prop_map(Hits::Consume),
        2 => Just(Hits::Peek),
        1 => n.clone().prop_map(Hits::Refund),
        1 => n.prop_map(Hits::Overdraw),
        1 => arb_huge().prop_map(Hits::Overdraw),
    ];
    (params, 0..DAY_US, prop::collection::vec((tick, hits), 1..150))
}

/// A state as both sides keep it: the state and when it expires (µs).
type Kept = Option<(State, u64)>;

/// Runs one sequence through `apply` (keeping state like the memory store) and the
/// script (on its own key) and requires identical answers at every step.
fn run_case(
    con: &mut redis::Connection,
    sha: &str,
    key: &str,
    case: (Params, u64, Vec<(Tick, Hits)>),
) -> Result<(), TestCaseError> {
    run_case_from(con, sha, key, |_, _| Ok(None), case)
}

/// As [`run_case`], from the state `plant` put under `key` at the start instant (and
/// returns, as Rust keeps it).
fn run_case_from(
    con: &mut redis::Connection,
    sha: &str,
    key: &str,
    plant: impl FnOnce(&mut redis::Connection, u64) -> Result<Kept, TestCaseError>,
    (p, offset, steps): (Params, u64, Vec<(Tick, Hits)>),
) -> Result<(), TestCaseError> {
    let mut now = real_now_us() + 365 * DAY_US + offset;
    let mut stored = plant(con, now)?;
    for (i, (tick, hits)) in steps.into_iter().enumerate() {
        // Beyond MAX_VALUE (the year 2255) time stands still on both sides.
        now = now.saturating_add(tick.resolve(now, p.unit_us)).min(MAX_VALUE);
        if stored.is_some_and(|(_, expires_at)| now >= expires_at) {
            stored = None;
        }
        let out = apply(stored.map(|(s, _)| s), now, &p, hits);
        match out.write {
            Write::Keep => {}
            Write::Delete => stored = None,
            Write::Put { state, expires_at } => stored = Some((state, expires_at)),
        }
        let d = out.decision;
        let rust = vec![i64::from(d.allowed), as_i64(d.remaining), as_i64(d.reset_us)];
        let lua = eval(con, sha, key, &p, hits, Some(now))
            .map_err(|e| TestCaseError::fail(format!("step {i}: script failed: {e}")))?;
        prop_assert_eq!(
            &rust,
            &lua,
            "step {} at now={} hits={:?}; rust state after: {:?}",
            i,
            now,
            hits,
            stored
        );
        // What is stored, and when it expires, is Rust's too (not only the replies): a
        // script that skips a write it may skip (a window's start and expiry unchanged)
        // must leave exactly what a full write would have.
        let fail =
            |what: &str, e: redis::RedisError| TestCaseError::fail(format!("step {i}: {what} failed: {e}"));
        if let Some((state, _)) = stored {
            joint::stored_in_redis(con, key, state)?;
        }
        if let Some((_, expires_at)) = stored {
            let at: i64 =
                redis::cmd("PEXPIRETIME").arg(key).query(con).map_err(|e| fail("PEXPIRETIME", e))?;
            // The scripts saturate the expiry at MAX_VALUE (the year 2255); Rust's may pass it.
            let expected = expires_at.min(MAX_VALUE).div_ceil(1000).max(1);
            prop_assert_eq!(at, as_i64(expected), "step {} expiry (ms) of {}", i, expires_at);
        }
    }
    Ok(())
}

fn as_i64(x: u64) -> i64 {
    i64::try_from(x).unwrap_or(i64::MAX)
}

/// Runs `cases` random sequences of `algorithm` against one fresh redis-server.
fn differential(algorithm: Algorithm, cases: u32) {
    differential_on(algorithm, arb_case(algorithm), cases);
}

/// Runs `cases` sequences drawn from `strategy` through `algorithm` on both sides.
fn differential_on(
    algorithm: Algorithm,
    strategy: impl Strategy<Value = (Params, u64, Vec<(Tick, Hits)>)>,
    cases: u32,
) {
    let server = RedisServer::start();
    let con = RefCell::new(server.client());
    let sha = load(&mut con.borrow_mut(), algorithm);
    let serial = Cell::new(0u64);
    // PROPTEST_CASES=5000 for a deeper run.
    let cases = std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(cases);
    let mut runner = TestRunner::new(Config { cases, failure_persistence: None, ..Config::default() });
    let result = runner.run(&strategy, |case| {
        serial.set(serial.get() + 1);
        let key = format!("diff:{}:{}", algorithm.as_str(), serial.get());
        run_case(&mut con.borrow_mut(), &sha, &key, case)
    });
    if let Err(e) = result {
        panic!("{} differs from its Lua script: {e}", algorithm.as_str());
    }
}

#[test]
fn gcra_rust_and_lua_agree() {
    differential(Algorithm::Gcra, 300);
}

#[test]
fn gcra_rust_and_lua_agree_at_high_rates() {
    differential_on(Algorithm::Gcra, arb_high_rate_case(), 300);
}

#[test]
fn sliding_window_rust_and_lua_agree() {
    differential(Algorithm::SlidingWindow, 300);
}

#[test]
fn fixed_window_rust_and_lua_agree() {
    differential(Algorithm::FixedWindow, 300);
}

/// With the server's own clock (no ARGV[6], as in production): limit 5 per day, so no
/// window edge or leak can land inside the few milliseconds the test takes.
#[test]
fn scripts_on_the_server_clock_admit_exactly_the_burst() {
    let server = RedisServer::start();
    let mut con = server.client();
    let cases = [
        (Algorithm::Gcra, 3, 3),
        (Algorithm::Gcra, 5, 5),
        (Algorithm::SlidingWindow, 0, 5),
        (Algorithm::FixedWindow, 0, 5),
    ];
    for (algorithm, burst, expected) in cases {
        let sha = load(&mut con, algorithm);
        let key = format!("clock:{}:{burst}", algorithm.as_str());
        let p = Params { algorithm, limit: 5, unit_us: DAY_US, burst, penalty_us: 0, period: None };
        let allowed: Vec<i64> = (0..6)
            .map(|_| eval(&mut con, &sha, &key, &p, Hits::Consume(1), None).expect("eval")[0])
            .collect();
        let admitted = allowed.iter().sum::<i64>();
        assert_eq!(admitted, expected, "{}: {allowed:?}", algorithm.as_str());
        assert_eq!(allowed[usize::try_from(expected).expect("small")], 0);
        let ttl: i64 = redis::cmd("PTTL").arg(&key).query(&mut con).expect("pttl");
        let window_ms = i64::try_from(2 * DAY_US / 1000).expect("small");
        assert!(ttl > 0 && ttl <= window_ms, "{}: PTTL {ttl}", algorithm.as_str());
        let peek = eval(&mut con, &sha, &key, &p, Hits::Peek, None).expect("peek");
        assert_eq!(peek[0], 0, "{}: a full bucket peeks as denied", algorithm.as_str());
    }
}

#[test]
fn scripts_reject_an_unknown_mode() {
    let server = RedisServer::start();
    let mut con = server.client();
    for algorithm in [Algorithm::Gcra, Algorithm::SlidingWindow, Algorithm::FixedWindow] {
        let sha = load(&mut con, algorithm);
        let reply: redis::RedisResult<Vec<i64>> =
            redis::cmd("EVALSHA").arg(&sha).arg(1).arg("k").arg(&[5u64, 1_000_000, 5, 4, 1]).query(&mut con);
        let err = reply.expect_err("mode 4 is an error");
        assert!(err.to_string().contains("mode"), "{err}");
    }
}
