//! Redis killed, frozen (SIGSTOP) and restarted under traffic; the circuit breaker; and,
//! through a TCP front, a failover behind a stable address, silent connections and a slow
//! connection set-up.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tollgate::app::StoreKind;
use tollgate::store::breaker::BreakerSettings;

use crate::front_support::Front;
use crate::support::*;

/// Store deadline of these tests, and the margin a response may take beyond it.
const DEADLINE: Duration = Duration::from_millis(100);
const MARGIN: Duration = Duration::from_millis(900);

const POLICIES: [(&str, &str); 3] = [
    ("open.yaml", "domain: open_d\nfailure_mode: open\ndescriptors:\n  - key: k\n    rate_limit: { unit: minute, requests_per_unit: 5 }\n"),
    ("closed.yaml", "domain: closed_d\nfailure_mode: closed\ndescriptors:\n  - key: k\n    rate_limit: { unit: minute, requests_per_unit: 5 }\n"),
    ("local.yaml", "domain: local_d\nfailure_mode: local\ndescriptors:\n  - key: k\n    rate_limit: { unit: minute, requests_per_unit: 5 }\n"),
];

async fn app(breaker: BreakerSettings) -> TestApp {
    let mut options = Options::new(StoreKind::Redis);
    options.store_timeout = DEADLINE;
    options.breaker = breaker;
    spawn_with(options, &POLICIES).await
}

/// Sends `n` requests for `key` in `domain`, each checked against the deadline; returns
/// how many were allowed. Panics on a gRPC error or a late answer.
async fn send(app: &TestApp, domain: &str, key: &str, n: usize) -> usize {
    let mut allowed = 0;
    let mut worst = Duration::ZERO;
    for _ in 0..n {
        let started = Instant::now();
        let response = app.call(request(domain, &[&[("k", key)]])).await.expect("never a gRPC error");
        let took = started.elapsed();
        assert!(took < DEADLINE + MARGIN, "{domain}: answered after {took:?}");
        worst = worst.max(took);
        if !over(&response) {
            allowed += 1;
        }
    }
    // Figures for docs/reliability.md (`cargo test --test resilience -- --nocapture`).
    println!("figures: {domain}/{key}: {allowed}/{n} allowed, 0 errors, worst {worst:?}");
    allowed
}

async fn each_domain_follows_its_policy(app: &TestApp, tag: &str) {
    assert_eq!(send(app, "open_d", tag, 8).await, 8, "open: everything passes");
    assert_eq!(send(app, "closed_d", tag, 8).await, 0, "closed: nothing passes");
    assert_eq!(send(app, "local_d", tag, 8).await, 5, "local: limited in memory");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_killed_under_load() {
    let mut app = app(BreakerSettings::default()).await;
    let app_ref = &app;
    assert_eq!(send(app_ref, "closed_d", "warm", 1).await, 1);
    // Traffic from 8 tasks while Redis dies: no gRPC error at any point.
    let traffic = Traffic::start(&app.client, &request("open_d", &[&[("k", "load")]]), 8);
    tokio::time::sleep(Duration::from_millis(200)).await; // let the traffic run against Redis
    app.redis().stop();
    each_domain_follows_its_policy(&app, "after-kill").await;
    let report = traffic.stop().await;
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    assert!(report.requests > 8, "traffic ran: {}", report.requests);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_frozen_then_resumed() {
    let mut app = app(BreakerSettings::default()).await;
    assert_eq!(send(&app, "closed_d", "warm", 1).await, 1);
    let pid = app.redis().pid().expect("redis pid").to_string();
    assert!(std::process::Command::new("kill").args(["-STOP", &pid]).status().expect("kill").success());
    each_domain_follows_its_policy(&app, "frozen").await;
    assert!(std::process::Command::new("kill").args(["-CONT", &pid]).status().expect("kill").success());
    let started = Instant::now();
    let app = Arc::new(app);
    let recovered = eventually(Duration::from_secs(10), || {
        let app = app.clone();
        async move { !over(&app.check(request("closed_d", &[&[("k", "resumed")]])).await) }
    })
    .await;
    assert!(recovered, "limiting resumes after SIGCONT");
    assert!(started.elapsed() < Duration::from_secs(5), "recovered in {:?}", started.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_request_after_a_restart_succeeds() {
    let mut app = app(BreakerSettings::default()).await;
    assert_eq!(send(&app, "closed_d", "r", 2).await, 2);
    // Restarted: data, script cache and every open connection are gone.
    app.redis().restart();
    let response = app.check(request("closed_d", &[&[("k", "r")]])).await;
    assert!(!over(&response), "answered by Redis (fresh connection, NOSCRIPT → EVAL)");
    assert_eq!(response.statuses[0].limit_remaining, 4, "a fresh bucket in the restarted Redis");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn breaker_opens_after_the_configured_failures_and_closes_after_recovery() {
    // A 10 s window: the three failures count together however slow the machine is.
    let settings = BreakerSettings {
        failures: 3,
        window: Duration::from_secs(10),
        cooldown: Duration::from_millis(300),
        ..Default::default()
    };
    let mut app = app(settings).await;
    assert_eq!(send(&app, "closed_d", "warm", 1).await, 1);
    // 1 success, then the failures: 2 of 3 calls failed (over the 0.5 rate) but under the
    // minimum of 3; the third opens it.
    let state = r#"tollgate_breaker_state{store="redis"}"#;
    let opens = r#"tollgate_breaker_opens_total{store="redis"}"#;
    let rejected = r#"tollgate_store_requests_total{store="redis",outcome="circuit_open"}"#;
    assert_eq!(metric(&app.metrics().await, state), Some(0.0));
    app.redis().stop();
    for _ in 0..2 {
        send(&app, "closed_d", "x", 1).await;
    }
    assert_eq!(metric(&app.metrics().await, state), Some(0.0), "2 failures: still closed");
    send(&app, "closed_d", "x", 1).await;
    let text = app.metrics().await;
    assert_eq!(metric(&text, state), Some(1.0), "3 failures: open");
    assert_eq!(metric(&text, opens), Some(1.0));
    // Open: answered by the failure policy at once, without calling Redis.
    let started = Instant::now();
    assert_eq!(send(&app, "closed_d", "x", 5).await, 0);
    assert!(started.elapsed() < Duration::from_millis(100), "{:?}", started.elapsed());
    assert_eq!(metric(&app.metrics().await, rejected), Some(5.0));

    app.redis().restart();
    let app = Arc::new(app);
    let closed = eventually(Duration::from_secs(10), || {
        let app = app.clone();
        async move { !over(&app.check(request("closed_d", &[&[("k", "back")]])).await) }
    })
    .await;
    assert!(closed, "a probe after the cool-down closes the breaker");
    assert_eq!(metric(&app.metrics().await, state), Some(0.0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_demoted_master_answering_readonly_is_a_store_failure_until_promoted_again() {
    let mut app = app(BreakerSettings { failures: 0, ..Default::default() }).await;
    assert_eq!(send(&app, "closed_d", "ro", 1).await, 1);
    // As after a failover: our Redis becomes a replica (of nothing reachable) and answers
    // every script with READONLY.
    let dead = crate::redis_support::free_port().to_string();
    assert_eq!(app.redis().cli(&["REPLICAOF", "127.0.0.1", &dead]), "OK");
    assert_eq!(send(&app, "closed_d", "ro", 3).await, 0, "closed domain denies");
    assert_eq!(send(&app, "open_d", "ro", 3).await, 3, "open domain allows");
    assert_eq!(app.redis().cli(&["REPLICAOF", "NO", "ONE"]), "OK");
    let app = Arc::new(app);
    let back = eventually(Duration::from_secs(5), || {
        let app = app.clone();
        async move { !over(&app.check(request("closed_d", &[&[("k", "promoted")]])).await) }
    })
    .await;
    assert!(back, "serves again once the node is a master");
}

// Faults of the path between Tollgate and Redis, produced by a TCP front
// (`tests/support/front.rs`): Tollgate → front → Redis, the app owning no Redis itself.
// "Answered by Redis" is a fresh bucket of the fail-closed domain allowed with 4 left: the
// failure policy would deny it.

/// An app whose Redis URL is the front's.
async fn app_behind(front: &Front, store_timeout: Duration) -> TestApp {
    let mut options = Options::new(StoreKind::Redis);
    options.store_timeout = store_timeout;
    options.redis_url = Some(front.url());
    spawn_with(options, &POLICIES).await
}

/// Whether one request for a fresh bucket (`tag` and a counter) was answered by Redis.
async fn answered_by_redis(app: &TestApp, tag: &str) -> bool {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let key = format!("{tag}-{}", NEXT.fetch_add(1, Ordering::Relaxed));
    let response = app.check(request("closed_d", &[&[("k", &key)]])).await;
    !over(&response) && response.statuses[0].limit_remaining == 4
}

/// Polls until a request is answered by Redis; how long that took, or `None` after `within`.
async fn recovers(app: &Arc<TestApp>, tag: &'static str, within: Duration) -> Option<Duration> {
    let started = Instant::now();
    let recovered = eventually(within, || {
        let app = app.clone();
        async move { answered_by_redis(&app, tag).await }
    })
    .await;
    let took = started.elapsed();
    println!("figures: {tag}: recovered {recovered} after {took:?}");
    recovered.then_some(took)
}

/// Of `n` requests in a row, how many were answered by Redis.
async fn steadily(app: &TestApp, tag: &str, n: usize) -> usize {
    let mut answered = 0;
    for _ in 0..n {
        answered += usize::from(answered_by_redis(app, tag).await);
    }
    answered
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_behind_a_stable_address() {
    let (old, new) = (RedisServer::start(), RedisServer::start());
    let front = Front::to_port(old.port());
    let app = Arc::new(app_behind(&front, DEADLINE).await);
    // Several requests: every kept connection is open to the old master.
    assert_eq!(steadily(&app, "before", 10).await, 10);
    assert!(old.cli(&["DBSIZE"]) != "0" && front.stats().to_client > 0, "served through the front");
    // The failover: the old master stays up as a replica of the new one (answering every
    // write with READONLY), and the stable address now leads to the new master.
    assert_eq!(old.cli(&["REPLICAOF", "127.0.0.1", &new.port().to_string()]), "OK");
    front.set_target_port(new.port());
    let took = recovers(&app, "failover", Duration::from_secs(2)).await;
    assert!(took.is_some(), "a fail-closed domain is answered by Redis again within 2 s");
    // Not by luck of a request landing on a new connection: every later one too.
    assert_eq!(steadily(&app, "failover-then", 10).await, 10, "then steadily: {:?}", front.stats());
    assert!(new.cli(&["KEYS", "*failover*"]).contains("failover"), "charged on the new master");
    let readonly = r#"tollgate_redis_connections_replaced_total{store="redis",reason="readonly"}"#;
    assert!(metric(&app.metrics().await, readonly) >= Some(1.0), "READONLY connections taken out");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_connections_are_replaced() {
    let redis = RedisServer::start();
    let front = Front::to_port(redis.port());
    let app = Arc::new(app_behind(&front, DEADLINE).await);
    assert_eq!(steadily(&app, "before", 10).await, 10);
    // Every open connection now swallows bytes both ways, without FIN or RST; new ones work.
    front.silence_existing();
    let took = recovers(&app, "silent", Duration::from_secs(5)).await;
    assert!(took.is_some(), "answered by Redis again within 5 s: {:?}", front.stats());
    assert_eq!(steadily(&app, "after", 10).await, 10, "and then steadily");
    let silent = r#"tollgate_redis_connections_replaced_total{store="redis",reason="no_reply"}"#;
    assert!(metric(&app.metrics().await, silent) >= Some(1.0), "silent connections replaced");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_connection_setup_still_connects() {
    let redis = RedisServer::start();
    let front = Front::to_port(redis.port());
    // Each connection's first answer (its set-up) takes 30 ms, three request deadlines.
    front.delay_first_bytes(Duration::from_millis(30));
    let app = Arc::new(app_behind(&front, Duration::from_millis(10)).await);
    let took = recovers(&app, "slow-setup", Duration::from_secs(2)).await;
    assert!(took.is_some(), "connected despite a set-up longer than the deadline: {:?}", front.stats());
    // Then served from the connection made: a stray late answer on a busy host is tolerated.
    let answered = steadily(&app, "slow-setup-then", 20).await;
    assert!(answered >= 15, "{answered} of 20 answered by Redis: {:?}", front.stats());
}

/// Sends `kill -<signal>` to the app's Redis (STOP freezes it, CONT resumes it).
fn signal(app: &mut TestApp, signal: &str) {
    let pid = app.redis().pid().expect("redis pid").to_string();
    let status = std::process::Command::new("kill").args([&format!("-{signal}"), &pid]).status();
    assert!(status.expect("kill").success(), "kill -{signal} {pid}");
}

async fn breaker_state(app: &TestApp) -> Option<f64> {
    metric(&app.metrics().await, r#"tollgate_breaker_state{store="redis"}"#)
}

/// Envoy resets the stream at its own timeout, and hyper then drops the handler future
/// wherever it is. A dropped half-open probe must re-open the breaker (same cool-down):
/// before, it left the breaker half-open for good and every later call was refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_half_open_probe_does_not_wedge_the_breaker() {
    let cooldown = Duration::from_millis(300);
    let mut options = Options::new(StoreKind::Redis);
    options.store_timeout = Duration::from_secs(5);
    options.breaker = BreakerSettings { failures: 1, cooldown, ..Default::default() };
    let mut app = spawn_with(options, &POLICIES).await;
    assert!(!over(&app.check(request("closed_d", &[&[("k", "warm")]])).await));

    // Frozen: the next call waits out its store deadline (at most the 5 s store timeout)
    // and fails; with the warm success that is 1 failure of 2 calls: open.
    signal(&mut app, "STOP");
    let started = Instant::now();
    assert!(over(&app.check(request("closed_d", &[&[("k", "frozen")]])).await), "closed domain denies");
    // Within the 5 s store timeout (a margin for a loaded 2-core CI host), far from the
    // 15 s after which the silent connection itself would be replaced.
    let took = started.elapsed();
    assert!(took < Duration::from_secs(8), "failed within the store timeout: {took:?}");
    assert_eq!(breaker_state(&app).await, Some(1.0), "open");

    // The first call after the cool-down is the probe; it hangs on the frozen Redis (no
    // grpc-timeout: only the client's cancel ends it). Calls made before the cool-down are
    // refused at once; retry until one is the probe in flight.
    let app = Arc::new(app);
    let probe = loop {
        let client_app = app.clone();
        let call =
            tokio::spawn(async move { client_app.check(request("closed_d", &[&[("k", "probe")]])).await });
        let half_open = eventually(Duration::from_millis(500), || {
            let app = app.clone();
            let finished = call.is_finished();
            async move { finished || breaker_state(&app).await == Some(2.0) }
        })
        .await;
        if half_open && !call.is_finished() {
            break call;
        }
        assert!(started.elapsed() < Duration::from_secs(15), "never saw the breaker half-open");
        let _ = call.await;
    };
    // Cancel from the client: the task's future, and with it the gRPC call, is dropped
    // (tonic resets the HTTP/2 stream); the server drops the handler and with it the probe.
    probe.abort();
    assert!(probe.await.is_err_and(|e| e.is_cancelled()), "the probe was still in flight");
    let reopened = eventually(Duration::from_secs(2), || {
        let app = app.clone();
        async move { breaker_state(&app).await == Some(1.0) }
    })
    .await;
    assert!(reopened, "the server saw the reset and re-opened the breaker (not stuck half-open)");

    let mut app = Arc::into_inner(app).expect("no other user of the app");
    signal(&mut app, "CONT");
    let resumed = Instant::now();
    let app = Arc::new(app);
    let answered = eventually(cooldown + Duration::from_secs(1), || {
        let app = app.clone();
        async move { !over(&app.check(request("closed_d", &[&[("k", "resumed")]])).await) }
    })
    .await;
    let took = resumed.elapsed();
    println!("figures: cancelled probe: re-opened; answered by Redis {took:?} after SIGCONT");
    assert!(answered, "a fail-closed domain is answered by Redis again within the cool-down + 1 s");
    assert_eq!(breaker_state(&app).await, Some(0.0), "closed");
}

/// Envoy's own timeout at or below the store timeout: the gRPC server drops a handler at the
/// caller's `grpc-timeout`, so a store call still pending then would end as a gRPC error
/// (Envoy applies its own failure mode) and the breaker would never count it. The store
/// budget keeps a margin under the caller's timeout: the domain's policy answers, in time,
/// and a frozen Redis opens the breaker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_timeout_shorter_than_the_store_timeout_is_answered_by_policy() {
    let mut options = Options::new(StoreKind::Redis);
    options.store_timeout = Duration::from_secs(5);
    options.breaker =
        BreakerSettings { failures: 3, cooldown: Duration::from_secs(30), ..Default::default() };
    let mut app = spawn_with(options, &POLICIES).await;
    assert_eq!(send(&app, "closed_d", "warm", 1).await, 1);
    signal(&mut app, "STOP");
    let caller = Duration::from_millis(200);
    for i in 0..3 {
        let mut call = tonic::Request::new(request("closed_d", &[&[("k", &format!("t{i}"))]]));
        call.set_timeout(caller);
        let started = Instant::now();
        let answer = app.client.clone().should_rate_limit(call).await;
        let took = started.elapsed();
        let answer = answer.unwrap_or_else(|status| panic!("a gRPC error instead of the policy: {status}"));
        assert!(over(&answer.into_inner()), "closed domain: denied by its failure policy");
        assert!(took < caller + Duration::from_millis(100), "answered after {took:?}");
    }
    assert_eq!(breaker_state(&app).await, Some(1.0), "the breaker counted the timeouts and opened");
    signal(&mut app, "CONT");
}

/// Found by the soak (`tests/soak`, seed 1 on a single Redis): after an outage of a few
/// seconds the breaker's probes had failed with doubling cool-downs (1, 2, 4 s … up to
/// 30 s), so limiting resumed one whole cool-down after Redis was back — 5.8 s after a
/// 1.6 s restart on a busy machine, and up to 36 s after a long outage: every decision of a
/// fail-closed domain denied, of a fail-open one unlimited, with Redis healthy. Production
/// flags (store timeout 10 ms, default breaker), steady traffic, Redis killed for 8 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limiting_resumes_within_5_s_after_a_long_outage() {
    let mut options = Options::new(StoreKind::Redis);
    options.store_timeout = Duration::from_millis(10);
    let mut app = spawn_with(options, &POLICIES).await;
    assert!(!over(&app.check(request("closed_d", &[&[("k", "warm")]])).await), "answered by Redis");
    app.redis().stop();
    let app = Arc::new(app);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let traffic = {
        let (app, stop) = (app.clone(), stop.clone());
        tokio::spawn(async move {
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                app.check(request("closed_d", &[&[("k", &format!("t{n}"))]])).await;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    tokio::time::sleep(Duration::from_secs(8)).await;
    stop.store(true, Ordering::Relaxed);
    let _ = traffic.await;
    let mut app = Arc::into_inner(app).expect("the traffic task has ended");
    app.redis().restart();
    let app = Arc::new(app);
    let back = Instant::now();
    // The polling is the traffic now (a request every few ms): the breaker's next probe
    // comes with whichever request follows its cool-down.
    let recovered = eventually(Duration::from_secs(40), || {
        let app = app.clone();
        async move { !over(&app.check(request("closed_d", &[&[("k", "after")]])).await) }
    })
    .await;
    let took = back.elapsed();
    println!("figures: limiting resumed {took:?} after an 8 s outage ended");
    assert!(recovered && took < Duration::from_secs(5), "limiting resumed {took:?} after Redis was back");
}
