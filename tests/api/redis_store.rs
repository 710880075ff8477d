//! Redis-only behaviour: scripts, failures, several instances on one Redis.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tollgate::app::StoreKind;

use crate::support::*;

const POLICY: &str = r#"
domain: open_api
failure_mode: open
descriptors:
  - key: user
    rate_limit: { unit: minute, requests_per_unit: 3 }
"#;

const CLOSED: &str = r#"
domain: closed_api
failure_mode: closed
descriptors:
  - key: user
    rate_limit: { unit: minute, requests_per_unit: 3, name: closed-user }
"#;

const DAILY: &str = r#"
domain: daily
descriptors:
  - key: user
    rate_limit: { unit: day, requests_per_unit: 100 }
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn script_flush_between_requests_changes_nothing_visible() {
    let mut app = spawn_app(StoreKind::Redis, &[("a.yaml", POLICY)]).await;
    let req = request("open_api", &[&[("user", "u")], &[("user", "v")]]);
    let mut remaining = vec![];
    for _ in 0..3 {
        assert_eq!(app.redis().cli(&["SCRIPT", "FLUSH"]), "OK");
        let response = app.check(req.clone()).await;
        assert!(!over(&response));
        remaining.push(response.statuses[0].limit_remaining);
    }
    assert_eq!(remaining, vec![2, 1, 0]);
    app.redis().cli(&["SCRIPT", "FLUSH"]);
    assert!(over(&app.check(req).await));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_carry_the_prefix() {
    let mut options = Options::new(StoreKind::Redis);
    options.key_prefix = "tenant-a:".into();
    let mut app = spawn_with(options, &[("a.yaml", POLICY)]).await;
    app.check(request("open_api", &[&[("user", "u")]])).await;
    let keys = app.redis().cli(&["KEYS", "*"]);
    assert!(keys.starts_with("tenant-a:tg:"), "{keys}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_down_applies_each_domains_failure_mode_within_the_deadline() {
    let mut options = Options::new(StoreKind::Redis);
    options.store_timeout = Duration::from_millis(200);
    let mut app = spawn_with(options, &[("a.yaml", POLICY), ("b.yaml", CLOSED)]).await;
    let open = request("open_api", &[&[("user", "u")]]);
    let closed = request("closed_api", &[&[("user", "u")]]);
    assert!(!over(&app.check(open.clone()).await));
    assert!(!over(&app.check(closed.clone()).await));

    app.redis().stop();
    for _ in 0..5 {
        let started = Instant::now();
        let response = app.check(open.clone()).await;
        assert!(started.elapsed() < Duration::from_millis(200 + 800), "{:?}", started.elapsed());
        assert!(!over(&response), "open domain answers OK");
        let started = Instant::now();
        let response = app.check(closed.clone()).await;
        assert!(started.elapsed() < Duration::from_millis(200 + 800), "{:?}", started.elapsed());
        assert!(over(&response), "closed domain answers OVER_LIMIT");
        let status = &response.statuses[0];
        assert_eq!(status.limit_remaining, 0);
        assert_eq!(status.current_limit.as_ref().map(|l| l.name.as_str()), Some("closed-user"));
    }

    // Redis comes back (empty): limiting resumes.
    app.redis().restart();
    let app = Arc::new(app);
    let resumed = eventually(Duration::from_secs(10), || {
        let app = app.clone();
        let closed = closed.clone();
        async move { !over(&app.check(closed).await) }
    })
    .await;
    assert!(resumed, "closed domain serves again once Redis is back");
    let mut allowed = 1;
    for _ in 0..5 {
        if !over(&app.check(closed.clone()).await) {
            allowed += 1;
        }
    }
    assert_eq!(allowed, 3, "the limit is enforced again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn starting_with_redis_down_is_normal() {
    let port = crate::redis_support::free_port();
    let mut options = Options::new(StoreKind::Redis);
    options.redis_url = Some(format!("redis://127.0.0.1:{port}/"));
    options.store_timeout = Duration::from_millis(100);
    let app = spawn_with(options, &[("b.yaml", CLOSED)]).await;
    let closed = request("closed_api", &[&[("user", "u")]]);
    assert!(over(&app.check(closed.clone()).await), "no Redis yet: closed domain denies");
    let _redis = RedisServer::start_on(port);
    let app = Arc::new(app);
    let served = eventually(Duration::from_secs(10), || {
        let app = app.clone();
        let closed = closed.clone();
        async move { !over(&app.check(closed).await) }
    })
    .await;
    assert!(served, "connects once Redis comes up");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_and_64_clients_admit_exactly_the_limit() {
    let redis = RedisServer::start();
    let mut apps = vec![];
    for _ in 0..2 {
        let mut options = Options::new(StoreKind::Redis);
        options.redis_url = Some(redis.url());
        options.store_timeout = Duration::from_secs(5);
        apps.push(Arc::new(spawn_with(options, &[("d.yaml", DAILY)]).await));
    }
    let req = request("daily", &[&[("user", "hot")]]);
    let mut tasks = vec![];
    for client in 0..64 {
        let app = apps[client % 2].clone();
        let req = req.clone();
        tasks.push(tokio::spawn(async move { app.allowed_of(5, &req).await }));
    }
    let mut allowed = 0;
    for task in tasks {
        allowed += task.await.expect("client task");
    }
    assert_eq!(allowed, 100, "64 clients × 5 requests against a limit of 100 per day");
}

/// Legitimate load never reaches the in-flight cap: 128 requests in flight with 16
/// descriptors each (2,048 commands over 2 connections) are all decided by Redis, none by
/// the failure policy. With the old default cap of 1,024 per connection, about 7 % of such
/// requests were answered `overloaded` — limiting silently off in a fail-open domain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_descriptors_in_flight_stay_under_the_default_cap() {
    let policy = "domain: wide\nfailure_mode: open\ndescriptors:\n  - key: k\n    rate_limit: { unit: hour, requests_per_unit: 1000000 }\n";
    let app = Arc::new(spawn_with(Options::new(StoreKind::Redis), &[("wide.yaml", policy)]).await);
    let mut tasks = Vec::new();
    for client in 0..128 {
        let app = app.clone();
        tasks.push(tokio::spawn(async move {
            for round in 0..8 {
                let values: Vec<String> = (0..16).map(|d| format!("{client}-{round}-{d}")).collect();
                let entries: Vec<[(&str, &str); 1]> = values.iter().map(|v| [("k", v.as_str())]).collect();
                let descriptors: Vec<&[(&str, &str)]> = entries.iter().map(|e| &e[..]).collect();
                let response = app.check(request("wide", &descriptors)).await;
                assert_eq!(response.statuses.len(), 16);
            }
        }));
    }
    for task in tasks {
        task.await.expect("client task");
    }
    let text = app.metrics().await;
    let overloaded =
        metric_value(&text, r#"tollgate_store_requests_total{store="redis",outcome="overloaded"}"#);
    assert_eq!(overloaded, 0.0, "{text}");
    let failed = metric_value(
        &text,
        r#"tollgate_decisions_total{domain="wide",rule="descriptors[0]",result="failure_open"}"#,
    );
    assert_eq!(failed, 0.0, "no decision by the failure policy");
}
