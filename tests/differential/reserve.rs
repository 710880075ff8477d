//! `algorithm::reservation::apply` (with its `Book` of records) and `reserve.lua` agree:
//! random sequences of calls naming a few reservations over a group of 1 to 3 limits
//! (keys repeated, every algorithm, small limits half of the time so that reservations
//! are refused and overruns pass the limit), estimates above and below the usage, zero
//! hits, refunds, ticks across window edges and past the ttl — against a real
//! redis-server. Every step compares every member's reply, the phase and the count of
//! reservations found expired unsettled; every bucket Rust holds must hold the same state in
//! Redis.

use std::cell::RefCell;

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use tollgate::algorithm::joint::Member;
use tollgate::algorithm::reservation::{apply, Book};
use tollgate::algorithm::{Hits, Params, State, Write, MAX_VALUE};
use tollgate::store::scripts::RESERVE_LUA;

use super::joint::{arb_algorithm, arb_small_params, run_against, stored_in_redis};
use super::{arb_hits, arb_params, arb_tick, as_i64, real_now_us, Tick, DAY_US};

/// Buckets (each with its limit: a key names its algorithm and unit in production), the
/// members (the bucket each charges), a ttl, a start offset, and steps: a tick, which
/// reservation (of 4), and the hits every member asks.
type Case = (Vec<Params>, Vec<usize>, u64, u64, Vec<(Tick, u8, Hits)>);

fn arb_case() -> impl Strategy<Value = Case> {
    let params = prop_oneof![2 => arb_small_params(12), 1 => arb_algorithm().prop_flat_map(arb_params)];
    let ttl = prop_oneof![Just(1_000_000u64), Just(60_000_000), Just(DAY_US), 1u64..10_000_000];
    let steps = prop::collection::vec((arb_tick(), 0u8..4, arb_hits()), 1..40);
    let members = prop::collection::vec(0usize..3, 1..4);
    (prop::collection::vec(params, 3), members, ttl, 0..DAY_US, steps)
}

fn eval(
    con: &mut redis::Connection,
    sha: &str,
    keys: &[String],
    id: &str,
    ttl: u64,
    now: u64,
    members: &[Member],
) -> redis::RedisResult<Vec<i64>> {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(sha).arg(keys.len());
    for key in keys {
        cmd.arg(key);
    }
    cmd.arg(id).arg(ttl).arg(now).arg(members.len());
    for m in members {
        let (mode, n) = match m.hits {
            Hits::Consume(n) => (0, n),
            Hits::Peek => (1, 0),
            Hits::Refund(n) => (2, n),
            Hits::Overdraw(n) => (3, n),
        };
        let p = &m.params;
        cmd.arg(m.key + 1).arg(p.algorithm.as_str()).arg(p.limit).arg(p.unit_us).arg(p.burst);
        cmd.arg(mode).arg(n).arg(p.penalty_us);
    }
    cmd.query(con)
}

fn run_case(
    con: &mut redis::Connection,
    sha: &str,
    serial: u64,
    (limits, picks, ttl, offset, steps): Case,
    seen: &RefCell<[u64; 5]>,
) -> Result<(), TestCaseError> {
    // Members' buckets numbered by first use (as the store sends them); the record keys last.
    let mut used: Vec<usize> = Vec::new();
    let slots: Vec<usize> = picks
        .iter()
        .map(|&k| {
            used.iter().position(|&u| u == k).unwrap_or_else(|| {
                used.push(k);
                used.len() - 1
            })
        })
        .collect();
    let mut keys: Vec<String> = used.iter().map(|k| format!("diff:resv:{serial}:{k}")).collect();
    keys.push(format!("diff:resv:{serial}:r"));
    keys.push(format!("diff:resv:{serial}:x"));
    let mut stored: Vec<Option<(State, u64)>> = vec![None; used.len()];
    let mut book = Book::default();
    let mut now = real_now_us() + 365 * DAY_US + offset;
    for (step, (tick, which, hits)) in steps.into_iter().enumerate() {
        now = now.saturating_add(tick.resolve(now, limits[picks[0]].unit_us)).min(MAX_VALUE);
        let members: Vec<Member> =
            picks.iter().zip(&slots).map(|(&k, &key)| Member { key, params: limits[k], hits }).collect();
        let id = format!("id{which}");
        let states: Vec<Option<State>> =
            stored.iter().map(|s| s.filter(|&(_, exp)| exp > now).map(|(s, _)| s)).collect();
        let (record, expired) = book.open(id.as_bytes(), now);
        let out = apply(&states, record.as_ref(), now, &members);
        for w in out.joint.writes.iter().flatten().chain(&out.joint.marks) {
            stored[w.key] = match w.write {
                Write::Put { state, expires_at } => Some((state, expires_at)),
                Write::Delete => None,
                Write::Keep => stored[w.key],
            };
        }
        if let Some(r) = out.record.clone() {
            book.put(id.as_bytes(), r, now, ttl);
        }
        let mut rust: Vec<i64> = out
            .joint
            .decisions
            .iter()
            .flat_map(|d| [i64::from(d.allowed), as_i64(d.remaining), as_i64(d.reset_us)])
            .collect();
        rust.extend([as_i64(out.phase.code()), as_i64(expired)]);
        {
            let mut seen = seen.borrow_mut();
            seen[usize::try_from(out.phase.code()).unwrap_or(0)] += 1;
            seen[4] += expired;
        }
        let lua = eval(con, sha, &keys, &id, ttl, now, &members)
            .map_err(|e| TestCaseError::fail(format!("step {step}: reserve.lua failed: {e}")))?;
        prop_assert_eq!(
            &rust,
            &lua,
            "step {} at now={} id={} record={:?} members={:?} states={:?}",
            step,
            now,
            id,
            record,
            members,
            states
        );
        for (k, state) in stored.iter().enumerate() {
            if let Some((state, _)) = state {
                stored_in_redis(con, &keys[k], *state)?;
            }
        }
    }
    Ok(())
}

#[test]
fn reservation_rust_and_lua_agree() {
    let seen = RefCell::new([0u64; 5]);
    run_against(
        RESERVE_LUA,
        arb_case(),
        "algorithm::reservation differs from reserve.lua",
        |con, sha, serial, case| run_case(con, sha, serial, case, &seen),
    );
    // Every path was taken: plain, reserved, refused, settled, and records expired held.
    let seen = seen.into_inner();
    assert!(seen.iter().all(|&n| n > 0), "plain, reserved, refused, settled, expired: {seen:?}");
}
