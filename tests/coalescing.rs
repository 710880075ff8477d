//! Per-key coalescing against a real redis-server: exact under contention (three instances,
//! one key), fewer script calls than charges, and cancellation — a waiter whose request is
//! cancelled, or whose deadline passes, before its batch is sent is not charged, and the
//! others are answered. The first call is held in flight by a TCP front that delays the
//! connection's first bytes from Redis.

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

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use front_support::Front;
use redis_support::RedisServer;
use support::*;
use tokio::time::Instant;
use tollgate::algorithm::{Algorithm, Hits, Params};
use tollgate::app::StoreKind;
use tollgate::store::redis::DEFAULT_MAX_INFLIGHT;
use tollgate::store::{Charge, Groups, Guarded, RedisSettings, RedisStore, StoreError};

/// A fail-closed domain: a store failure would deny, so the admitted count is Redis's alone.
const EXACT: (&str, &str) = (
    "exact.yaml",
    "domain: exact\nfailure_mode: closed\ndescriptors:\n  - key: k\n    rate_limit: { unit: hour, requests_per_unit: 100 }\n",
);

const INSTANCES: usize = 3;
const CLIENTS: usize = 36;
const REQUESTS_PER_CLIENT: usize = 5;

/// `EVALSHA` calls Redis has run (`INFO commandstats`).
fn evalsha_calls(redis: &RedisServer) -> u64 {
    let info = redis.cli(&["INFO", "commandstats"]);
    info.lines()
        .find_map(|l| l.strip_prefix("cmdstat_evalsha:calls="))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// The sum of `tollgate_decisions_total` series whose result is the failure policy's (the
/// server exports them at 0 for every rule from startup); panics when there are none.
fn failure_decisions(metrics: &str) -> f64 {
    let values: Vec<f64> = metrics
        .lines()
        .filter(|l| l.starts_with("tollgate_decisions_total{") && l.contains("result=\"failure_"))
        .filter_map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.parse::<f64>().ok()))
        .collect();
    assert!(!values.is_empty(), "no failure_* series of tollgate_decisions_total:\n{metrics}");
    values.iter().sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_instances_and_108_clients_on_one_key_admit_exactly_the_limit() {
    let redis = RedisServer::start();
    let mut apps = Vec::new();
    for _ in 0..INSTANCES {
        let mut options = Options::new(StoreKind::Redis);
        options.redis_url = Some(redis.url());
        options.store_timeout = Duration::from_millis(2000);
        options.watch_config = false;
        apps.push(Arc::new(spawn_with(options, &[EXACT]).await));
    }
    let before = evalsha_calls(&redis);
    let started = Instant::now();
    let mut clients = Vec::new();
    for app in &apps {
        for _ in 0..CLIENTS {
            let app = app.clone();
            clients.push(tokio::spawn(async move {
                let mut admitted = 0;
                for _ in 0..REQUESTS_PER_CLIENT {
                    let response = app.check(request("exact", &[&[("k", "one")]])).await;
                    admitted += usize::from(response.overall_code == Code::Ok as i32);
                }
                admitted
            }));
        }
    }
    let mut admitted = 0;
    for client in clients {
        admitted += client.await.expect("client task");
    }
    let elapsed = started.elapsed();
    let charges = (INSTANCES * CLIENTS * REQUESTS_PER_CLIENT) as u64;
    let calls = evalsha_calls(&redis) - before;
    // First: no answer came from the failure policy (a fail-closed denial would hide a miss).
    for app in &apps {
        assert_eq!(failure_decisions(&app.metrics().await), 0.0, "a decision came from the failure policy");
    }
    // GCRA, 100 per hour: one more token every 36 s; the test must take less for an exact count.
    assert!(
        elapsed < Duration::from_secs(30),
        "took {elapsed:?}: a token refilled, the count is inconclusive"
    );
    assert_eq!(admitted, 100, "exactly the limit, over {charges} charges");
    // Each admission needs a script call unless charges share one (denials past the limit
    // may be answered by the over-limit cache, so compare with the admissions).
    assert!(calls < admitted as u64, "{calls} script calls for {admitted} admissions: nothing coalesced");
    eprintln!("{charges} charges, {calls} EVALSHA calls, {admitted} admitted in {elapsed:?}");
}

const PARAMS: Params = Params {
    algorithm: Algorithm::FixedWindow,
    limit: 1_000_000,
    unit_us: 3_600_000_000,
    burst: 0,
    penalty_us: 0,
    period: None,
};
const KEY: &str = "tg:f:coalesce-test";

fn consume() -> Vec<Charge> {
    vec![Charge { key: KEY.into(), params: PARAMS, hits: Hits::Consume(1) }]
}

/// The fixed window's count in Redis: the charges that ran.
fn charged(redis: &RedisServer) -> u64 {
    redis.cli(&["HGET", KEY, "c"]).trim().parse().unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_and_late_waiters_are_not_charged_and_the_others_are_answered() {
    let redis = RedisServer::start();
    let front = Front::to_port(redis.port());
    // The store's connection gets no reply for 2 s: the first charge stays in flight.
    front.delay_first_bytes(Duration::from_secs(2));
    let settings = RedisSettings::new(front.url());
    let client = RedisStore::new(&settings, Duration::from_secs(10)).expect("store");
    let store = Arc::new(Guarded::new(client, None).coalescing(Some(DEFAULT_MAX_INFLIGHT)));
    let far = Instant::now() + Duration::from_secs(10);
    let charge = |deadline: Instant| {
        let store = store.clone();
        tokio::spawn(async move { store.charge(&consume(), &Groups::each(), deadline).await })
    };
    let lead = charge(far);
    let table = store.coalescer().expect("coalescing on");
    assert!(eventually(Duration::from_secs(5), || async { table.in_flight() == 1 }).await);
    let cancelled = [charge(far), charge(far)];
    let late = charge(Instant::now() + Duration::from_millis(300));
    let kept = [charge(far), charge(far)];
    assert!(eventually(Duration::from_secs(5), || async { table.waiting() == 5 }).await);
    for task in &cancelled {
        task.abort();
    }
    assert!(eventually(Duration::from_secs(5), || async { cancelled.iter().all(|t| t.is_finished()) }).await);
    assert_eq!(late.await.expect("task"), [Err(StoreError::Timeout)], "its own deadline");
    assert_eq!(evalsha_calls(&redis), 0, "the first call was still held when the waiters left");
    assert!(lead.await.expect("task")[0].as_ref().is_ok_and(|d| d.allowed));
    for task in kept {
        let answer = task.await.expect("task");
        assert!(answer[0].as_ref().is_ok_and(|d| d.allowed), "{answer:?}");
    }
    assert_eq!(charged(&redis), 3, "the lead and the two kept waiters; not the cancelled or the late");
    assert_eq!(evalsha_calls(&redis), 2, "the lead's call, then one batch");
    assert!(
        eventually(Duration::from_secs(5), || async { table.in_flight() == 0 }).await,
        "nothing stranded"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_lead_strands_none_of_its_waiters() {
    let redis = RedisServer::start();
    let front = Front::to_port(redis.port());
    front.delay_first_bytes(Duration::from_secs(1));
    let client = RedisStore::new(&RedisSettings::new(front.url()), Duration::from_secs(10)).expect("store");
    let store = Arc::new(Guarded::new(client, None).coalescing(Some(DEFAULT_MAX_INFLIGHT)));
    let far = Instant::now() + Duration::from_secs(10);
    let charge = || {
        let store = store.clone();
        tokio::spawn(async move { store.charge(&consume(), &Groups::each(), far).await })
    };
    let lead = charge();
    let table = store.coalescer().expect("coalescing on");
    assert!(eventually(Duration::from_secs(5), || async { table.in_flight() == 1 }).await);
    let waiters: Vec<_> = (0..3).map(|_| charge()).collect();
    assert!(eventually(Duration::from_secs(5), || async { table.waiting() == 3 }).await);
    lead.abort();
    for waiter in waiters {
        let answer = waiter.await.expect("task");
        assert!(answer[0].as_ref().is_ok_and(|d| d.allowed), "{answer:?}");
    }
    // The lead's own charge may or may not have run (it was cancelled after being sent).
    let count = charged(&redis);
    assert!((3..=4).contains(&count), "{count}");
    assert!(
        eventually(Duration::from_secs(5), || async { table.in_flight() == 0 }).await,
        "nothing stranded"
    );
}
