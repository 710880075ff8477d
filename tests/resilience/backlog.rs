//! A charge never runs twice, and a frozen Redis must not build a backlog that charges the
//! past. Nothing is re-sent after a dropped connection or a timeout; commands outstanding
//! per connection are capped (`--redis-max-inflight`) and a connection silent for the
//! reply timeout is replaced — so when Redis resumes, the counts it holds match what
//! Tollgate admitted, within `max_inflight × connections`.

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

/// Without coalescing every waiting request holds a command on the connection: the cap is
/// what bounds the backlog, and it must have turned calls away.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_redis_builds_no_backlog_that_charges_answered_requests() {
    frozen_redis(false).await
}

/// With coalescing (the default) the requests on one key wait in the coalescer, not on the
/// connection; a batch counts as the charges it carries, so the same bound holds (whether
/// the cap is reached within the freeze depends on timing: not asserted).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_redis_builds_no_backlog_with_coalescing_either() {
    frozen_redis(true).await
}

async fn frozen_redis(coalesce: bool) {
    let mut options = Options::new(StoreKind::Redis);
    options.coalesce = coalesce;
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
    if !coalesce {
        let metrics = app.metrics().await;
        let overloaded = r#"tollgate_store_requests_total{store="redis",outcome="overloaded"}"#;
        assert!(metric_value(&metrics, overloaded) > 0.0, "the cap turned calls away during the freeze");
    }
}

/// The connection drops after Redis ran the script and before its reply arrived: the
/// charge is answered by the failure policy and never sent again (a re-send would charge
/// the bucket twice). The next request, on a fresh connection, sees exactly one charge.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_charge_whose_reply_was_lost_is_never_sent_again() {
    let redis = crate::redis_support::RedisServer::start();
    let front = crate::front_support::Front::to_port(redis.port());
    let mut options = Options::new(StoreKind::Redis);
    options.redis_url = Some(front.url());
    options.breaker = BreakerSettings { failures: 0, ..Default::default() };
    let app = spawn_with(options, &[POLICY]).await;
    let once = request("count", &[&[("k", "once")]]);
    assert!(!over(&app.check(once.clone()).await), "Redis answers through the front");

    front.cut_replies(true);
    assert!(over(&app.check(once.clone()).await), "a lost reply is a store failure (closed: denied)");
    front.cut_replies(false);
    let count = |redis: &crate::redis_support::RedisServer| -> u64 {
        let keys = redis.cli(&["KEYS", "tg:*"]);
        let key = keys.lines().find(|k| k.ends_with("4:once")).expect("the bucket").to_string();
        redis.cli(&["HGET", &key, "c"]).parse().expect("a count")
    };
    assert_eq!(count(&redis), 2, "the request whose reply was lost ran once, and only once");

    let back = eventually(Duration::from_secs(5), || async { !over(&app.check(once.clone()).await) }).await;
    assert!(back, "a fresh connection serves again");
    let settled = count(&redis);
    let response = app.check(once.clone()).await;
    assert_eq!(count(&redis), settled + 1, "one request, one charge");
    assert_eq!(response.statuses[0].limit_remaining as u64, 1_000_000 - settled - 1);
}
