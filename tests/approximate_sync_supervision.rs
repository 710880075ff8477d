//! Approximate mode's sync task under supervision, on a real Redis at production flags
//! (default store timeout, sync interval and staleness): a sync task that dies is started
//! again, counted in `tollgate_approximate_sync_restarts_total`, and until its heartbeat
//! answers again the instance decides approximate domains exactly — a dead sync never
//! leaves it deciding from estimates that no longer sync (docs/scaling.md, "Approximate mode").
//!
//! The task is ended from outside (`Running::end_approximate_sync_task`, a test hook that
//! aborts it as a panic would end it); the panic itself is the unit test's
//! (`store::syncing::tests`).

#[allow(dead_code)]
#[path = "support/approx.rs"]
mod approx_support;
#[allow(dead_code)]
#[path = "support/redis.rs"]
mod redis_support;

use std::time::Duration;

use approx_support::{admin_get, failure_decisions_in, metric_sum_in, request};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use redis_support::RedisServer;
use tokio::time::Instant;
use tollgate::app::{Running, ServeSettings, StoreKind};
use tollgate::store::RedisSettings;
use tonic::transport::Channel;

const POLICY: &str =
    "domain: approx\nconsistency: approximate\nfailure_mode: closed\ndescriptors:\n  - key: user\n    \
                      rate_limit: { unit: minute, requests_per_unit: 1000, algorithm: sliding_window }\n";

/// The value of the unlabelled metric `name`: absent fails the test (never read as 0).
async fn metric(running: &Running, name: &str) -> f64 {
    let text = admin_get(running.admin_addr, "/metrics").await;
    metric_sum_in(&text, name).unwrap_or_else(|| panic!("{name} is not exported"))
}

/// Decisions answered by the failure policy (the series exist once one was counted).
async fn failure_decisions(running: &Running) -> f64 {
    failure_decisions_in(&admin_get(running.admin_addr, "/metrics").await)
}

async fn allowed(client: &mut RateLimitServiceClient<Channel>, user: &str) -> bool {
    let response = client.should_rate_limit(request(user)).await.expect("grpc").into_inner();
    response.overall_code == Code::Ok as i32
}

/// Polls `ready` every 5 ms for at most 20 s (a readiness poll, not a stated bound).
async fn wait_for<F: std::future::Future<Output = bool>>(mut ready: impl FnMut() -> F) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !ready().await {
        assert!(Instant::now() < deadline, "timed out waiting");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sync_task_that_dies_is_restarted_counted_and_its_domains_decided_exactly_meanwhile() {
    let mut redis = RedisServer::start();
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("approx.yaml"), POLICY).expect("write");
    let mut settings = ServeSettings::new(dir.path().to_path_buf());
    settings.store = StoreKind::Redis;
    settings.redis = RedisSettings::new(redis.url());
    settings.grpc_addr = "127.0.0.1:0".parse().expect("addr");
    settings.admin_addr = "127.0.0.1:0".parse().expect("addr");
    settings.drain = Duration::ZERO;
    settings.watch_config = false;
    let running = tollgate::app::spawn(settings).await.expect("app starts");
    let mut client =
        RateLimitServiceClient::connect(format!("http://{}", running.grpc_addr)).await.expect("connect");
    wait_for(|| async { metric(&running, "tollgate_approximate_ready").await == 1.0 }).await;
    assert_eq!(
        metric(&running, "tollgate_approximate_sync_restarts_total").await,
        0.0,
        "exported from startup"
    );
    for _ in 0..5 {
        assert!(allowed(&mut client, "u").await);
    }
    wait_for(|| async { metric(&running, "tollgate_approximate_syncs_total").await >= 1.0 }).await;

    // Redis down, the sync alive: the estimates decide (within the staleness limit).
    redis.stop();
    assert!(allowed(&mut client, "u").await, "decided from the estimate");
    assert_eq!(failure_decisions(&running).await, 0.0);

    // The sync dies: started again, counted, and the domain decided exactly meanwhile —
    // with Redis down, by the fail-closed failure policy, not from the estimate.
    assert!(running.end_approximate_sync_task(), "a sync task was running");
    wait_for(|| async { metric(&running, "tollgate_approximate_sync_restarts_total").await == 1.0 }).await;
    assert_eq!(metric(&running, "tollgate_approximate_ready").await, 0.0);
    assert!(!allowed(&mut client, "u").await, "decided from the estimate after the sync died");
    assert!(failure_decisions(&running).await >= 1.0, "not decided exactly");
    assert_eq!(metric(&running, "tollgate_approximate_stale_decisions_total").await, 0.0);

    // Redis back: the new task's heartbeat answers twice, an interval apart, and the
    // domain is decided locally again — still one restart.
    redis.restart();
    wait_for(|| async { metric(&running, "tollgate_approximate_ready").await == 1.0 }).await;
    let failures = failure_decisions(&running).await;
    assert!(allowed(&mut client, "v").await);
    assert_eq!(failure_decisions(&running).await, failures);
    assert_eq!(metric(&running, "tollgate_approximate_sync_restarts_total").await, 1.0);
    running.stop().await.expect("stop");
}
