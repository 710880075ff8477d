//! Approximate mode (`consistency: approximate`) on a real Redis: three instances on one
//! key stay within docs/scaling.md's stated bound; idle buckets cost Redis no reads; with Redis
//! down, decisions go on from the estimates, the failure policy takes over past the
//! staleness limit, and the increments admitted meanwhile are written when Redis returns;
//! `/v1/usage` reads the buckets approximate mode writes.
//!
//! Every test first asserts that no decision came from the failure policy where none
//! should have (a fail-closed domain: such a decision would be a denial that looks like
//! the limit working).

#[allow(dead_code)]
#[path = "support/approx.rs"]
mod approx_support;
#[allow(dead_code)]
#[path = "support/redis.rs"]
mod redis_support;

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use approx_support::{admin_get, bound, request, within_one_window, SUM_OF_COUNTS};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use redis_support::RedisServer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;
use tollgate::app::{Running, ServeSettings, StoreKind};
use tollgate::store::RedisSettings;
use tonic::transport::Channel;

const LIMIT: u64 = 1_000;
const INTERVAL: Duration = Duration::from_millis(250);

fn policy(limit: u64) -> String {
    policy_as("approximate", limit)
}

fn policy_as(consistency: &str, limit: u64) -> String {
    format!(
        "domain: approx\nconsistency: {consistency}\nfailure_mode: closed\ndescriptors:\n  - key: user\n    \
         rate_limit: {{ unit: minute, requests_per_unit: {limit}, algorithm: sliding_window }}\n"
    )
}

/// `POST /reload` on the admin port: the status code.
async fn reload(running: &Running) -> u16 {
    let mut stream = tokio::net::TcpStream::connect(running.admin_addr).await.expect("admin");
    let head = "POST /reload HTTP/1.1\r\nhost: x\r\nconnection: close\r\ncontent-length: 0\r\n\r\n";
    stream.write_all(head.as_bytes()).await.expect("write");
    let mut out = String::new();
    stream.read_to_string(&mut out).await.expect("read");
    out.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0)
}

struct Instance {
    running: Running,
    client: RateLimitServiceClient<Channel>,
}

async fn instance(redis_url: &str, config: &Path, staleness: Duration) -> Instance {
    let mut settings = ServeSettings::new(config.to_path_buf());
    settings.store = StoreKind::Redis;
    settings.redis = RedisSettings::new(redis_url);
    settings.store_timeout = Duration::from_secs(2);
    settings.sync_interval = INTERVAL;
    settings.sync_staleness = staleness;
    settings.grpc_addr = "127.0.0.1:0".parse().expect("addr");
    settings.admin_addr = "127.0.0.1:0".parse().expect("addr");
    settings.drain = Duration::ZERO;
    settings.watch_config = false;
    let running = tollgate::app::spawn(settings).await.expect("app starts");
    let client =
        RateLimitServiceClient::connect(format!("http://{}", running.grpc_addr)).await.expect("connect");
    Instance { running, client }
}

async fn allowed(client: &mut RateLimitServiceClient<Channel>, user: &str) -> bool {
    let response = client.should_rate_limit(request(user)).await.expect("grpc").into_inner();
    response.overall_code == Code::Ok as i32
}

/// `GET path` on the instance's admin port: the body.
async fn get(running: &Running, path: &str) -> String {
    admin_get(running.admin_addr, path).await
}

async fn metric(running: &Running, series: &str) -> f64 {
    approx_support::metric(running.admin_addr, series).await
}

async fn failure_decisions(running: &Running) -> f64 {
    approx_support::failure_decisions(running.admin_addr).await
}

/// The sum of the current counts of every bucket in Redis.
fn redis_total(redis: &RedisServer) -> u64 {
    redis.cli(&["EVAL", SUM_OF_COUNTS, "0"]).trim().parse().unwrap_or(0)
}

/// Waits until the instance decides approximate domains locally (its heartbeat has
/// counted the others: `tollgate_approximate_ready`).
async fn wait_ready(running: &Running) {
    wait_for(|| async { metric(running, "tollgate_approximate_ready ").await == 1.0 }).await;
}

/// Polls `ready` every 5 ms for at most 20 s.
async fn wait_for<F: std::future::Future<Output = bool>>(mut ready: impl FnMut() -> F) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !ready().await {
        assert!(Instant::now() < deadline, "timed out waiting");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// `calls` of `cmdstat_evalsha` in Redis's `INFO commandstats` (0 before any).
fn evalsha_calls(redis: &RedisServer) -> u64 {
    let info = redis.cli(&["INFO", "commandstats"]);
    info.lines()
        .find_map(|l| l.strip_prefix("cmdstat_evalsha:calls="))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_instances_on_one_key_stay_within_the_stated_bound() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("approx.yaml"), policy(LIMIT)).expect("write");
    let mut instances = Vec::new();
    for _ in 0..3 {
        instances.push(instance(&redis.url(), dir.path(), Duration::from_secs(10)).await);
    }
    // Every instance has beaten its heartbeat (so each sees N = 3) before the run.
    for i in &mut instances {
        assert!(allowed(&mut i.client, "warm-up").await);
    }
    for i in &instances {
        wait_for(|| async { metric(&i.running, "tollgate_approximate_instances ").await >= 3.0 }).await;
    }
    within_one_window(Duration::from_secs(14)).await;
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for i in &instances {
        for _ in 0..8 {
            let (mut client, stop) = (i.client.clone(), stop.clone());
            tasks.push(tokio::spawn(async move {
                let (mut admitted, mut sent) = (0u64, 0u64);
                while !stop.load(Ordering::Relaxed) {
                    admitted += u64::from(allowed(&mut client, "hammered").await);
                    sent += 1;
                }
                (admitted, sent)
            }));
        }
    }
    tokio::time::sleep(Duration::from_secs(10)).await;
    stop.store(true, Ordering::Relaxed);
    let (mut admitted, mut sent) = (0, 0);
    for task in tasks {
        let (a, s) = task.await.expect("client");
        admitted += a;
        sent += s;
    }
    for i in &instances {
        assert_eq!(failure_decisions(&i.running).await, 0.0, "a decision came from the failure policy");
    }
    let bound = bound(3, LIMIT);
    println!("admitted {admitted} of {sent} requests (limit {LIMIT}, stated bound +{bound})");
    assert!(sent > 3 * LIMIT, "the clients hammered ({sent} requests)");
    assert!(admitted >= LIMIT, "admitted {admitted}: under the limit");
    assert!(admitted <= LIMIT + bound, "admitted {admitted}: past {LIMIT} + {bound}");
    for i in instances {
        i.running.stop().await.expect("stop");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn buckets_nobody_charges_cost_redis_nothing_however_full() {
    // One window for the whole test: the counts it reads back are the current window's.
    within_one_window(Duration::from_secs(20)).await;
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("approx.yaml"), policy(LIMIT)).expect("write");
    let mut one = instance(&redis.url(), dir.path(), Duration::from_secs(10)).await;
    wait_ready(&one.running).await;
    // 20 buckets at 5 % of their limit: idle. Each is read once, before its first charge.
    for user in 0..20 {
        for _ in 0..50 {
            assert!(allowed(&mut one.client, &format!("idle-{user}")).await);
        }
    }
    assert_eq!(metric(&one.running, "tollgate_approximate_first_reads_total{result=\"ok\"} ").await, 20.0);
    wait_for(|| async { redis_total(&redis) >= 1000 }).await;
    redis.cli(&["CONFIG", "RESETSTAT"]);
    // Observe two seconds (8 intervals) with no traffic: no call at all.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(evalsha_calls(&redis), 0, "buckets nobody charges were sent");
    // More traffic on them: the calls carry the writes (idle buckets every 4 intervals).
    let started = Instant::now();
    for user in 0..20 {
        assert!(allowed(&mut one.client, &format!("idle-{user}")).await);
    }
    wait_for(|| async { redis_total(&redis) >= 1020 }).await;
    let intervals = started.elapsed().as_millis() as u64 / INTERVAL.as_millis() as u64 + 2;
    let calls = evalsha_calls(&redis);
    assert!(calls >= 1 && calls <= intervals, "{calls} calls in {intervals} intervals");
    assert_eq!(metric(&one.running, "tollgate_approximate_first_reads_total{result=\"ok\"} ").await, 20.0);
    // A hot bucket (90 %): written every half interval while it is charged (the shares
    // let one instance spend half the headroom per sync: charge until 900 are in)...
    let mut admitted = 0;
    while admitted < 900 {
        if allowed(&mut one.client, "hot").await {
            admitted += 1;
        } else {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    wait_for(|| async { redis_total(&redis) >= 1920 }).await;
    // ...and never read without traffic of its own, however full.
    tokio::time::sleep(INTERVAL).await;
    redis.cli(&["CONFIG", "RESETSTAT"]);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(evalsha_calls(&redis), 0, "a full bucket nobody charges was read");
    let usage = get(&one.running, "/v1/usage?domain=approx&descriptor=user=hot").await;
    assert!(usage.contains("\"tier\":\"hot\""), "{usage}");
    // `/v1/usage` reads Redis: the bucket approximate mode wrote, in exact mode's format.
    assert!(usage.contains("\"consumed\":900"), "{usage}");
    // The status page counts the buckets per tier.
    let status = get(&one.running, "/v1/status").await;
    assert!(status.contains("\"hot\":1"), "{status}");
    assert!(status.contains("\"idle\":20"), "{status}");
    assert_eq!(failure_decisions(&one.running).await, 0.0);
    one.running.stop().await.expect("stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_down_decisions_go_on_then_the_failure_policy_and_increments_are_kept() {
    within_one_window(Duration::from_secs(20)).await;
    let mut redis = RedisServer::start();
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("approx.yaml"), policy(LIMIT)).expect("write");
    let staleness = Duration::from_millis(1500);
    let mut one = instance(&redis.url(), dir.path(), staleness).await;
    wait_ready(&one.running).await;
    for _ in 0..10 {
        assert!(allowed(&mut one.client, "u").await);
    }
    wait_for(|| async {
        metric(&one.running, "tollgate_approximate_syncs_total{result=\"ok\"} ").await >= 1.0
    })
    .await;
    redis.stop();
    let down = Instant::now();
    // Within the staleness limit the estimates decide: admitted, and counted for later.
    let mut during = 0;
    while down.elapsed() < staleness / 2 {
        assert!(allowed(&mut one.client, "u").await, "denied while within the staleness limit");
        during += 1;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    wait_for(|| async {
        metric(&one.running, "tollgate_approximate_syncs_total{result=\"failed\"} ").await >= 1.0
    })
    .await;
    // Past it: the fail-closed domain denies.
    wait_for(|| {
        let mut client = one.client.clone();
        async move { !allowed(&mut client, "u").await }
    })
    .await;
    assert!(metric(&one.running, "tollgate_approximate_stale_decisions_total ").await >= 1.0);
    redis.restart();
    // Back: every admission made while Redis was down reaches it.
    let expected = 10 + during;
    wait_for(|| async { redis_total(&redis) >= expected }).await;
    assert!(allowed(&mut one.client, "u").await, "decisions from the estimates again");
    one.running.stop().await.expect("stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_between_exact_and_approximate_keeps_the_counts() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("approx.yaml");
    std::fs::write(&file, policy_as("exact", 100)).expect("write");
    within_one_window(Duration::from_secs(15)).await;
    let mut one = instance(&redis.url(), dir.path(), Duration::from_secs(10)).await;
    for _ in 0..60 {
        assert!(allowed(&mut one.client, "switch").await);
    }
    std::fs::write(&file, policy_as("approximate", 100)).expect("write");
    assert_eq!(reload(&one.running).await, 200);
    // Approximate now: decided exactly until the heartbeat has counted the instances, then
    // locally from a first read of Redis's count: the rest of the limit, within the
    // bound for one instance (L + 2; docs/scaling.md, "Approximate mode").
    let mut after = 0;
    let deadline = Instant::now() + Duration::from_secs(2);
    while Instant::now() < deadline {
        after += u64::from(allowed(&mut one.client, "switch").await);
    }
    assert!(after >= 40, "admitted {after} after the switch: the rest of the limit");
    assert!(after <= 42, "admitted {after} after the switch: past the bound");
    wait_for(|| async { redis_total(&redis) >= 60 + after }).await;
    // And back to exact: Redis holds what approximate mode admitted.
    std::fs::write(&file, policy_as("exact", 100)).expect("write");
    assert_eq!(reload(&one.running).await, 200);
    assert!(!allowed(&mut one.client, "switch").await, "exact mode sees approximate mode's counts");
    assert_eq!(failure_decisions(&one.running).await, 0.0);
    one.running.stop().await.expect("stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exact_only_server_sends_no_heartbeat() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("approx.yaml"), policy_as("exact", LIMIT)).expect("write");
    let mut one = instance(&redis.url(), dir.path(), Duration::from_secs(10)).await;
    assert!(allowed(&mut one.client, "u").await);
    // Observe four intervals: an instance with an approximate domain beats every one.
    tokio::time::sleep(INTERVAL * 4).await;
    let stats = redis.cli(&["INFO", "commandstats"]);
    assert!(!stats.contains("cmdstat_zadd"), "{stats}");
    assert_eq!(metric(&one.running, "tollgate_approximate_instances ").await, 1.0);
    one.running.stop().await.expect("stop");
}

/// The metric helpers read an absent series as a failure, never as 0.
#[test]
fn the_metric_helpers_refuse_what_is_not_exported() {
    let scrape = "# TYPE tollgate_decisions counter\n\
                  tollgate_decisions_total{domain=\"d\",rule=\"r\",result=\"failure_open\"} 0\n\
                  # TYPE tollgate_approximate_ready gauge\ntollgate_approximate_ready 1\n# EOF\n";
    assert_eq!(approx_support::series_in(scrape, "tollgate_approximate_ready"), 1.0);
    assert_eq!(approx_support::failure_decisions_in(scrape), 0.0);
    let missing =
        std::panic::catch_unwind(|| approx_support::series_in(scrape, "tollgate_approximate_readyz"));
    assert!(missing.is_err(), "a series that is not exported");
    let no_family = std::panic::catch_unwind(|| approx_support::failure_decisions_in("tollgate_x 1\n"));
    assert!(no_family.is_err(), "no failure_* series of tollgate_decisions_total");
}
