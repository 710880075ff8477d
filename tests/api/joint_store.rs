//! Joint groups on one Redis node, at the store: a group with one member over its limit
//! charges none of its buckets, a passing group charges all, and a group is one script
//! call in the request's pipeline (`EVAL` once after `SCRIPT FLUSH`, like any entry).

use std::time::Duration;

use tokio::time::Instant;
use tollgate::algorithm::{Algorithm, Decision, Hits, Params};
use tollgate::store::{Charge, Groups, Guarded, RedisSettings, RedisStore, Store};

use crate::redis_support::RedisServer;

const YEAR_US: u64 = 365 * 86_400_000_000;

fn store_on(server: &RedisServer) -> Store {
    store_with(server, true)
}

/// A store on `server`, batching requests or not (`--no-batch`).
fn store_with(server: &RedisServer, batch: bool) -> Store {
    let settings = RedisSettings { batch, ..RedisSettings::new(server.url()) };
    let redis = RedisStore::new(&settings, Duration::from_secs(2)).expect("store");
    Store::Redis(Guarded::new(redis, None))
}

fn charge(key: &str, algorithm: Algorithm, limit: u64, hits: Hits) -> Charge {
    Charge {
        key: key.into(),
        params: Params { algorithm, limit, unit_us: YEAR_US, burst: limit, penalty_us: 0, period: None },
        hits,
    }
}

async fn charge_groups(store: &Store, batch: &[Charge], ends: Vec<usize>) -> Vec<Decision> {
    let deadline = Instant::now() + Duration::from_secs(2);
    let results = store.charge_groups(batch, &Groups::from_ends(ends), deadline).await;
    results.into_iter().map(|r| r.expect("redis answers")).collect()
}

/// `calls` of one command in `INFO commandstats`.
pub(crate) fn calls(server: &RedisServer, command: &str) -> u64 {
    let info = server.cli(&["INFO", "commandstats"]);
    let prefix = format!("cmdstat_{command}:calls=");
    info.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|rest| rest.split(',').next()?.parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_with_one_member_over_its_limit_charges_none() {
    let server = RedisServer::start();
    let store = store_on(&server);
    let wide = |hits| charge("tg:wide", Algorithm::Gcra, 5, hits);
    let narrow = |hits| charge("tg:narrow", Algorithm::FixedWindow, 1, hits);
    let sliding = |hits| charge("tg:sliding", Algorithm::SlidingWindow, 3, hits);

    let passed = charge_groups(
        &store,
        &[wide(Hits::Consume(1)), narrow(Hits::Consume(1)), sliding(Hits::Consume(2))],
        vec![3],
    )
    .await;
    assert!(passed.iter().all(|d| d.allowed), "{passed:?}");
    assert_eq!(passed.iter().map(|d| d.remaining).collect::<Vec<_>>(), [4, 0, 1], "every member charged");

    let denied = charge_groups(
        &store,
        &[wide(Hits::Consume(1)), narrow(Hits::Consume(1)), sliding(Hits::Consume(1))],
        vec![3],
    )
    .await;
    assert!(!denied[1].allowed, "{denied:?}");
    assert!(denied[0].allowed && denied[2].allowed, "the others answer allowed: {denied:?}");
    assert_eq!((denied[0].remaining, denied[2].remaining), (4, 1), "with their buckets as they are");

    let peeks = charge_groups(&store, &[wide(Hits::Peek), sliding(Hits::Peek)], vec![1, 2]).await;
    assert_eq!((peeks[0].remaining, peeks[1].remaining), (4, 1), "nothing was charged");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_with_a_joint_group_is_one_script_call() {
    let calls = joint_group_then_a_script_flush(true).await;
    assert_eq!(calls[0], (1, 0), "a group of three and a group of one: one batch.lua call");
    assert_eq!(calls[1], (1, 1), "NOSCRIPT: once more with EVAL");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_batching_a_joint_group_is_one_script_call_of_the_pipeline() {
    let calls = joint_group_then_a_script_flush(false).await;
    assert_eq!(calls[0], (2, 0), "a group of three and a group of one");
    assert_eq!(calls[1], (2, 2), "NOSCRIPT: each entry once with EVAL");
}

/// A request of a joint group of three and a group of one, charged three times on a store
/// batching or not: the answers, and the (`EVALSHA`, `EVAL`) calls of the second charge and
/// of the third, sent after a `SCRIPT FLUSH`.
async fn joint_group_then_a_script_flush(batch: bool) -> [(u64, u64); 2] {
    let server = RedisServer::start();
    let store = store_with(&server, batch);
    let request = [
        charge("tg:a", Algorithm::Gcra, 5, Hits::Consume(1)),
        charge("tg:b", Algorithm::Gcra, 5, Hits::Consume(1)),
        charge("tg:a", Algorithm::Gcra, 5, Hits::Consume(1)),
        charge("tg:c", Algorithm::Gcra, 5, Hits::Consume(1)),
    ];
    let counted = || (calls(&server, "evalsha"), calls(&server, "eval"));
    charge_groups(&store, &request, vec![3, 4]).await;
    assert_eq!(server.cli(&["CONFIG", "RESETSTAT"]), "OK");
    let decisions = charge_groups(&store, &request, vec![3, 4]).await;
    assert_eq!(decisions.iter().map(|d| d.remaining).collect::<Vec<_>>(), [2, 3, 1, 3]);
    let second = counted();

    assert_eq!(server.cli(&["SCRIPT", "FLUSH"]), "OK");
    assert_eq!(server.cli(&["CONFIG", "RESETSTAT"]), "OK");
    let decisions = charge_groups(&store, &request, vec![3, 4]).await;
    // "tg:a" has one hit left: its second member is denied, so the group charges nothing.
    assert_eq!(decisions.iter().map(|d| d.remaining).collect::<Vec<_>>(), [1, 3, 0, 2], "{decisions:?}");
    assert_eq!(decisions.iter().map(|d| d.allowed).collect::<Vec<_>>(), [true, true, false, true]);
    [second, counted()]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_charge_alone_is_decided_alone() {
    let server = RedisServer::start();
    let store = store_on(&server);
    let batch = [
        charge("tg:x", Algorithm::Gcra, 1, Hits::Consume(1)),
        charge("tg:y", Algorithm::Gcra, 1, Hits::Consume(2)),
    ];
    let deadline = Instant::now() + Duration::from_secs(2);
    let results = store.charge_groups(&batch, &Groups::each(), deadline).await;
    assert_eq!(
        results.iter().map(|r| r.as_ref().map(|d| d.allowed)).collect::<Vec<_>>(),
        [Ok(true), Ok(false)]
    );
    assert_eq!(server.cli(&["EXISTS", "tg:x"]), "1", "the first stands alone");
}
