//! Limits as a client of the real Envoy sees them: the shipped `envoy/envoy.yaml` in front
//! of the real `tollgate` (Redis store) with the shipped policies `config/edge.yaml` and
//! `config/login.yaml`.
//!
//! Covers: pass until the limit, then 429 without reaching the upstream; the exact
//! `x-ratelimit-limit/remaining/reset` and `Retry-After` values Envoy derives from
//! Tollgate's statuses; one bucket per header value; per-client limits that a spoofed
//! `x-forwarded-for` cannot escape; the `/login` route's own domain and actions.

use std::time::Instant;

use crate::harness::http::Response;
use crate::harness::topology::Topology;

/// What Envoy writes for the edge domain: the limit of the status with the least remaining,
/// then every reported limit with its window (seconds) and name, in descriptor order.
const API_KEY_LIMIT: &str = r#"5, 5;w=60;name="per-api-key", 60;w=60;name="per-client""#;
const EXPENSIVE_LIMIT: &str = r#"2, 60;w=60;name="per-client", 2;w=60;name="expensive-per-client""#;

/// `reset` is whole seconds, rounded up, of a duration that was `full` seconds when the
/// test started and has shrunk by at most the time elapsed since `start`.
fn assert_reset(reset: u64, full: u64, start: Instant, what: &str) {
    let lowest = (full as f64 - start.elapsed().as_secs_f64()).ceil().max(1.0) as u64;
    assert!((lowest..=full).contains(&reset), "{what}: reset {reset}, expected {lowest}..={full}");
}

fn assert_denied(response: &Response, what: &str) {
    assert_eq!(response.status, 429, "{what}: {response:#?}");
    assert_eq!(response.header("x-envoy-ratelimited"), Some("true"), "{what}");
    assert_eq!(response.header("x-upstream"), None, "{what}: a denied request reached the upstream");
    assert_eq!(response.int_header("x-ratelimit-remaining"), 0, "{what}");
}

#[test]
fn an_api_key_passes_until_its_limit_then_gets_429_with_the_right_headers() {
    let edge = Topology::start();
    let start = Instant::now();
    // per-api-key: 5/minute with GCRA (burst 5): one request "costs" 12 s of the bucket.
    for k in 1..=5u64 {
        let ok = edge.get("/", &[("x-api-key", "alice")]);
        assert_eq!(ok.status, 200, "request {k}: {ok:#?}");
        assert_eq!(ok.header("x-upstream"), Some("hit"));
        assert_eq!(ok.header("x-ratelimit-limit"), Some(API_KEY_LIMIT), "request {k}");
        assert_eq!(ok.int_header("x-ratelimit-remaining"), 5 - k, "request {k}");
        // Allowed: seconds until the bucket is full again.
        assert_reset(ok.int_header("x-ratelimit-reset"), 12 * k, start, &format!("request {k}"));
        assert_eq!(ok.header("retry-after"), None, "Retry-After only on 429");
    }
    let denied = edge.get("/", &[("x-api-key", "alice")]);
    assert_denied(&denied, "6th request");
    assert_eq!(denied.header("x-ratelimit-limit"), Some(API_KEY_LIMIT));
    // Denied: seconds until this request would pass; Retry-After says the same.
    let reset = denied.int_header("x-ratelimit-reset");
    assert_reset(reset, 12, start, "denied");
    assert_eq!(denied.int_header("retry-after"), reset);
    assert_eq!(edge.upstream.hits(), 5);
}

#[test]
fn each_api_key_has_its_own_bucket() {
    let edge = Topology::start();
    for _ in 0..5 {
        assert_eq!(edge.get("/", &[("x-api-key", "alice")]).status, 200);
    }
    assert_denied(&edge.get("/", &[("x-api-key", "alice")]), "alice, 6th");
    let bob = edge.get("/", &[("x-api-key", "bob")]);
    assert_eq!(bob.status, 200, "bob's first request: {bob:#?}");
    assert_eq!(bob.int_header("x-ratelimit-remaining"), 4);
    assert_denied(&edge.get("/", &[("x-api-key", "alice")]), "alice after bob");
    // Without the header there is no api_key descriptor: only the per-client limit applies.
    let anonymous = edge.get("/", &[]);
    assert_eq!(anonymous.status, 200);
    assert!(anonymous.header("x-ratelimit-limit").is_some_and(|l| l.starts_with("60, ")), "{anonymous:#?}");
}

#[test]
fn expensive_paths_are_limited_per_client_whatever_x_forwarded_for_says() {
    let edge = Topology::start();
    let start = Instant::now();
    // Each request claims another client in x-forwarded-for; with use_remote_address the
    // descriptor carries the TCP peer (127.0.0.1), so all three share one bucket.
    let first = edge.get("/expensive/report?page=1", &[("x-forwarded-for", "203.0.113.1")]);
    assert_eq!(first.status, 200, "{first:#?}");
    assert_eq!(first.header("x-ratelimit-limit"), Some(EXPENSIVE_LIMIT));
    assert_eq!(first.int_header("x-ratelimit-remaining"), 1);
    assert_reset(first.int_header("x-ratelimit-reset"), 30, start, "first");
    let second = edge.get("/expensive/report?page=2", &[("x-forwarded-for", "203.0.113.2")]);
    assert_eq!(second.status, 200, "{second:#?}");
    assert_eq!(second.int_header("x-ratelimit-remaining"), 0);
    let third = edge.get("/expensive/export", &[("x-forwarded-for", "203.0.113.3")]);
    assert_denied(&third, "third expensive request");
    assert_reset(third.int_header("retry-after"), 30, start, "Retry-After");
    // Other paths match no path rule: only the per-client limit, far from exhausted.
    let cheap = edge.get("/cheap", &[]);
    assert_eq!(cheap.status, 200, "{cheap:#?}");
    assert_eq!(edge.upstream.hits(), 3);
}

#[test]
fn the_login_route_uses_its_own_domain_and_actions() {
    let edge = Topology::start();
    let login = edge.get("/login", &[("x-api-key", "alice"), ("x-username", "carol")]);
    assert_eq!(login.status, 200, "{login:#?}");
    let limit = login.header("x-ratelimit-limit").unwrap_or_else(|| panic!("no limit: {login:#?}"));
    // Route-level rate_limits replace the virtual host's (no api_key descriptor), and the
    // per-route domain is `login`, not `edge` (whose remote_address rule is "per-client").
    assert!(
        !limit.contains("per-api-key") && !limit.contains("per-client"),
        "edge limits on /login: {limit}"
    );
    assert!(limit.contains(";w="), "no quota policy in {limit}");
}
