//! Token budgets charged after the response, as LLM gateways run them (Envoy Gateway's
//! response cost, Envoy AI Gateway's token limits): a request-time check that consumes
//! nothing (`hits_addend: {number: 0}`), and a second call when the stream ends
//! (`apply_on_stream_done`) whose `hits_addend` is the upstream's reported usage
//! (`%RESP(x-tokens-used)%`). With `overdraft: true` that usage always counts, even past the
//! budget, so the request that crosses it passes and the next one is denied.

use std::time::{Duration, Instant};

use crate::harness::http;
use crate::harness::topology::{Changes, Topology};

/// 1,000 tokens a minute per user; usage reported after the fact always counts.
const AI: &str = "
domain: edge
descriptors:
  - key: user
    rate_limit: { name: tokens-per-user, unit: minute, requests_per_unit: 1000, overdraft: true }
";

/// The request-time check (a peek), and the charge of the reported usage at stream end.
const RATE_LIMITS: &str = r#"
- actions: [{ request_headers: { header_name: x-user, descriptor_key: user } }]
  hits_addend: { number: 0 }
- actions: [{ request_headers: { header_name: x-user, descriptor_key: user } }]
  apply_on_stream_done: true
  hits_addend: { format: "%DYNAMIC_METADATA(tollgate.usage:tokens)%" }
"#;

/// The upstream's `x-tokens-used` into dynamic metadata, where the stream-end charge reads it.
pub(crate) const USAGE_TO_METADATA: &str = r#"
- name: envoy.filters.http.header_to_metadata
  typed_config:
    "@type": type.googleapis.com/envoy.extensions.filters.http.header_to_metadata.v3.Config
    response_rules:
      - header: x-tokens-used
        on_header_present: { metadata_namespace: tollgate.usage, key: tokens, type: NUMBER }
        remove: false
"#;

/// The user's bucket as `/v1/usage` shows it: tokens consumed (capacity − remaining).
pub(crate) fn consumed(edge: &Topology, user: &str) -> u64 {
    let path = format!("/v1/usage?domain=edge&descriptor=user%3D{user}");
    let r = http::get(edge.tollgate.admin, &path, &[]);
    assert_eq!(r.status, 200, "{r:#?}");
    let usage: serde_json::Value = serde_json::from_str(&r.body).expect("usage JSON");
    usage["limits"][0]["consumed"].as_u64().unwrap_or_else(|| panic!("{usage}"))
}

/// Waits (up to 10 s) for the stream-end charge to land (Envoy sends it after the
/// response): the user's consumption reaches `low`, and is at most `high` (GCRA refills
/// about 17 tokens a second meanwhile).
fn settles(edge: &Topology, user: &str, low: u64, high: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let now = consumed(edge, user);
        if now >= low {
            assert!(now <= high, "{user}: {now} tokens consumed, at most {high} expected");
            return;
        }
        assert!(Instant::now() < deadline, "{user}: {now} tokens consumed, at least {low} expected");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_token_budget_binds_on_usage_reported_after_the_response() {
    let edge = Topology::start_changed(Changes {
        policies: &[("edge.yaml", AI)],
        filter_rate_limits: Some(RATE_LIMITS),
        http_filters: Some(USAGE_TO_METADATA),
        ..Changes::default()
    });
    let ask = |tokens: &str| edge.get("/", &[("x-user", "dave"), ("x-tokens", tokens)]);

    // 600 tokens: checked (nothing consumed), served, then charged.
    let first = ask("600");
    assert_eq!(first.status, 200, "{first:#?}");
    assert_eq!(first.header("x-tokens-used"), Some("600"));
    settles(&edge, "dave", 500, 600);

    // 400 left: the check passes, the answer uses 600 — more than is left, and it counts.
    assert_eq!(ask("600").status, 200);
    settles(&edge, "dave", 1_000, 1_000);

    // 200 tokens overdrawn: the next request is denied at the check (GCRA gives a token
    // back every 60 ms; the overdraft takes 12 s to refill before one is free).
    let denied = ask("1");
    assert_eq!(denied.status, 429, "{denied:#?}");
    assert_eq!(edge.upstream.hits(), 2, "the denied request never reached the upstream");
    assert_eq!(edge.envoy.stat_or_zero("cluster.upstream.ratelimit.error"), 0, "{}", edge.envoy.log_tail());
}
