//! Batching across requests (`store::redis::batch`) against a real redis-server: requests
//! queued behind the call in flight go together as one call and each is answered its own;
//! a rider whose request is cancelled, or whose deadline passes, before its call is sent is
//! not charged; a cancelled lead strands nobody; a group that fails in Redis fails alone; a
//! call carries at most `--redis-max-inflight` (and 64) charges; and the breaker counts a
//! call once, by its first rider. One connection (one lane); the first call is held in
//! flight by a TCP front that delays the connection's first bytes from Redis.

#[allow(dead_code)]
#[path = "support/front.rs"]
mod front_support;
#[allow(dead_code)]
#[path = "support/redis.rs"]
mod redis_support;
#[allow(dead_code)]
#[path = "api/support.rs"]
mod support;

use std::sync::Arc;
use std::time::Duration;

use front_support::Front;
use redis_support::RedisServer;
use support::eventually;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tollgate::algorithm::{Algorithm, Hits, Params};
use tollgate::store::remote::{Charged, Remote};
use tollgate::store::scripts::{BATCH_LUA, FIXED_LUA};
use tollgate::store::{Charge, Groups, RedisSettings, RedisStore, StoreError};

const PARAMS: Params = Params {
    algorithm: Algorithm::FixedWindow,
    limit: 1_000_000,
    unit_us: 3_600_000_000,
    burst: 0,
    penalty_us: 0,
    period: None,
};

fn consume(key: &str) -> Charge {
    Charge { key: format!("tg:f:batch-test:{key}"), params: PARAMS, hits: Hits::Consume(1) }
}

/// The fixed window's count of `key` in Redis: the charges that ran.
fn charged(redis: &RedisServer, key: &str) -> u64 {
    redis.cli(&["HGET", &format!("tg:f:batch-test:{key}"), "c"]).trim().parse().unwrap_or(0)
}

/// `EVALSHA` calls Redis has run (`INFO commandstats`).
fn evalsha_calls(redis: &RedisServer) -> u64 {
    let info = redis.cli(&["INFO", "commandstats"]);
    info.lines()
        .find_map(|l| l.strip_prefix("cmdstat_evalsha:calls="))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// A store of one connection (one lane) through a front that holds the connection's first
/// bytes from Redis for `hold`: its first call waits that long for its connection. The
/// scripts are loaded first, so that no call needs a second round trip.
fn held_store(redis: &RedisServer, hold: Duration, max_inflight: usize) -> (Front, Arc<RedisStore>) {
    let mut con = redis.client();
    for body in [FIXED_LUA, BATCH_LUA] {
        let _: String = redis::cmd("SCRIPT").arg("LOAD").arg(body).query(&mut con).expect("SCRIPT LOAD");
    }
    let front = Front::to_port(redis.port());
    front.delay_first_bytes(hold);
    let settings = RedisSettings { connections: 1, max_inflight, ..RedisSettings::new(front.url()) };
    let store = RedisStore::new(&settings, Duration::from_secs(10)).expect("store");
    (front, Arc::new(store))
}

fn charge(store: &Arc<RedisStore>, batch: Vec<Charge>, deadline: Instant) -> JoinHandle<Charged> {
    let store = store.clone();
    tokio::spawn(async move { Remote::charge(&*store, &batch, &Groups::each(), deadline).await })
}

/// Starts a charge that must queue behind the held lane, and waits until it has (the queue
/// then holds `queued` charges): riders queue in the order the test starts them.
async fn ride(
    store: &Arc<RedisStore>,
    queued: &mut usize,
    batch: Vec<Charge>,
    deadline: Instant,
) -> JoinHandle<Charged> {
    *queued += batch.len();
    let want = *queued;
    let task = charge(store, batch, deadline);
    assert!(
        eventually(Duration::from_secs(5), || async { store.queued() == want }).await,
        "the rider queued: {want} charges"
    );
    task
}

fn far() -> Instant {
    Instant::now() + Duration::from_secs(10)
}

fn allowed(charged: &Charged) -> bool {
    !charged.results.is_empty() && charged.results.iter().all(|r| r.as_ref().is_ok_and(|d| d.allowed))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn riders_share_one_call_and_the_cancelled_and_the_late_are_not_charged() {
    let redis = RedisServer::start();
    let (_front, store) = held_store(&redis, Duration::from_secs(2), 4096);
    let lead = charge(&store, vec![consume("lead")], far());
    // The lead holds the only lane (its connection is held by the front) before anyone comes.
    assert!(eventually(Duration::from_secs(5), || async { store.lanes_in_use() == 1 }).await);
    // Each rider is queued before the next one starts, so that the queue's order is the
    // order written here (two spawned tasks may reach the queue in either order).
    let mut queued = 0;
    let cancelled = [
        ride(&store, &mut queued, vec![consume("c1")], far()).await,
        ride(&store, &mut queued, vec![consume("c2"), consume("c3")], far()).await,
    ];
    let late =
        ride(&store, &mut queued, vec![consume("late")], Instant::now() + Duration::from_millis(300)).await;
    let kept = [
        ride(&store, &mut queued, vec![consume("k1")], far()).await,
        ride(&store, &mut queued, vec![consume("k2"), consume("k3")], far()).await,
    ];
    assert_eq!(store.queued(), 7, "every rider queued");
    for task in &cancelled {
        task.abort();
    }
    assert!(eventually(Duration::from_secs(5), || async { cancelled.iter().all(|t| t.is_finished()) }).await);
    let late = late.await.expect("task");
    assert_eq!(late.results, [Err(StoreError::Timeout)], "its own deadline, not the call's");
    assert_eq!(evalsha_calls(&redis), 0, "the lead's call was still held when the riders left");
    let lead = lead.await.expect("task");
    assert!(allowed(&lead) && !lead.shared, "{lead:?}");
    let mut shared = Vec::new();
    for task in kept {
        let answer = task.await.expect("task");
        assert!(allowed(&answer), "{answer:?}");
        shared.push(answer.shared);
    }
    // The breaker counts the riders' call once: by its first rider.
    assert_eq!(shared, [false, true], "the first rider records the call, the second does not");
    assert_eq!(evalsha_calls(&redis), 2, "the lead's call, then one call for every rider left");
    for key in ["lead", "k1", "k2", "k3"] {
        assert_eq!(charged(&redis, key), 1, "{key} charged once");
    }
    for key in ["c1", "c2", "c3", "late"] {
        assert_eq!(charged(&redis, key), 0, "{key} withdrawn before the write: not charged");
    }
    assert_eq!(store.queued(), 0, "nothing stranded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_lead_strands_none_of_its_riders() {
    let redis = RedisServer::start();
    let (_front, store) = held_store(&redis, Duration::from_secs(1), 4096);
    let lead = charge(&store, vec![consume("lead")], far());
    assert!(eventually(Duration::from_secs(5), || async { store.lanes_in_use() == 1 }).await);
    let riders: Vec<_> = (0..3).map(|i| charge(&store, vec![consume(&format!("r{i}"))], far())).collect();
    assert!(eventually(Duration::from_secs(5), || async { store.queued() == 3 }).await);
    lead.abort();
    for rider in riders {
        let answer = rider.await.expect("task");
        assert!(allowed(&answer), "{answer:?}");
    }
    for i in 0..3 {
        assert_eq!(charged(&redis, &format!("r{i}")), 1);
    }
    assert_eq!(store.queued(), 0, "nothing stranded");
    // The lane is free again: the next request goes at once, alone.
    let next = charge(&store, vec![consume("next")], far()).await.expect("task");
    assert!(allowed(&next) && !next.shared, "{next:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_that_fails_in_redis_fails_alone_in_its_call() {
    let redis = RedisServer::start();
    // A key that holds a list: reading it as a window is `WRONGTYPE`.
    redis.cli(&["RPUSH", "tg:f:batch-test:list", "x"]);
    let (_front, store) = held_store(&redis, Duration::from_secs(1), 4096);
    let lead = charge(&store, vec![consume("lead")], far());
    assert!(eventually(Duration::from_secs(5), || async { store.lanes_in_use() == 1 }).await);
    let before = charge(&store, vec![consume("before")], far());
    let broken = charge(&store, vec![consume("list")], far());
    let after = charge(&store, vec![consume("after-1"), consume("after-2")], far());
    assert!(eventually(Duration::from_secs(5), || async { store.queued() == 4 }).await);
    assert!(allowed(&lead.await.expect("task")));
    let broken = broken.await.expect("task");
    assert!(
        matches!(&broken.results[..], [Err(StoreError::Server(e))] if e.contains("WRONGTYPE")),
        "{broken:?}"
    );
    assert!(allowed(&before.await.expect("task")));
    assert!(allowed(&after.await.expect("task")));
    assert_eq!(evalsha_calls(&redis), 2, "the riders went in one call");
    for key in ["before", "after-1", "after-2"] {
        assert_eq!(charged(&redis, key), 1, "{key}");
    }
}

/// Issue 37, hole 10, with the keys a misconfigured neighbour or an operator's `SET` leaves:
/// a window's key holding a string where a hash is expected, and a GCRA key holding a hash
/// where a string is expected. Each fails its own rider with `WRONGTYPE` (read through
/// `redis.pcall` before its group is decided); the riders around them are answered and
/// charged, and the broken keys are left as they were.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_of_the_wrong_type_fail_only_their_riders() {
    let redis = RedisServer::start();
    redis.cli(&["SET", "tg:f:batch-test:string", "not a window"]);
    redis.cli(&["HSET", "tg:f:batch-test:hash", "s", "1", "c", "2"]);
    let gcra = Params { algorithm: Algorithm::Gcra, burst: 5, limit: 5, ..PARAMS };
    let hash = Charge { key: "tg:f:batch-test:hash".into(), params: gcra, hits: Hits::Consume(1) };
    let (_front, store) = held_store(&redis, Duration::from_secs(1), 4096);
    let lead = charge(&store, vec![consume("lead")], far());
    assert!(eventually(Duration::from_secs(5), || async { store.lanes_in_use() == 1 }).await);
    let mut queued = 0;
    let before = ride(&store, &mut queued, vec![consume("before")], far()).await;
    let string = ride(&store, &mut queued, vec![consume("string")], far()).await;
    let between = ride(&store, &mut queued, vec![consume("between")], far()).await;
    let hash = ride(&store, &mut queued, vec![hash], far()).await;
    let after = ride(&store, &mut queued, vec![consume("after-1"), consume("after-2")], far()).await;
    assert!(allowed(&lead.await.expect("task")));
    for broken in [string.await.expect("task"), hash.await.expect("task")] {
        let wrong_type =
            matches!(&broken.results[..], [Err(StoreError::Server(e))] if e.contains("WRONGTYPE"));
        assert!(wrong_type, "{broken:?}");
    }
    for rider in [before, between, after] {
        let answer = rider.await.expect("task");
        assert!(allowed(&answer), "{answer:?}");
    }
    assert_eq!(evalsha_calls(&redis), 2, "the riders went in one call");
    for key in ["before", "between", "after-1", "after-2"] {
        assert_eq!(charged(&redis, key), 1, "{key}");
    }
    assert_eq!(redis.cli(&["GET", "tg:f:batch-test:string"]).trim(), "not a window");
    assert_eq!(redis.cli(&["HGET", "tg:f:batch-test:hash", "c"]).trim(), "2");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_carries_at_most_max_inflight_charges() {
    let redis = RedisServer::start();
    // At most 10 charges per call: 12 riders of 2 charges queue, then go as 5, 5 and 2.
    let (_front, store) = held_store(&redis, Duration::from_secs(1), 10);
    let lead = charge(&store, vec![consume("lead")], far());
    assert!(eventually(Duration::from_secs(5), || async { store.lanes_in_use() == 1 }).await);
    let riders: Vec<_> = (0..12)
        .map(|i| charge(&store, vec![consume(&format!("a{i}")), consume(&format!("b{i}"))], far()))
        .collect();
    assert!(eventually(Duration::from_secs(5), || async { store.queued() == 24 }).await);
    assert!(allowed(&lead.await.expect("task")));
    for rider in riders {
        assert!(allowed(&rider.await.expect("task")));
    }
    assert_eq!(evalsha_calls(&redis), 1 + 3, "the lead's call, then calls of at most 10 charges");
    for i in 0..12 {
        assert_eq!((charged(&redis, &format!("a{i}")), charged(&redis, &format!("b{i}"))), (1, 1));
    }
}
