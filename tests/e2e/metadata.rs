//! What the peer-compatible options look like behind the real Envoy: rule `metadata` in
//! Envoy's access log (`--response-dynamic-metadata`), and the `RateLimit-*` headers
//! (`--limit-headers`) on the client's response. Both are turned on the way a migrating
//! deployment would, through `TOLLGATE_*` environment variables.

use crate::harness::topology::{Changes, Topology};

/// Replaces the shipped `edge` policy: per API key and per client, each with metadata.
const EDGE: &str = "\
domain: edge
descriptors:
  - key: api_key
    metadata: { team: payments, plan: { tier: gold } }
    rate_limit: { name: per-api-key, unit: minute, requests_per_unit: 2 }
  - key: remote_address
    metadata: { team: edge-default, zone: public }
    rate_limit: { name: per-client, unit: minute, requests_per_unit: 60 }
";

/// Envoy's namespace for the ratelimit filter's dynamic metadata.
const LOG: &str = "%RESPONSE_CODE% \
team=%DYNAMIC_METADATA(envoy.filters.http.ratelimit:metadata:team)% \
tier=%DYNAMIC_METADATA(envoy.filters.http.ratelimit:metadata:plan:tier)% \
zone=%DYNAMIC_METADATA(envoy.filters.http.ratelimit:metadata:zone)% \
domain=%DYNAMIC_METADATA(envoy.filters.http.ratelimit:domain)% \
descriptors=%DYNAMIC_METADATA(envoy.filters.http.ratelimit:descriptors)%";

#[test]
fn the_access_log_shows_the_metadata_of_the_rules_a_request_passed() {
    let edge = Topology::start_changed(Changes {
        policies: &[("edge.yaml", EDGE)],
        env: &[("TOLLGATE_RESPONSE_DYNAMIC_METADATA", "true"), ("TOLLGATE_LIMIT_HEADERS", "true")],
        access_log: Some(LOG),
        ..Changes::default()
    });
    let codes: Vec<u16> = (0..3).map(|_| edge.get("/", &[("x-api-key", "alice")]).status).collect();
    assert_eq!(codes, [200, 200, 429]);
    let lines = edge.access_log(3);
    // Both rules passed: the first descriptor's team wins, the other adds its zone.
    let passed = "team=payments tier=gold zone=public domain=edge";
    assert!(lines[0].starts_with(&format!("200 {passed} descriptors=")), "{lines:#?}");
    assert_eq!(lines[0], lines[1], "{lines:#?}");
    // The descriptors as Envoy sent them, in the peer's `key=value` form.
    assert!(lines[0].contains(r#"{"entries":["api_key=alice"]}"#), "{lines:#?}");
    assert!(lines[0].contains(r#"{"entries":["remote_address=127.0.0.1"]}"#), "{lines:#?}");
    // The API key is over its limit: only the per-client rule's metadata is left.
    assert!(lines[2].starts_with("429 team=edge-default tier=- zone=public domain=edge"), "{lines:#?}");
    assert_eq!(edge.envoy.stat_or_zero("cluster.upstream.ratelimit.error"), 0, "{}", edge.envoy.log_tail());
}

#[test]
fn limit_headers_reach_the_client_with_the_numbers_of_envoys_own() {
    let edge = Topology::start_changed(Changes {
        policies: &[("edge.yaml", EDGE)],
        env: &[("TOLLGATE_LIMIT_HEADERS", "true")],
        ..Changes::default()
    });
    for (k, status) in [(1u64, 200), (2, 200), (3, 429)] {
        let r = edge.get("/", &[("x-api-key", "bob")]);
        assert_eq!(r.status, status, "request {k}: {r:#?}");
        assert_eq!(r.int_header("ratelimit-limit"), 2, "request {k}");
        assert_eq!(r.int_header("ratelimit-remaining"), 2u64.saturating_sub(k), "request {k}");
        // Envoy's x-ratelimit-* (enable_x_ratelimit_headers) describe the same status.
        assert_eq!(r.int_header("ratelimit-remaining"), r.int_header("x-ratelimit-remaining"));
        assert_eq!(r.int_header("ratelimit-reset"), r.int_header("x-ratelimit-reset"), "{r:#?}");
    }
}
