//! `batch.lua` over whatever a key can hold (issue 37, hole 10): garbage strings, hashes with
//! garbage fields, keys of another type. `batch.lua` has no `pcall` per group: it relies on
//! reading every key of a group with `redis.pcall` before deciding it, and on deciding never
//! raising an error. Here, against a real redis-server: the call itself never fails (one
//! answer per member), a group whose keys all hold a type its members can read (a string
//! for GCRA, a hash for the windows, nothing) is always decided, and a group that fails
//! fails with Redis's `WRONGTYPE`, alone.

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use tollgate::algorithm::joint::Member;
use tollgate::algorithm::{Algorithm, Hits, Params};
use tollgate::store::scripts::{parse_batch, BATCH_LUA};

use super::batch::{batch_cmd, eval_raw};
use super::joint::{arb_algorithm, arb_small_params, run_against};
use super::{arb_hits, arb_params, real_now_us};

/// What a key holds before the call.
#[derive(Debug, Clone)]
enum Junk {
    Absent,
    Text(String),
    /// Fields and values (none: the key is absent).
    Hash(Vec<(String, String)>),
    List,
}

fn arb_text() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => "[0-9]{0,18}(:[0-9]{0,18}){0,3}",
        2 => "[ -~]{0,24}",
        1 => prop::sample::select(vec!["1e400", "nan", "inf", "-5", "0x1f", "", "9007199254740993"])
            .prop_map(String::from),
    ]
}

fn arb_junk() -> impl Strategy<Value = Junk> {
    let field = prop::sample::select(vec!["s", "c", "p", "u", "x"]).prop_map(String::from);
    prop_oneof![
        1 => Just(Junk::Absent),
        3 => arb_text().prop_map(Junk::Text),
        3 => prop::collection::vec((field, arb_text()), 0..5).prop_map(Junk::Hash),
        1 => Just(Junk::List),
    ]
}

/// Whether a member of `algorithm` can read what `junk` holds.
fn readable(junk: &Junk, algorithm: Algorithm) -> bool {
    match junk {
        Junk::Absent => true,
        Junk::Hash(fields) if fields.is_empty() => true,
        Junk::Text(_) => algorithm == Algorithm::Gcra,
        Junk::Hash(_) => algorithm != Algorithm::Gcra,
        Junk::List => false,
    }
}

type Case = (Vec<(Junk, Params)>, Vec<(bool, Vec<(usize, Hits)>)>);

fn arb_junk_case() -> impl Strategy<Value = Case> {
    let params = prop_oneof![2 => arb_small_params(6), 1 => arb_algorithm().prop_flat_map(arb_params)];
    let group = (any::<bool>(), prop::collection::vec((0usize..4, arb_hits()), 1..5));
    (prop::collection::vec((arb_junk(), params), 1..5), prop::collection::vec(group, 1..7))
}

fn plant(con: &mut redis::Connection, key: &str, junk: &Junk) -> Result<(), TestCaseError> {
    let cmd = match junk {
        Junk::Absent => return Ok(()),
        Junk::Hash(fields) if fields.is_empty() => return Ok(()),
        Junk::Text(text) => {
            let mut cmd = redis::cmd("SET");
            cmd.arg(key).arg(text);
            cmd
        }
        Junk::Hash(fields) => {
            let mut cmd = redis::cmd("HSET");
            cmd.arg(key).arg(fields);
            cmd
        }
        Junk::List => {
            let mut cmd = redis::cmd("RPUSH");
            cmd.arg(key).arg("x");
            cmd
        }
    };
    cmd.query::<()>(con).map_err(|e| TestCaseError::fail(format!("planting {key}: {e}")))
}

fn run_junk_case(
    con: &mut redis::Connection,
    sha: &str,
    serial: u64,
    (keys, groups): Case,
) -> Result<(), TestCaseError> {
    let names: Vec<String> = (0..keys.len()).map(|k| format!("junk:{serial}:{k}")).collect();
    for (name, (junk, _)) in names.iter().zip(&keys) {
        plant(con, name, junk)?;
    }
    // The call's keys by first use, as the store numbers them.
    let mut used: Vec<usize> = Vec::new();
    let mut call: Vec<(bool, Vec<Member>)> = Vec::new();
    let mut typed: Vec<bool> = Vec::new();
    for (joint, picks) in &groups {
        let mut members = Vec::new();
        let mut ok = true;
        for &(k, hits) in picks {
            let k = k % keys.len();
            let key = used.iter().position(|&u| u == k).unwrap_or_else(|| {
                used.push(k);
                used.len() - 1
            });
            ok &= readable(&keys[k].0, keys[k].1.algorithm);
            members.push(Member { key, params: keys[k].1, hits });
        }
        typed.push(ok);
        call.push((*joint, members));
    }
    let call_keys: Vec<String> = used.iter().map(|&k| names[k].clone()).collect();
    let charges: usize = call.iter().map(|(_, m)| m.len()).sum();
    let reply = eval_raw(con, batch_cmd(sha, &call_keys, &call, real_now_us()));
    let shaped = matches!(&reply, redis::Value::Array(items) if items.len() == 3 * charges);
    prop_assert!(shaped, "the call itself failed: {:?}", reply);
    let mut results = parse_batch(Ok(reply), charges).into_iter();
    for ((_, members), typed) in call.iter().zip(typed) {
        for member in members {
            match results.next() {
                Some(Ok(_)) => {}
                Some(Err(e)) => {
                    prop_assert!(!typed, "a group of readable keys failed: {:?} {:?}", e, members);
                    prop_assert!(format!("{e:?}").contains("WRONGTYPE"), "{:?} {:?}", e, member);
                }
                None => prop_assert!(false, "an answer is missing"),
            }
        }
    }
    Ok(())
}

#[test]
fn whatever_a_key_holds_only_its_own_group_can_fail() {
    run_against(BATCH_LUA, arb_junk_case(), "batch.lua over junk", run_junk_case);
}
