//! Approximate mode against the rest of the request surface, on a real Redis at production
//! flags (default store timeout, reply timeout, sync interval and staleness; instances
//! used the moment `spawn` returns): a charge larger than one instance's share (alone and
//! in an `all_or_nothing` group), a peek on an instance that never read the bucket, and an
//! operator's reset through one instance seen by another that only denies (docs/scaling.md,
//! "Approximate mode"; issue 37, holes 1–3).
//!
//! Every domain fails closed, so a failure-policy answer is a denial that would look like
//! the limit working: each test reads `tollgate_decisions_total` and fails if the metric is
//! not exported (absent is never read as 0).

#[allow(dead_code)]
#[path = "support/approx.rs"]
mod approx_support;
#[allow(dead_code)]
#[path = "support/redis.rs"]
mod redis_support;

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use approx_support::{admin_get, reset, within_one_window};
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::UInt64Value;
use redis_support::RedisServer;
use tokio::time::Instant;
use tollgate::app::{Running, ServeSettings, StoreKind};
use tollgate::store::RedisSettings;
use tonic::transport::Channel;

/// Two domains: `approx` (one limit per user, 10 a minute) and `grouped` (`all_or_nothing`:
/// a user's 10 a minute and an org's 100).
const POLICIES: &[(&str, &str)] = &[
    (
        "approx.yaml",
        "domain: approx\nconsistency: approximate\nfailure_mode: closed\ndescriptors:\n  - key: user\n    \
         rate_limit: { unit: minute, requests_per_unit: 10, algorithm: fixed_window }\n",
    ),
    (
        "grouped.yaml",
        "domain: grouped\nconsistency: approximate\nfailure_mode: closed\ncharge: all_or_nothing\ndescriptors:\n  \
         - key: user\n    rate_limit: { unit: minute, requests_per_unit: 10, algorithm: sliding_window }\n  \
         - key: org\n    rate_limit: { unit: minute, requests_per_unit: 100, algorithm: sliding_window }\n",
    ),
];

struct Instance {
    running: Running,
    client: RateLimitServiceClient<Channel>,
}

/// An instance at production flags but for the ports, the config watch, the drain and an
/// admin port that takes `/v1/reset` without a token.
async fn instance(redis_url: &str, config: &Path) -> Instance {
    let mut settings = ServeSettings::new(config.to_path_buf());
    settings.store = StoreKind::Redis;
    settings.redis = RedisSettings::new(redis_url);
    settings.grpc_addr = "127.0.0.1:0".parse().expect("addr");
    settings.admin_addr = "127.0.0.1:0".parse().expect("addr");
    settings.drain = Duration::ZERO;
    settings.watch_config = false;
    settings.admin_allow_unauthenticated_reset = true;
    let running = tollgate::app::spawn(settings).await.expect("app starts");
    let client =
        RateLimitServiceClient::connect(format!("http://{}", running.grpc_addr)).await.expect("connect");
    Instance { running, client }
}

fn config_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    for (name, body) in POLICIES {
        std::fs::write(dir.path().join(name), body).expect("write");
    }
    dir
}

/// A descriptor `key = value` with its own `hits_addend` (`Some(0)`: a peek).
fn descriptor(key: &str, value: &str, hits: Option<u64>) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: vec![Entry { key: key.into(), value: value.into() }],
        hits_addend: hits.map(|value| UInt64Value { value }),
        ..Default::default()
    }
}

async fn ask(
    client: &mut RateLimitServiceClient<Channel>,
    domain: &str,
    descriptors: Vec<RateLimitDescriptor>,
) -> RateLimitResponse {
    let request = RateLimitRequest { domain: domain.into(), descriptors, hits_addend: 0 };
    client.should_rate_limit(request).await.expect("grpc").into_inner()
}

/// `hits` of `user` in the `approx` domain: OK or not, and the remaining it answered.
async fn charge(instance: &mut Instance, user: &str, hits: u64) -> (bool, u32) {
    charge_in(instance, "approx", user, hits).await
}

/// `hits` of `user` in `domain` (its only descriptor).
async fn charge_in(instance: &mut Instance, domain: &str, user: &str, hits: u64) -> (bool, u32) {
    let response = ask(&mut instance.client, domain, vec![descriptor("user", user, Some(hits))]).await;
    let remaining = response.statuses.first().map_or(u32::MAX, |s| s.limit_remaining);
    (response.overall_code == Code::Ok as i32, remaining)
}

/// Decisions answered by the failure policy; the metric must be exported.
async fn failure_decisions(admin: SocketAddr) -> f64 {
    let text = admin_get(admin, "/metrics").await;
    let series: Vec<&str> = text.lines().filter(|l| l.starts_with("tollgate_decisions_total{")).collect();
    assert!(!series.is_empty(), "tollgate_decisions_total is not exported");
    series
        .iter()
        .filter(|l| l.contains("result=\"failure_"))
        .map(|l| l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()).expect("a sample value"))
        .sum()
}

/// The current window's count Redis holds for the bucket whose key holds `part` (0: no
/// such bucket).
fn redis_count(redis: &RedisServer, part: &str) -> u64 {
    let script = "local n = 0 for _, k in ipairs(redis.call('KEYS', '*' .. ARGV[1] .. '*')) do \
                  n = n + tonumber(redis.call('HGET', k, 'c') or 0) end return n";
    redis.cli(&["EVAL", script, "0", part]).trim().parse().expect("a count")
}

/// Polls `ready` every 5 ms for at most 10 s.
async fn wait_for<F: std::future::Future<Output = bool>>(what: &str, mut ready: impl FnMut() -> F) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !ready().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Spends `user`'s whole bucket (10) in `domain` through `instance` one hit at a time (a
/// share denial waits for the next sync), and waits until Redis holds all 10.
async fn spend_by_ones(instance: &mut Instance, redis: &RedisServer, domain: &str, user: &str) {
    let (mut spent, deadline) = (0, Instant::now() + Duration::from_secs(10));
    while spent < 10 {
        assert!(Instant::now() < deadline, "spent only {spent} of 10");
        if charge_in(instance, domain, user, 1).await.0 {
            spent += 1;
        } else {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    wait_for("the spent bucket in Redis", || async { redis_count(redis, user) == 10 }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_charge_larger_than_a_share_is_decided_as_exact_mode_would() {
    within_one_window(Duration::from_secs(20)).await;
    let redis = RedisServer::start();
    let dir = config_dir();
    let mut a = instance(&redis.url(), dir.path()).await;
    let mut b = instance(&redis.url(), dir.path()).await;
    // 6 of an empty 10: more than any share (⌈10 / 2N⌉ ≤ 5), admitted as exact mode would.
    assert_eq!(charge(&mut a, "big", 6).await, (true, 4), "6 of an empty 10");
    assert_eq!(redis_count(&redis, "big"), 6, "charged in Redis at once");
    // The other instance sees it: 5 more do not fit, 4 do.
    assert_eq!(charge(&mut b, "big", 5).await, (false, 0), "5 more past the limit");
    assert_eq!(charge(&mut b, "big", 4).await, (true, 0), "the last 4");
    assert_eq!(redis_count(&redis, "big"), 10);
    // A charge of the whole limit on an empty bucket, then nothing more on either.
    assert_eq!(charge(&mut a, "whole", 10).await, (true, 0), "the whole limit at once");
    assert!(!charge(&mut b, "whole", 1).await.0, "the other instance reads it spent");
    assert!(!charge(&mut a, "whole", 1).await.0, "the instance that charged it knows it spent");
    // Past the limit: denied, as exact mode would, and nothing charged.
    assert!(!charge(&mut a, "over", 11).await.0);
    assert_eq!(redis_count(&redis, "over"), 0);
    // One hit is still decided locally, within the share.
    assert_eq!(charge(&mut b, "small", 1).await, (true, 9));
    assert_eq!(failure_decisions(a.running.admin_addr).await, 0.0, "a failure-policy answer");
    assert_eq!(failure_decisions(b.running.admin_addr).await, 0.0, "a failure-policy answer");
    a.running.stop().await.expect("stop");
    b.running.stop().await.expect("stop");
}

/// A refund this instance has not synced yet still counts for a charge larger than a
/// share: a bucket spent and given back is empty, and the whole limit fits (seen in the
/// soak: a hit charged and synced, refunded, then 40 of 40 denied within the window).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_charge_larger_than_a_share_counts_a_refund_not_yet_synced() {
    within_one_window(Duration::from_secs(15)).await;
    let redis = RedisServer::start();
    let dir = config_dir();
    let mut a = instance(&redis.url(), dir.path()).await;
    for round in 0..5 {
        let user = format!("given-back-{round}");
        assert!(charge(&mut a, &user, 1).await.0, "read and charged");
        wait_for("the hit synced", || async { redis_count(&redis, &user) == 1 }).await;
        let response = ask(&mut a.client, "approx", vec![refund(&user, 1)]).await;
        assert_eq!(response.overall_code, Code::Ok as i32, "a refund is always allowed");
        assert_eq!(
            charge(&mut a, &user, 10).await,
            (true, 0),
            "round {round}: the whole limit of an empty bucket"
        );
    }
    assert_eq!(failure_decisions(a.running.admin_addr).await, 0.0, "a failure-policy answer");
    a.running.stop().await.expect("stop");
}

fn refund(user: &str, hits: u64) -> RateLimitDescriptor {
    RateLimitDescriptor { is_negative_hits: true, ..descriptor("user", user, Some(hits)) }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_charge_larger_than_a_share_answers_the_failure_mode_when_redis_misses_its_deadline() {
    within_one_window(Duration::from_secs(15)).await;
    let redis = RedisServer::start();
    let dir = config_dir();
    let mut a = instance(&redis.url(), dir.path()).await;
    assert!(charge(&mut a, "stalled", 1).await.0, "read and charged");
    let before = failure_decisions(a.running.admin_addr).await;
    // Redis takes no command for a second: the big charge's call misses the store timeout.
    redis.cli(&["CLIENT", "PAUSE", "1000", "ALL"]);
    assert!(!charge(&mut a, "stalled", 6).await.0, "the closed failure mode denies");
    assert_eq!(failure_decisions(a.running.admin_addr).await, before + 1.0, "answered by the failure mode");
    // A charge within the share is still decided locally meanwhile.
    assert!(charge(&mut a, "stalled", 1).await.0, "decided on the estimate");
    a.running.stop().await.expect("stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_with_a_charge_larger_than_a_share_is_charged_all_or_nothing() {
    within_one_window(Duration::from_secs(20)).await;
    let redis = RedisServer::start();
    let dir = config_dir();
    let mut a = instance(&redis.url(), dir.path()).await;
    let mut b = instance(&redis.url(), dir.path()).await;
    let group =
        |hits: u64| vec![descriptor("user", "grp", Some(hits)), descriptor("org", "acme", Some(hits))];
    let ok = |r: &RateLimitResponse| r.overall_code == Code::Ok as i32;
    // 6 of the user's 10 (more than a share) and of the org's 100 (less): both, exactly.
    assert!(ok(&ask(&mut a.client, "grouped", group(6)).await), "6 of an empty group");
    assert_eq!((redis_count(&redis, "grp"), redis_count(&redis, "acme")), (6, 6));
    // 6 more through the other instance: the user's bucket would pass its limit, so
    // neither is charged.
    assert!(!ok(&ask(&mut b.client, "grouped", group(6)).await), "past the user's limit");
    assert_eq!((redis_count(&redis, "grp"), redis_count(&redis, "acme")), (6, 6), "all or nothing");
    assert!(ok(&ask(&mut b.client, "grouped", group(4)).await), "the user's last 4");
    assert_eq!((redis_count(&redis, "grp"), redis_count(&redis, "acme")), (10, 10));
    assert_eq!(failure_decisions(a.running.admin_addr).await, 0.0);
    assert_eq!(failure_decisions(b.running.admin_addr).await, 0.0);
    a.running.stop().await.expect("stop");
    b.running.stop().await.expect("stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peek_on_an_instance_that_never_read_the_bucket_reads_it_first() {
    within_one_window(Duration::from_secs(20)).await;
    let redis = RedisServer::start();
    let dir = config_dir();
    let mut a = instance(&redis.url(), dir.path()).await;
    let mut b = instance(&redis.url(), dir.path()).await;
    spend_by_ones(&mut a, &redis, "approx", "peeked").await;
    // B never read the bucket: its peek answers what Redis holds (a peek at the limit is
    // OVER_LIMIT with 0 remaining, as in exact mode), every time.
    for _ in 0..3 {
        assert_eq!(charge(&mut b, "peeked", 0).await, (false, 0), "B's peek of a spent bucket");
    }
    // In an `all_or_nothing` group too.
    spend_by_ones(&mut a, &redis, "grouped", "peeked-grp").await;
    let peeks = vec![descriptor("user", "peeked-grp", Some(0)), descriptor("org", "peeked-org", Some(0))];
    let response = ask(&mut b.client, "grouped", peeks).await;
    assert_eq!(response.statuses[0].limit_remaining, 0, "{response:?}");
    assert_eq!(response.statuses[1].limit_remaining, 100, "{response:?}");
    assert_eq!(failure_decisions(b.running.admin_addr).await, 0.0);
    a.running.stop().await.expect("stop");
    b.running.stop().await.expect("stop");
}

/// How soon after another instance's spend is in Redis a peek reports it: a peek of a
/// bucket last read a sync interval (250 ms) ago or more reads it again first. Generous
/// for a loaded machine; without the read again it never does.
const PEEK_DELAY: Duration = Duration::from_millis(1_000);

/// Peeks through `peek` (whether it answered OK, and the remaining) until it answers
/// `OVER_LIMIT`, 0 remaining, within [`PEEK_DELAY`] of `since`; then keeps peeking for
/// half a second, never seeing more room than the spent bucket has.
async fn peeks_see_spent<F: std::future::Future<Output = (bool, u32)>>(
    what: &str,
    since: Instant,
    mut peek: impl FnMut() -> F,
) {
    loop {
        let answer = peek().await;
        if answer == (false, 0) {
            break;
        }
        assert!(
            since.elapsed() < PEEK_DELAY,
            "{what}: still answers {answer:?} {:?} after the spend",
            since.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let until = Instant::now() + Duration::from_millis(500);
    while Instant::now() < until {
        assert_eq!(peek().await, (false, 0), "{what}: a later peek of the spent bucket");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peek_on_a_bucket_read_once_sees_it_spent_once_redis_holds_the_spend() {
    within_one_window(Duration::from_secs(20)).await;
    let redis = RedisServer::start();
    let dir = config_dir();
    let mut a = instance(&redis.url(), dir.path()).await;
    let mut b = instance(&redis.url(), dir.path()).await;
    // B reads the bucket once (a peek at level 0), then only peeks: nothing it sends.
    assert_eq!(charge(&mut b, "read-once", 0).await, (true, 10), "B's first peek");
    spend_by_ones(&mut a, &redis, "approx", "read-once").await;
    let since = Instant::now();
    let client = b.client.clone();
    peeks_see_spent("B's peek", since, || {
        let mut client = client.clone();
        async move {
            let response = ask(&mut client, "approx", vec![descriptor("user", "read-once", Some(0))]).await;
            let remaining = response.statuses.first().map_or(u32::MAX, |s| s.limit_remaining);
            (response.overall_code == Code::Ok as i32, remaining)
        }
    })
    .await;
    // A group's peek too: the user's bucket spent by A, the org's untouched.
    let group =
        || vec![descriptor("user", "read-once-grp", Some(0)), descriptor("org", "read-once-org", Some(0))];
    let first = ask(&mut b.client, "grouped", group()).await;
    assert_eq!(first.statuses[0].limit_remaining, 10, "{first:?}");
    spend_by_ones(&mut a, &redis, "grouped", "read-once-grp").await;
    let since = Instant::now();
    peeks_see_spent("B's group peek", since, || {
        let mut client = client.clone();
        async move {
            let response = ask(&mut client, "grouped", group()).await;
            assert_eq!(response.statuses[1].limit_remaining, 100, "{response:?}");
            (response.overall_code == Code::Ok as i32, response.statuses[0].limit_remaining)
        }
    })
    .await;
    assert_eq!(failure_decisions(b.running.admin_addr).await, 0.0);
    a.running.stop().await.expect("stop");
    b.running.stop().await.expect("stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_through_one_instance_is_seen_within_a_second_by_one_that_only_denies() {
    within_one_window(Duration::from_secs(25)).await;
    let redis = RedisServer::start();
    let dir = config_dir();
    let mut a = instance(&redis.url(), dir.path()).await;
    let mut b = instance(&redis.url(), dir.path()).await;
    spend_by_ones(&mut a, &redis, "approx", "reset").await;
    // B reads it spent and only denies (a local denial writes nothing, so B never syncs it).
    for _ in 0..5 {
        assert!(!charge(&mut b, "reset", 1).await.0, "B denies the spent bucket");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(reset(a.running.admin_addr, "domain=approx&descriptor=user%3Dreset").await, 200);
    let reset_at = Instant::now();
    assert!(charge(&mut a, "reset", 1).await.0, "the instance that reset it admits at once");
    let mut seen = None;
    while reset_at.elapsed() < Duration::from_secs(5) {
        if charge(&mut b, "reset", 1).await.0 {
            seen = Some(reset_at.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let seen = seen.expect("B still denies the reset bucket 5 s later");
    println!("B saw the reset after {} ms", seen.as_millis());
    assert!(seen <= Duration::from_secs(1), "B saw the reset after {seen:?}");
    assert_eq!(failure_decisions(a.running.admin_addr).await, 0.0);
    assert_eq!(failure_decisions(b.running.admin_addr).await, 0.0);
    a.running.stop().await.expect("stop");
    b.running.stop().await.expect("stop");
}
