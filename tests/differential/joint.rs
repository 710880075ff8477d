//! `algorithm::joint::apply` and `joint.lua` agree: random groups (1 to 4 keys, each with
//! its own algorithm and parameters; 1 to 6 members, keys repeated, consumes, peeks and
//! refunds mixed) in random sequences on the fake clock, against a real redis-server. Every
//! step compares every member's reply, and every key Rust holds state for must hold the
//! same state in Redis.
//!
//! `each` does the same for coalesced batches (`algorithm::joint::apply_each`, `joint.lua`
//! with its `each` argument): independent charges, mostly on one key, where a denial vetoes
//! nothing.

use std::cell::{Cell, RefCell};

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use tollgate::algorithm::joint::{apply, apply_each, Member};
use tollgate::algorithm::{Algorithm, Hits, Params, State, Write, MAX_VALUE};
use tollgate::store::scripts::JOINT_LUA;

use super::redis_support::RedisServer;
use super::{arb_hits, arb_params, arb_penalty, arb_tick, as_i64, real_now_us, Tick, DAY_US};

type Case = (Vec<Params>, u64, Vec<(Tick, Vec<(usize, Hits)>)>);

pub(crate) fn arb_algorithm() -> impl Strategy<Value = Algorithm> {
    prop_oneof![Just(Algorithm::Gcra), Just(Algorithm::SlidingWindow), Just(Algorithm::FixedWindow)]
}

/// Limits and bursts below `below` over a second, a minute or a day, with a penalty half of
/// the time: small enough that charges get denied.
pub(crate) fn arb_small_params(below: u64) -> impl Strategy<Value = Params> {
    let unit = prop::sample::select(vec![1_000_000u64, 60_000_000, DAY_US]);
    (arb_algorithm(), 0..below, unit, 0..below, arb_penalty()).prop_map(
        |(algorithm, limit, unit_us, burst, penalty_us)| Params {
            algorithm,
            limit,
            unit_us,
            burst,
            penalty_us,
            period: None,
        },
    )
}

/// Keys with their parameters (small limits half of the time, so groups get denied),
/// then steps: a tick and a group of members (key index, hits).
fn arb_joint_case() -> impl Strategy<Value = Case> {
    let small = arb_small_params(6);
    let params = prop_oneof![1 => small, 1 => arb_algorithm().prop_flat_map(arb_params)];
    let member = (0usize..4, arb_hits());
    let steps = prop::collection::vec((arb_tick(), prop::collection::vec(member, 1..7)), 1..40);
    (prop::collection::vec(params, 1..5), 0..DAY_US, steps)
}

/// As [`arb_joint_case`], for coalesced batches: one key (two now and then), 1 to 12
/// members, small limits most of the time so that members get denied mid-batch.
fn arb_each_case() -> impl Strategy<Value = Case> {
    let small = arb_small_params(8);
    let params = prop_oneof![3 => small, 1 => arb_algorithm().prop_flat_map(arb_params)];
    let member = (prop_oneof![4 => Just(0usize), 1 => Just(1usize)], arb_hits());
    let steps = prop::collection::vec((arb_tick(), prop::collection::vec(member, 1..13)), 1..30);
    (prop::collection::vec(params, 1..3), 0..DAY_US, steps)
}

fn eval_joint(
    con: &mut redis::Connection,
    sha: &str,
    keys: &[String],
    members: &[Member],
    now: u64,
    each: bool,
) -> redis::RedisResult<Vec<Vec<i64>>> {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(sha).arg(keys.len());
    for key in keys {
        cmd.arg(key);
    }
    cmd.arg(members.len());
    for m in members {
        let (mode, n) = match m.hits {
            Hits::Consume(n) => (0, n),
            Hits::Peek => (1, 0),
            Hits::Refund(n) => (2, n),
            Hits::Overdraw(n) => (3, n),
        };
        let p = &m.params;
        cmd.arg(m.key + 1)
            .arg(p.algorithm.as_str())
            .arg(p.limit)
            .arg(p.unit_us)
            .arg(p.burst)
            .arg(mode)
            .arg(n)
            .arg(p.penalty_us);
    }
    cmd.arg(now);
    if each {
        cmd.arg("1");
    }
    cmd.query(con)
}

/// What Redis must hold for a Rust state.
pub(crate) fn stored_in_redis(
    con: &mut redis::Connection,
    key: &str,
    state: State,
) -> Result<(), TestCaseError> {
    let fail = |e: redis::RedisError| TestCaseError::fail(format!("reading {key}: {e}"));
    match state {
        State::Gcra { tat, rem, until } => {
            let value: Option<String> = redis::cmd("GET").arg(key).query(con).map_err(fail)?;
            let expected = match (rem, until) {
                (_, 1..) => format!("{tat}:{rem}:{until}"),
                (0, 0) => tat.to_string(),
                _ => format!("{tat}:{rem}"),
            };
            prop_assert_eq!(value, Some(expected), "{}", key);
        }
        State::Window { start, current, previous, until } => {
            let value: Vec<Option<u64>> =
                redis::cmd("HMGET").arg(key).arg(&["s", "c", "p", "u"]).query(con).map_err(fail)?;
            let until = (until > 0).then_some(until);
            prop_assert_eq!(value, vec![Some(start), Some(current), Some(previous), until], "{}", key);
        }
    }
    Ok(())
}

fn run_joint_case(
    con: &mut redis::Connection,
    sha: &str,
    serial: u64,
    (keys, offset, steps): Case,
    each: bool,
) -> Result<(), TestCaseError> {
    let names: Vec<String> = (0..keys.len()).map(|k| format!("diff:joint:{serial}:{k}")).collect();
    let mut stored: Vec<Option<(State, u64)>> = vec![None; keys.len()];
    let mut now = real_now_us() + 365 * DAY_US + offset;
    for (step, (tick, picks)) in steps.into_iter().enumerate() {
        now = now.saturating_add(tick.resolve(now, keys[0].unit_us)).min(MAX_VALUE);
        // Only the keys this group uses, numbered by first use (as the store sends them).
        let mut used: Vec<usize> = Vec::new();
        let members: Vec<Member> = picks
            .iter()
            .map(|&(k, hits)| {
                let k = k % keys.len();
                let key = used.iter().position(|&u| u == k).unwrap_or_else(|| {
                    used.push(k);
                    used.len() - 1
                });
                Member { key, params: keys[k], hits }
            })
            .collect();
        // As the memory store: state past its expiry is no state.
        let states: Vec<Option<State>> =
            used.iter().map(|&k| stored[k].filter(|&(_, exp)| exp > now).map(|(s, _)| s)).collect();
        let joint = if each { apply_each(&states, now, &members) } else { apply(&states, now, &members) };
        for w in joint.writes.iter().flatten().chain(&joint.marks) {
            stored[used[w.key]] = match w.write {
                Write::Put { state, expires_at } => Some((state, expires_at)),
                Write::Delete => None,
                Write::Keep => stored[used[w.key]],
            };
        }
        let rust: Vec<Vec<i64>> = joint
            .decisions
            .iter()
            .map(|d| vec![i64::from(d.allowed), as_i64(d.remaining), as_i64(d.reset_us)])
            .collect();
        let group_keys: Vec<String> = used.iter().map(|&k| names[k].clone()).collect();
        let lua = eval_joint(con, sha, &group_keys, &members, now, each)
            .map_err(|e| TestCaseError::fail(format!("step {step}: joint.lua failed: {e}")))?;
        prop_assert_eq!(
            &rust,
            &lua,
            "step {} at now={} members={:?} states={:?}",
            step,
            now,
            members,
            states
        );
        for (k, state) in stored.iter().enumerate() {
            if let Some((state, _)) = state {
                stored_in_redis(con, &names[k], *state)?;
            }
        }
    }
    Ok(())
}

/// Runs `PROPTEST_CASES` (default 400) sequences from `strategy` against one fresh
/// redis-server with `script` loaded: `case(connection, sha, serial, case)` each, the serial
/// numbering its keys apart. Panics with `what` on the first difference.
pub(crate) fn run_against<S: Strategy>(
    script: &str,
    strategy: S,
    what: &str,
    case: impl Fn(&mut redis::Connection, &str, u64, S::Value) -> Result<(), TestCaseError>,
) {
    let server = RedisServer::start();
    let con = RefCell::new(server.client());
    let sha: String =
        redis::cmd("SCRIPT").arg("LOAD").arg(script).query(&mut *con.borrow_mut()).expect("the script loads");
    let serial = Cell::new(0u64);
    let cases = std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(400);
    let mut runner = TestRunner::new(Config { cases, failure_persistence: None, ..Config::default() });
    let result = runner.run(&strategy, |value| {
        serial.set(serial.get() + 1);
        case(&mut con.borrow_mut(), &sha, serial.get(), value)
    });
    if let Err(e) = result {
        panic!("{what}: {e}");
    }
}

#[test]
fn joint_rust_and_lua_agree() {
    run_against(
        JOINT_LUA,
        arb_joint_case(),
        "algorithm::joint differs from joint.lua",
        |con, sha, serial, case| run_joint_case(con, sha, serial, case, false),
    );
}

#[test]
fn each_rust_and_lua_agree() {
    run_against(
        JOINT_LUA,
        arb_each_case(),
        "algorithm::joint::apply_each differs from joint.lua's each mode",
        |con, sha, serial, case| run_joint_case(con, sha, serial, case, true),
    );
}

/// On the server's own clock (as in production): a group of two keys, one with room for 5,
/// one for 2 per day, charged together: the third group is denied and charges neither.
#[test]
fn joint_on_the_server_clock_charges_all_or_nothing() {
    let server = RedisServer::start();
    let mut con = server.client();
    let sha: String = redis::cmd("SCRIPT").arg("LOAD").arg(JOINT_LUA).query(&mut con).expect("loads");
    let wide = Params {
        algorithm: Algorithm::Gcra,
        limit: 5,
        unit_us: DAY_US,
        burst: 5,
        penalty_us: 0,
        period: None,
    };
    let narrow = Params {
        algorithm: Algorithm::FixedWindow,
        limit: 2,
        unit_us: DAY_US,
        burst: 0,
        penalty_us: 0,
        period: None,
    };
    let members = [
        Member { key: 0, params: wide, hits: Hits::Consume(1) },
        Member { key: 1, params: narrow, hits: Hits::Consume(1) },
    ];
    let keys = ["clock:wide".to_string(), "clock:narrow".to_string()];
    let run = |con: &mut redis::Connection| -> Vec<Vec<i64>> {
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(&sha).arg(2).arg(&keys[0]).arg(&keys[1]).arg(2);
        for m in &members {
            let p = m.params;
            cmd.arg(m.key + 1)
                .arg(p.algorithm.as_str())
                .arg(p.limit)
                .arg(p.unit_us)
                .arg(p.burst)
                .arg(0)
                .arg(1)
                .arg(p.penalty_us);
        }
        cmd.query(con).expect("joint call")
    };
    assert_eq!(run(&mut con)[0][..2], [1, 4]);
    assert_eq!(run(&mut con)[1][..2], [1, 0]);
    let denied = run(&mut con);
    assert_eq!((denied[0][0], denied[0][1], denied[1][0]), (1, 3, 0), "{denied:?}");
    let value: String = redis::cmd("GET").arg(&keys[0]).query(&mut con).expect("get");
    let again = run(&mut con);
    let after: String = redis::cmd("GET").arg(&keys[0]).query(&mut con).expect("get");
    assert_eq!((value, again[0][1]), (after, 3), "the denied groups wrote nothing");
    let bad: redis::RedisResult<Vec<Vec<i64>>> = redis::cmd("EVALSHA")
        .arg(&sha)
        .arg(1)
        .arg("k")
        .arg(&["1", "1", "gcra", "5", "1", "5", "4", "1", "0"])
        .query(&mut con);
    assert!(bad.expect_err("mode 4").to_string().contains("mode"));
}
