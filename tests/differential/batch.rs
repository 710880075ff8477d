//! `batch.lua` (several requests' groups in one call, `store::redis::batch`) and Rust agree:
//! random calls of 1 to 6 groups, each joint (`algorithm::joint::apply`) or independent
//! (`apply_each`), over 1 to 5 keys shared between the groups, in random sequences on the
//! fake clock. Rust decides the groups one after the other at the call's instant, as if each
//! were its own call; every member's reply and every key's stored state and expiry must be
//! the same. And a group that fails (a key of the wrong type) fails alone.

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use tollgate::algorithm::joint::{apply, apply_each, Member};
use tollgate::algorithm::{Algorithm, Hits, Params, State, Write, MAX_VALUE};
use tollgate::store::scripts::{parse_batch, BATCH_LUA};

use super::joint::{arb_algorithm, arb_small_params, run_against, stored_in_redis};
use super::redis_support::RedisServer;
use super::{arb_hits, arb_params, arb_tick, as_i64, real_now_us, Tick, DAY_US};

/// A group: joint (all or nothing) or independent, and its members (key index, hits).
type Group = (bool, Vec<(usize, Hits)>);
type Case = (Vec<Params>, u64, Vec<(Tick, Vec<Group>)>);

fn arb_batch_case() -> impl Strategy<Value = Case> {
    let small = arb_small_params(6);
    let params = prop_oneof![2 => small, 1 => arb_algorithm().prop_flat_map(arb_params)];
    let group = (any::<bool>(), prop::collection::vec((0usize..5, arb_hits()), 1..5));
    let steps = prop::collection::vec((arb_tick(), prop::collection::vec(group, 1..7)), 1..25);
    (prop::collection::vec(params, 1..6), 0..DAY_US, steps)
}

/// One `batch.lua` call: the keys by first use, the test clock, then each group.
fn eval_batch(
    con: &mut redis::Connection,
    sha: &str,
    keys: &[String],
    groups: &[(bool, Vec<Member>)],
    now: u64,
) -> redis::RedisResult<redis::Value> {
    batch_cmd(sha, keys, groups, now).query(con)
}

/// The reply as the store reads it (`send_packed_commands`): a member's error stays an
/// entry of the array, instead of failing the whole reply as `query` makes it.
pub(crate) fn eval_raw(con: &mut redis::Connection, cmd: redis::Cmd) -> redis::Value {
    use redis::ConnectionLike;
    let mut values =
        con.req_packed_commands(&cmd.get_packed_command(), 0, 1).expect("the call itself succeeds");
    values.pop().expect("one reply")
}

pub(crate) fn batch_cmd(sha: &str, keys: &[String], groups: &[(bool, Vec<Member>)], now: u64) -> redis::Cmd {
    // The rules once each, by first use, as the store sends them.
    let mut rules: Vec<Params> = Vec::new();
    for m in groups.iter().flat_map(|(_, members)| members) {
        if !rules.contains(&m.params) {
            rules.push(m.params);
        }
    }
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(sha).arg(keys.len());
    for key in keys {
        cmd.arg(key);
    }
    cmd.arg(now).arg(rules.len());
    for p in &rules {
        cmd.arg(p.algorithm.as_str()).arg(p.limit).arg(p.unit_us).arg(p.burst).arg(p.penalty_us);
    }
    for (joint, members) in groups {
        cmd.arg(if *joint { "j" } else { "e" }).arg(members.len());
        for m in members {
            let (mode, n) = match m.hits {
                Hits::Consume(n) => (0, n),
                Hits::Peek => (1, 0),
                Hits::Refund(n) => (2, n),
                Hits::Overdraw(n) => (3, n),
            };
            let rule = rules.iter().position(|r| *r == m.params).expect("listed") + 1;
            cmd.arg(m.key + 1).arg(rule).arg(mode).arg(n);
        }
    }
    cmd
}

fn run_batch_case(
    con: &mut redis::Connection,
    sha: &str,
    serial: u64,
    (keys, offset, steps): Case,
) -> Result<(), TestCaseError> {
    let names: Vec<String> = (0..keys.len()).map(|k| format!("diff:batch:{serial}:{k}")).collect();
    let mut stored: Vec<Option<(State, u64)>> = vec![None; keys.len()];
    let mut now = real_now_us() + 365 * DAY_US + offset;
    for (step, (tick, groups)) in steps.into_iter().enumerate() {
        now = now.saturating_add(tick.resolve(now, keys[0].unit_us)).min(MAX_VALUE);
        // The call's keys by first use (as the store numbers them); each group's members
        // point into them.
        let mut used: Vec<usize> = Vec::new();
        let mut call: Vec<(bool, Vec<Member>)> = Vec::new();
        let mut rust: Vec<Vec<i64>> = Vec::new();
        for (joint, picks) in &groups {
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
            // Rust: this group alone, over the states the groups before it left.
            let states: Vec<Option<State>> =
                used.iter().map(|&k| stored[k].filter(|&(_, exp)| exp > now).map(|(s, _)| s)).collect();
            let decided =
                if *joint { apply(&states, now, &members) } else { apply_each(&states, now, &members) };
            for w in decided.writes.iter().flatten().chain(&decided.marks) {
                stored[used[w.key]] = match w.write {
                    Write::Put { state, expires_at } => Some((state, expires_at)),
                    Write::Delete => None,
                    Write::Keep => stored[used[w.key]],
                };
            }
            rust.extend(
                decided
                    .decisions
                    .iter()
                    .map(|d| vec![i64::from(d.allowed), as_i64(d.remaining), as_i64(d.reset_us)]),
            );
            call.push((*joint, members));
        }
        let call_keys: Vec<String> = used.iter().map(|&k| names[k].clone()).collect();
        let reply = eval_batch(con, sha, &call_keys, &call, now)
            .map_err(|e| TestCaseError::fail(format!("step {step}: batch.lua failed: {e}")))?;
        let flat: Vec<i64> = redis::from_redis_value(reply.clone())
            .map_err(|e| TestCaseError::fail(format!("step {step}: reply {reply:?}: {e}")))?;
        let lua: Vec<Vec<i64>> = flat.chunks(3).map(<[i64]>::to_vec).collect();
        prop_assert_eq!(&rust, &lua, "step {} at now={} groups={:?}", step, now, call);
        for (k, state) in stored.iter().enumerate() {
            if let Some((state, expires_at)) = state {
                stored_in_redis(con, &names[k], *state)?;
                let at: i64 = redis::cmd("PEXPIRETIME")
                    .arg(&names[k])
                    .query(con)
                    .map_err(|e| TestCaseError::fail(format!("PEXPIRETIME: {e}")))?;
                let expected = (*expires_at).min(MAX_VALUE).div_ceil(1000).max(1);
                prop_assert_eq!(at, as_i64(expected), "step {} expiry of key {}", step, k);
            }
        }
    }
    Ok(())
}

#[test]
fn batch_rust_and_lua_agree() {
    run_against(
        BATCH_LUA,
        arb_batch_case(),
        "Rust's groups one by one differ from batch.lua",
        run_batch_case,
    );
}

/// A group whose key holds something else (a list: `WRONGTYPE`), and one with a bad mode,
/// each answer an error for their own members only; the groups around them are decided and
/// written.
#[test]
fn a_failing_group_fails_alone() {
    let server = RedisServer::start();
    let mut con = server.client();
    let _: i64 = redis::cmd("RPUSH").arg("batch:list").arg("x").query(&mut con).expect("RPUSH");
    let p = Params {
        algorithm: Algorithm::Gcra,
        limit: 5,
        unit_us: DAY_US,
        burst: 5,
        penalty_us: 0,
        period: None,
    };
    let member = |key: usize| Member { key, params: p, hits: Hits::Consume(1) };
    let keys = ["batch:a".to_string(), "batch:list".to_string(), "batch:b".to_string()];
    let groups = vec![(false, vec![member(0)]), (true, vec![member(0), member(1)]), (false, vec![member(2)])];
    let sha: String = redis::cmd("SCRIPT").arg("LOAD").arg(BATCH_LUA).query(&mut con).expect("loads");
    let now = real_now_us();
    let reply = eval_raw(&mut con, batch_cmd(&sha, &keys, &groups, now));
    // Through the store's own parser: one result per member.
    let results = parse_batch(Ok(reply), 4);
    let decided = |i: usize| results[i].clone().map(|d| (d.allowed, d.remaining)).expect("decided");
    assert_eq!(decided(0), (true, 4));
    assert!(results[1].is_err() && results[2].is_err(), "the joint group's members fail: {results:?}");
    assert_eq!(decided(3), (true, 4));
    // The failed group wrote nothing: batch:a holds the first group's charge only.
    let again = eval_raw(&mut con, batch_cmd(&sha, &keys[..1], &[(false, vec![member(0)])], now));
    assert_eq!(parse_batch(Ok(again), 1)[0].clone().map(|d| d.remaining), Ok(3));

    // A bad mode (never sent by the store) is the same: that group's error.
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(&sha).arg(1).arg("batch:c").arg(now).arg(1).arg("gcra").arg(5).arg(DAY_US).arg(5).arg(0);
    cmd.arg("e").arg(1).arg(1).arg(1).arg(7).arg(1);
    cmd.arg("e").arg(1).arg(1).arg(1).arg(0).arg(1);
    let results = parse_batch(Ok(eval_raw(&mut con, cmd)), 2);
    assert!(results[0].is_err(), "{results:?}");
    assert_eq!(results[1].clone().map(|d| d.remaining), Ok(4));
}
