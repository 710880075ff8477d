//! Approximate mode's bound from the first request, at production flags: instances started
//! into load, a rolling restart under load, and an instance started while Redis is
//! unreachable (docs/scaling.md, "Approximate mode": "The bound from the first request").
//!
//! Every instance runs with the default store timeout, reply timeout, sync interval and
//! staleness; clients hammer an instance the moment `spawn` returns (it is ready then), with
//! no wait for the heartbeat: what a pod of a rollout or a scale-up meets. A domain with
//! `failure_mode: closed`, so that every admission came from a decision (a failure-policy
//! answer is a denial), and the bound is checked on admissions.
//!
//! Its own test binary: the instances and their clients have the machine to themselves.

#[allow(dead_code)]
#[path = "support/approx.rs"]
mod approx_support;
#[allow(dead_code)]
#[path = "support/redis.rs"]
mod redis_support;

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use approx_support::{bound, failure_decisions, metric, request, within_one_window};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use redis_support::{free_port, RedisServer};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tollgate::app::{Running, ServeSettings, StoreKind};
use tollgate::store::RedisSettings;
use tonic::transport::Channel;

const LIMIT: u64 = 1_000;
/// Clients per instance, each with one request in flight.
const CLIENTS: usize = 6;

fn policy() -> String {
    format!(
        "domain: approx\nconsistency: approximate\nfailure_mode: closed\ndescriptors:\n  - key: user\n    \
         rate_limit: {{ unit: minute, requests_per_unit: {LIMIT}, algorithm: sliding_window }}\n"
    )
}

/// An instance at production flags but for the ports, the config watch and the drain.
async fn instance(
    redis_url: &str,
    config: &Path,
    drain: Duration,
) -> (Running, RateLimitServiceClient<Channel>) {
    let mut settings = ServeSettings::new(config.to_path_buf());
    settings.store = StoreKind::Redis;
    settings.redis = RedisSettings::new(redis_url);
    settings.grpc_addr = "127.0.0.1:0".parse().expect("addr");
    settings.admin_addr = "127.0.0.1:0".parse().expect("addr");
    settings.drain = drain;
    settings.watch_config = false;
    let running = tollgate::app::spawn(settings).await.expect("app starts");
    let client =
        RateLimitServiceClient::connect(format!("http://{}", running.grpc_addr)).await.expect("connect");
    (running, client)
}

/// `Some(admitted)`, or `None` when the instance did not answer (stopped).
async fn ask(client: &mut RateLimitServiceClient<Channel>, user: &str) -> Option<bool> {
    let response = client.should_rate_limit(request(user)).await.ok()?.into_inner();
    Some(response.overall_code == Code::Ok as i32)
}

/// Clients hammering `key` through whatever client `slot` holds now, until `stop`;
/// admissions are added to `admitted`.
fn hammer(
    slot: Arc<Mutex<RateLimitServiceClient<Channel>>>,
    key: String,
    stop: Arc<AtomicBool>,
    admitted: Arc<AtomicU64>,
) -> Vec<JoinHandle<u64>> {
    (0..CLIENTS)
        .map(|_| {
            let (slot, key, stop, admitted) = (slot.clone(), key.clone(), stop.clone(), admitted.clone());
            tokio::spawn(async move {
                let mut sent = 0;
                while !stop.load(Ordering::Relaxed) {
                    let mut client = slot.lock().expect("slot").clone();
                    match ask(&mut client, &key).await {
                        Some(ok) => admitted.fetch_add(u64::from(ok), Ordering::Relaxed),
                        None => {
                            tokio::time::sleep(Duration::from_millis(1)).await;
                            0
                        }
                    };
                    sent += 1;
                }
                sent
            })
        })
        .collect()
}

/// Three new instances started at once on one key, each hammered the moment it is ready:
/// admissions within the stated bound for N = 3, run after run (each run new instances and
/// a key of its own; the runs share one minute window).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_instances_started_into_load_stay_within_the_bound_from_their_first_request() {
    const RUNS: usize = 3;
    const RUN: Duration = Duration::from_secs(4);
    within_one_window(Duration::from_secs(40)).await;
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("approx.yaml"), policy()).expect("write");
    let bound = bound(3, LIMIT);
    for run in 0..RUNS {
        let key = format!("together-{run}");
        let (stop, admitted) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicU64::new(0)));
        let starts = (0..3).map(|_| {
            let (url, path, key, stop, admitted) =
                (redis.url(), dir.path().to_path_buf(), key.clone(), stop.clone(), admitted.clone());
            tokio::spawn(async move {
                let (running, client) = instance(&url, &path, Duration::ZERO).await;
                let clients = hammer(Arc::new(Mutex::new(client)), key, stop, admitted);
                (running, clients)
            })
        });
        let started: Vec<_> = futures_util::future::join_all(starts).await;
        tokio::time::sleep(RUN).await;
        stop.store(true, Ordering::Relaxed);
        let (mut sent, mut failures) = (0, 0.0);
        for start in started {
            let (running, clients) = start.expect("instance");
            for client in clients {
                sent += client.await.expect("client");
            }
            failures += failure_decisions(running.admin_addr).await;
            running.stop().await.expect("stop");
        }
        let admitted = admitted.load(Ordering::Relaxed);
        println!("run {run}: admitted {admitted} of {sent} (limit {LIMIT}, bound +{bound}); {failures} failure-policy answers");
        assert!(sent > 3 * LIMIT, "the clients hammered ({sent} requests)");
        assert!(admitted <= LIMIT + bound, "run {run}: admitted {admitted}, past {LIMIT} + {bound}");
        // Not a bound, a sign of life: the instances limit rather than deny everything (how
        // close to the limit a run gets depends on the machine's load: the warm-up decides
        // exactly, at the default store timeout).
        assert!(admitted >= LIMIT / 2, "run {run}: admitted {admitted} in {RUN:?}: far under the limit");
    }
}

/// Three instances under load, each replaced in turn (a new one started and given the
/// clients, then the old one drained): admissions over the whole run within the bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rolling_restart_under_load_stays_within_the_bound() {
    within_one_window(Duration::from_secs(25)).await;
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("approx.yaml"), policy()).expect("write");
    let drain = Duration::from_millis(300);
    let (stop, admitted) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicU64::new(0)));
    let mut pods = Vec::new();
    let mut clients = Vec::new();
    for _ in 0..3 {
        let (running, client) = instance(&redis.url(), dir.path(), drain).await;
        let slot = Arc::new(Mutex::new(client));
        clients.extend(hammer(slot.clone(), "rolling".into(), stop.clone(), admitted.clone()));
        pods.push((running, slot));
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut failures = 0.0;
    for pod in &mut pods {
        let (running, client) = instance(&redis.url(), dir.path(), drain).await;
        *pod.1.lock().expect("slot") = client;
        let old = std::mem::replace(&mut pod.0, running);
        failures += failure_decisions(old.admin_addr).await;
        old.stop().await.expect("drain");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, Ordering::Relaxed);
    let mut sent = 0;
    for client in clients {
        sent += client.await.expect("client");
    }
    for (running, _) in pods {
        failures += failure_decisions(running.admin_addr).await;
        running.stop().await.expect("stop");
    }
    let admitted = admitted.load(Ordering::Relaxed);
    let bound = bound(3, LIMIT);
    println!("rolling restart: admitted {admitted} of {sent} (limit {LIMIT}, bound +{bound}); {failures} failure-policy answers");
    assert!(admitted <= LIMIT + bound, "admitted {admitted}, past {LIMIT} + {bound}");
    assert!(admitted >= LIMIT / 2, "admitted {admitted}: far under the limit");
}

/// Ready means warmed up: `spawn` returns (and `/readyz` answers 200) only once the
/// instance decides approximate domains locally, so that the first request a load balancer
/// sends is not charged exactly at the 10 ms store timeout while the load arrives at once
/// (what gave a pod started into a key flood failure-policy answers in its first second).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ready_means_the_approximate_warm_up_is_done() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("approx.yaml"), policy()).expect("write");
    let started = Instant::now();
    let (running, mut client) = instance(&redis.url(), dir.path(), Duration::ZERO).await;
    let took = started.elapsed();
    assert_eq!(
        metric(running.admin_addr, "tollgate_approximate_ready ").await,
        1.0,
        "ready before the warm-up was done"
    );
    assert_eq!(approx_support::admin_get(running.admin_addr, "/readyz").await, "ready\n");
    println!("ready, warmed up, {} ms after spawn", took.as_millis());
    assert!(took < tollgate::app::warm_up_wait(Duration::from_millis(250)), "took {took:?}");
    assert_eq!(ask(&mut client, "u0").await, Some(true));
    assert_eq!(failure_decisions(running.admin_addr).await, 0.0);
    running.stop().await.expect("stop");
}

/// Redis unreachable when an instance starts: it has no `N` and reads nothing, so it decides
/// approximate domains exactly — the failure policy answers (here: denies), nothing is
/// admitted locally. Once Redis is there, the heartbeat counts it and it decides locally.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_started_without_redis_admits_nothing_on_its_own() {
    let port = free_port();
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("approx.yaml"), policy()).expect("write");
    let started = Instant::now();
    let (running, mut client) =
        instance(&format!("redis://127.0.0.1:{port}"), dir.path(), Duration::ZERO).await;
    // Startup waited for the warm-up, bounded: ready anyway, the failure policy answering.
    let wait = tollgate::app::warm_up_wait(Duration::from_millis(250));
    assert!(started.elapsed() < wait + Duration::from_secs(2), "ready only after {:?}", started.elapsed());
    let until = Instant::now() + Duration::from_secs(1);
    let mut asked = 0;
    while Instant::now() < until {
        assert_eq!(ask(&mut client, &format!("u{}", asked % 7)).await, Some(false), "admitted without Redis");
        asked += 1;
    }
    assert_eq!(
        failure_decisions(running.admin_addr).await,
        asked as f64,
        "each answered by the failure policy"
    );
    assert_eq!(metric(running.admin_addr, "tollgate_approximate_ready ").await, 0.0);
    let _redis = RedisServer::start_on(port);
    let deadline = Instant::now() + Duration::from_secs(20);
    while metric(running.admin_addr, "tollgate_approximate_ready ").await != 1.0 {
        assert!(Instant::now() < deadline, "never ready once Redis answered");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(ask(&mut client, "u0").await, Some(true));
    running.stop().await.expect("stop");
}
