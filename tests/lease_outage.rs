//! Leases while Redis is out, on a real redis-server frozen with SIGSTOP: the returns of
//! unused tokens the breaker refuses wait only as long as their tokens take to refill
//! (README, "Leases").

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

async fn counter(app: &TestApp, series: &str) -> f64 {
    metric(&app.metrics().await, series).unwrap_or(0.0)
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
