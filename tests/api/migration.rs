//! `--default-algorithm fixed_window`: a fleet moving from envoyproxy/ratelimit keeps its
//! window boundaries — every limit that names no algorithm, and a request's own `limit`
//! override, resets at the end of the epoch-aligned window — while a rule that names
//! `gcra` keeps GCRA. On the memory store and on Redis.

use std::time::{SystemTime, UNIX_EPOCH};

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use tollgate::algorithm::Algorithm;
use tollgate::app::StoreKind;
use tollgate::config::LoadOptions;

use crate::support::*;

const POLICY: &str = r#"
domain: api
descriptors:
  - key: user
    rate_limit: { unit: minute, requests_per_unit: 3 }
  - key: smooth
    rate_limit: { unit: minute, requests_per_unit: 3, algorithm: gcra }
"#;

fn now_secs() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).expect("clock").as_secs_f64()
}

/// `(allowed, remaining, duration_until_reset in s)` of each of `n` requests, sent while
/// the clock stays within one minute window, with the window's end; retried on a fresh
/// bucket (`make(attempt)`) when a minute boundary passed during the sequence.
async fn within_one_window(
    app: &TestApp,
    n: usize,
    make: impl Fn(usize) -> RateLimitRequest,
) -> (Vec<(bool, u32, i64)>, f64, f64) {
    for attempt in 0..3 {
        let start = now_secs();
        let mut seen = Vec::with_capacity(n);
        let req = make(attempt);
        for _ in 0..n {
            let status = app.check(req.clone()).await.statuses[0].clone();
            let reset = status.duration_until_reset.as_ref().map_or(0, |d| d.seconds);
            seen.push((is_ok(&status), status.limit_remaining, reset));
        }
        let end = now_secs();
        if (start / 60.0).floor() == (end / 60.0).floor() {
            return (seen, start, end);
        }
    }
    panic!("three sequences in a row crossed a minute boundary");
}

/// Every reset points at the end of the minute window the sequence ran in:
/// `reset = ceil(window_end - t)` for a `t` in `[start, end]`.
fn assert_resets_at_the_window_end(seen: &[(bool, u32, i64)], start: f64, end: f64) {
    let window_end = ((start / 60.0).floor() + 1.0) * 60.0;
    for &(_, _, reset) in seen {
        let reset = reset as f64;
        assert!(
            window_end - end <= reset && reset < window_end - start + 1.0,
            "reset {reset} s is not the window end ({} s away): {seen:?}",
            window_end - start
        );
    }
}

async fn fixed_window_by_default(store: StoreKind) -> TestApp {
    let options = Options {
        config_options: LoadOptions { default_algorithm: Algorithm::FixedWindow, ..LoadOptions::default() },
        ..Options::new(store)
    };
    let app = spawn_with(options, &[("api.yaml", POLICY)]).await;

    // A limit that names no algorithm: 3 per minute window, every reset at the window's end,
    // and the denied fourth consumes nothing (still 0 remaining, same end).
    let user = |attempt: usize| request("api", &[&[("user", &format!("alice{attempt}"))]]);
    let (seen, start, end) = within_one_window(&app, 4, user).await;
    let codes: Vec<(bool, u32)> = seen.iter().map(|&(ok, remaining, _)| (ok, remaining)).collect();
    assert_eq!(codes, [(true, 2), (true, 1), (true, 0), (false, 0)]);
    assert_resets_at_the_window_end(&seen, start, end);

    // A rule that names gcra keeps it: a reset per emission (20 s, 40 s), not the window's.
    let smooth = app.check(request("api", &[&[("smooth", "bob")]])).await;
    let second = app.check(request("api", &[&[("smooth", "bob")]])).await;
    let reset = |r: &envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse| {
        r.statuses[0].duration_until_reset.as_ref().map_or(0, |d| d.seconds)
    };
    assert_eq!((reset(&smooth), reset(&second)), (20, 40));

    // A request's own `limit` override follows the flag too.
    let overridden = |attempt: usize| {
        let mut req = request("api", &[&[("user", &format!("carol{attempt}"))]]);
        req.descriptors[0].limit =
            Some(RateLimitOverride { requests_per_unit: 2, unit: 2 /* minute */ });
        req
    };
    let (seen, start, end) = within_one_window(&app, 3, overridden).await;
    let codes: Vec<(bool, u32)> = seen.iter().map(|&(ok, remaining, _)| (ok, remaining)).collect();
    assert_eq!(codes, [(true, 1), (true, 0), (false, 0)]);
    assert_resets_at_the_window_end(&seen, start, end);

    let json = app.admin("GET", "/rlconfig?format=json").await;
    let json: serde_json::Value = serde_json::from_str(&json.body).expect("json");
    assert_eq!(json["default_algorithm"], "fixed_window");
    let algorithms: Vec<&str> = json["domains"][0]["rules"]
        .as_array()
        .expect("rules")
        .iter()
        .filter_map(|rule| rule["algorithm"].as_str())
        .collect();
    assert_eq!(algorithms, ["fixed_window", "gcra"], "the effective algorithm of each rule");
    app
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fixed_window_by_default_on_the_memory_store() {
    fixed_window_by_default(StoreKind::Memory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fixed_window_by_default_on_redis_in_buckets_of_their_own() {
    let mut app = fixed_window_by_default(StoreKind::Redis).await;
    let keys = app.redis().cli(&["KEYS", "*"]);
    let mut keys: Vec<&str> =
        keys.lines().map(|key| &key[..key.find(":3:api").unwrap_or(key.len())]).collect();
    keys.sort();
    keys.dedup();
    // Rule buckets of the fixed window (`f`), GCRA (`g2`), and fixed-window overrides (`of`).
    assert_eq!(keys, ["tg:fm", "tg:g2m", "tg:ofm"]);
}
