//! Leases while Redis is out, on a real redis-server frozen with SIGSTOP: the returns of
//! unused tokens the breaker refuses wait only as long as their tokens take to refill,
//! and a request whose deadline passes while it waits for a block answers as a plain store
//! timeout would (docs/policies.md, "Leases").

#[allow(dead_code)]
#[path = "support/redis.rs"]
mod redis_support;
#[allow(dead_code)]
#[path = "api/support.rs"]
mod support;

use std::process::Command;
use std::time::{Duration, Instant};

use tollgate::app::StoreKind;
use tollgate::store::breaker::BreakerSettings;

use support::*;

/// GCRA, leased: 36,000 an hour is 10 a second, one token refills every 100 ms.
fn policies(failure_mode: &str) -> String {
    format!(
        "domain: {failure_mode}_d\nfailure_mode: {failure_mode}\ndescriptors:\n  - key: k\n    lease: true\n    \
         rate_limit: {{ unit: hour, requests_per_unit: 36000 }}\n  - key: plain\n    \
         rate_limit: {{ unit: hour, requests_per_unit: 36000 }}\n"
    )
}

fn signal(app: &mut TestApp, sig: &str) {
    let pid = app.redis().pid().expect("redis pid").to_string();
    assert!(Command::new("kill").args([sig, &pid]).status().expect("kill").success());
}

/// A series the server exports from startup (or from the lease sweeper's first tick).
async fn counter(app: &TestApp, series: &str) -> f64 {
    metric_value(&app.metrics().await, series)
}

/// Script calls Redis has run (`EVALSHA` and `EVAL`).
fn script_calls(app: &mut TestApp) -> u64 {
    let stats = app.redis().cli(&["INFO", "commandstats"]);
    stats
        .lines()
        .filter(|l| l.starts_with("cmdstat_evalsha:") || l.starts_with("cmdstat_eval:"))
        .filter_map(|l| l.split("calls=").nth(1)?.split(',').next()?.parse::<u64>().ok())
        .sum()
}

const DROPPED: &str = "tollgate_lease_returns_dropped_total{store=\"redis\",reason=";
const QUEUED: &str = "tollgate_lease_returns_queued{store=\"redis\"}";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn returns_refused_by_the_open_breaker_are_given_up_once_their_tokens_refilled() {
    let mut options = Options::new(StoreKind::Redis);
    options.store_timeout = Duration::from_millis(10);
    options.lease_time = Duration::from_secs(1);
    // A long cool-down: no probe (which a return batch could be) during the test.
    options.breaker = BreakerSettings { cooldown: Duration::from_secs(20), ..BreakerSettings::default() };
    let mut app = spawn_with(options, &[("closed.yaml", &policies("closed"))]).await;
    // 8 requests one after another: blocks of 2, 4 and 8 tokens; the last holds 7 unspent.
    let hot = request("closed_d", &[&[("k", "hot")]]);
    assert_eq!(app.allowed_of(8, &hot).await, 8);
    signal(&mut app, "-STOP");
    // Charges that wait out their 10 ms open the breaker long before the lease ends (1 s).
    for i in 0..10 {
        app.check(request("closed_d", &[&[("plain", &format!("p{i}"))]])).await;
    }
    assert!(counter(&app, "tollgate_breaker_opens_total{store=\"redis\"}").await >= 1.0, "breaker open");
    // The lease ends: its 7 tokens are refused by the breaker and queued; 7 tokens refill in
    // 700 ms at 10 a second, after which the return is given up, never sent.
    let queued = eventually(Duration::from_secs(3), || async { counter(&app, QUEUED).await == 1.0 }).await;
    assert!(queued, "the return is queued while the breaker is open");
    let seen = Instant::now();
    let dropped = eventually(Duration::from_secs(3), || async {
        counter(&app, &format!("{DROPPED}\"refilled\"}}")).await == 1.0
    })
    .await;
    let took = seen.elapsed();
    assert!(dropped, "given up once its tokens refilled");
    assert!(took < Duration::from_millis(900), "given up {took:?} after it was first seen queued");
    assert_eq!(counter(&app, QUEUED).await, 0.0);
    for reason in ["full", "failed", "window_end"] {
        assert_eq!(counter(&app, &format!("{DROPPED}\"{reason}\"}}")).await, 0.0, "{reason}");
    }
    signal(&mut app, "-CONT");
}

/// Sends `request` with `grpc-timeout: timeout`; the answer and how long it took.
async fn timed(
    app: &TestApp,
    request: envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest,
    timeout: Option<Duration>,
) -> (bool, Duration) {
    let mut call = tonic::Request::new(request);
    if let Some(timeout) = timeout {
        call.set_timeout(timeout);
    }
    let started = Instant::now();
    let response = app.client.clone().should_rate_limit(call).await.expect("never a gRPC error").into_inner();
    (!over(&response), started.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_out_of_time_answers_as_a_store_timeout() {
    for mode in ["closed", "open"] {
        let mut options = Options::new(StoreKind::Redis);
        // The block's charge waits 500 ms; the waiter's own deadline is 90 ms (a tenth
        // under its 100 ms grpc-timeout).
        options.store_timeout = Duration::from_millis(500);
        options.lease_time = Duration::from_secs(1);
        let mut app = spawn_with(options, &[("p.yaml", &policies(mode))]).await;
        let domain = format!("{mode}_d");
        let hot = request(&domain, &[&[("k", "hot")]]);
        assert_eq!(app.allowed_of(5, &hot).await, 5);
        // The lease ends and its tokens go back; the key's rate (5, under 2 lease times ago)
        // makes the next block.
        tokio::time::sleep(Duration::from_millis(1_400)).await;
        let timeouts = "tollgate_store_requests_total{store=\"redis\",outcome=\"timeout\"}";
        let before = counter(&app, timeouts).await;
        let calls = script_calls(&mut app);
        signal(&mut app, "-STOP");
        // The first request takes the block (its charge waits out 500 ms on the frozen
        // Redis); the second waits for it, with less time than the block takes.
        let first = {
            let (client, hot) = (app.client.clone(), hot.clone());
            tokio::spawn(async move { client.clone().should_rate_limit(hot).await.map(|r| r.into_inner()) })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        let (allowed, took) = timed(&app, hot.clone(), Some(Duration::from_millis(100))).await;
        assert!(
            took < Duration::from_millis(400),
            "{mode}: answered at its own deadline, not the block's: {took:?}"
        );
        assert_eq!(allowed, mode == "open", "{mode}: the failure policy");
        let first = first.await.expect("task").expect("never a gRPC error");
        assert_eq!(!over(&first), mode == "open", "{mode}: the block failed: the failure policy");
        // Counted as store timeouts, both.
        assert_eq!(counter(&app, timeouts).await - before, 2.0, "{mode}");
        signal(&mut app, "-CONT");
        // The block's charge is the only one written to the frozen Redis (it runs now): the
        // waiter sent nothing of its own, and started no block past its deadline.
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(script_calls(&mut app) - calls, 1, "{mode}: one block, nothing else");
    }
}
