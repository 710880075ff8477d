//! Failures through the real Envoy: who decides what when a part is down.
//!
//! Redis down: Tollgate answers by each domain's `failure_mode` (`login` closed → 429,
//! `edge` open → 200), and recovers when Redis is back. Tollgate down: Tollgate cannot
//! decide, Envoy's `failure_mode_deny` does — false (shipped) lets requests through, true
//! answers 500 (the filter's default `status_on_error`); neither reaches a 429.

use std::time::{Duration, Instant};

use crate::harness::envoy::FilterOverrides;
use crate::harness::topology::Topology;

const API_KEY: (&str, &str) = ("x-api-key", "alice");

/// Asserts Envoy consulted Tollgate successfully: the limit headers came back.
fn assert_limited_ok(edge: &Topology, path: &str) {
    let r = edge.get(path, &[API_KEY]);
    assert_eq!(r.status, 200, "{path} before the failure: {r:#?}");
    assert!(r.header("x-ratelimit-limit").is_some(), "{path}: Tollgate not consulted: {r:#?}");
}

#[test]
fn with_redis_down_a_closed_domain_denies_and_an_open_one_allows() {
    let mut edge = Topology::start();
    assert_limited_ok(&edge, "/login");
    assert_limited_ok(&edge, "/");
    edge.redis.stop();

    let login = edge.get("/login", &[]);
    assert_eq!(login.status, 429, "login fails closed: {login:#?}");
    assert_eq!(login.int_header("x-ratelimit-remaining"), 0);
    let open = edge.get("/", &[API_KEY]);
    assert_eq!(open.status, 200, "edge fails open: {open:#?}");
    assert_eq!(open.header("x-upstream"), Some("hit"));
    // Failing open reports no limit, so Envoy has no numbers to show.
    assert_eq!(open.header("x-ratelimit-limit"), None, "{open:#?}");

    // An empty Redis on the same port: Tollgate reconnects, and the (fresh) buckets decide.
    edge.redis.restart();
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let login = edge.get("/login", &[]);
        if login.status == 200 && login.header("x-ratelimit-limit").is_some() {
            break;
        }
        assert!(Instant::now() < deadline, "no recovery after Redis came back: {login:#?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn with_tollgate_down_envoy_fails_open_by_default() {
    let mut edge = Topology::start();
    assert_limited_ok(&edge, "/");
    edge.tollgate.kill();

    for path in ["/", "/login"] {
        let r = edge.get(path, &[API_KEY]);
        assert_eq!(r.status, 200, "{path} with failure_mode_deny: false: {r:#?}");
        assert_eq!(r.header("x-upstream"), Some("hit"));
        assert_eq!(r.header("x-ratelimit-limit"), None, "no service, no numbers: {r:#?}");
    }
    assert!(edge.envoy.stat("cluster.upstream.ratelimit.error") >= 2, "{}", edge.envoy.log_tail());
    assert!(edge.envoy.stat("cluster.upstream.ratelimit.failure_mode_allowed") >= 2);
}

#[test]
fn with_tollgate_down_and_failure_mode_deny_envoy_answers_500() {
    let mut edge =
        Topology::start_with(FilterOverrides { failure_mode_deny: Some(true), ..Default::default() });
    assert_limited_ok(&edge, "/");
    let hits = edge.upstream.hits();
    edge.tollgate.kill();

    for path in ["/", "/login"] {
        let r = edge.get(path, &[API_KEY]);
        assert_eq!(r.status, 500, "{path} with failure_mode_deny: true: {r:#?}");
        assert_eq!(r.header("x-envoy-ratelimited"), None, "an error is not a limit: {r:#?}");
        assert_eq!(r.header("retry-after"), None);
    }
    assert_eq!(edge.upstream.hits(), hits, "a denied request reached the upstream");
    assert!(edge.envoy.stat("cluster.upstream.ratelimit.error") >= 2, "{}", edge.envoy.log_tail());
    assert_eq!(edge.envoy.stat_or_zero("cluster.upstream.ratelimit.failure_mode_allowed"), 0);
}
