//! A frozen Redis must not build a backlog that charges the past: commands outstanding per
//! connection are capped (`--redis-max-inflight`), a connection silent for the reply
//! timeout is replaced, and nothing is re-sent — so when Redis resumes, the counts it
//! holds match what Tollgate admitted, within `max_inflight × connections`.

use std::time::Duration;

use tollgate::app::StoreKind;
use tollgate::store::breaker::BreakerSettings;

use crate::support::*;

/// A fixed window whose hash holds the exact number of charges that ran (`c`).
const POLICY: (&str, &str) = (
    "count.yaml",
    "domain: count\nfailure_mode: closed\ndescriptors:\n  - key: k\n    rate_limit: { unit: hour, requests_per_unit: 1000000, algorithm: fixed_window }\n",
);

const MAX_INFLIGHT: usize = 8;
const CONNECTIONS: usize = 2;

fn signal(pid: u32, sig: &str) {
    let ok = std::process::Command::new("kill").args([sig, &pid.to_string()]).status().expect("kill");
    assert!(ok.success(), "kill {sig} {pid}");
}

/// The count Redis holds for the bucket of value `all`.
fn charged(app: &mut TestApp) -> u64 {
    let keys = app.redis().cli(&["KEYS", "tg:*"]);
    let key = keys.lines().find(|k| k.ends_with("3:all")).unwrap_or_else(|| panic!("no bucket in {keys:?}"));
    let key = key.to_string();
    app.redis().cli(&["HGET", &key, "c"]).parse().unwrap_or_else(|e| panic!("count of {key}: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_redis_builds_no_backlog_that_charges_answered_requests() {
    let mut options = Options::new(StoreKind::Redis);
    // Long enough that no call times out on a live Redis (the only excess is the backlog).
    options.store_timeout = Duration::from_millis(250);
    // No breaker: the cap and the connection lifecycle alone must hold the bound.
    options.breaker = BreakerSettings { failures: 0, ..Default::default() };
    options.max_inflight = MAX_INFLIGHT;
    options.redis_connections = CONNECTIONS;
    let mut app = spawn_with(options, &[POLICY]).await;
    let all = request("count", &[&[("k", "all")]]);
    assert!(!over(&app.check(all.clone()).await), "Redis answers before the freeze");
    let pid = app.redis().pid().expect("redis pid");

    let traffic = Traffic::start(&app.client, &all, 32);
    tokio::time::sleep(Duration::from_millis(300)).await; // traffic against a live Redis
    signal(pid, "-STOP");
    tokio::time::sleep(Duration::from_secs(2)).await; // the fault lasts 2 s
                                                      // Every request is answered (by the failure policy) before Redis resumes: whatever
                                                      // Redis then runs for this bucket is backlog.
    let report = traffic.stop().await;
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    signal(pid, "-CONT");
    let probe = request("count", &[&[("k", "probe")]]);
    let resumed =
        eventually(Duration::from_secs(5), || async { !over(&app.check(probe.clone()).await) }).await;
    assert!(resumed, "Redis answers again after SIGCONT");

    // Admitted: answered OK (+1, the request before the freeze).
    let admitted = report.allowed as u64 + 1;
    let count = charged(&mut app);
    let bound = (MAX_INFLIGHT * CONNECTIONS) as u64;
    println!(
        "figures: frozen 2 s under 32 clients: {} requests, {admitted} admitted, Redis count {count} (bound +{bound})",
        report.requests
    );
    assert!(count >= admitted, "every admitted request was charged: {count} < {admitted}");
    assert!(
        count <= admitted + bound,
        "backlog charged {} answered requests (bound {bound})",
        count - admitted
    );
    let metrics = app.metrics().await;
    let overloaded = r#"tollgate_store_requests_total{store="redis",outcome="overloaded"}"#;
    assert!(metric(&metrics, overloaded).unwrap_or(0.0) > 0.0, "the cap turned calls away during the freeze");
}
