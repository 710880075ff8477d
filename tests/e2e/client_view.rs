//! What a limited client sees through the real Envoy: the denying limit's own `response`
//! (body, `content-type`, headers) as the 429, every header set describing the limit that
//! denied (not one that passed with nothing left), the draft standard's `RateLimit-Policy`
//! and `RateLimit` fields (`--ratelimit-headers ietf`), and a jittered `retry-after`.
//! Turned on through `TOLLGATE_*` environment variables, as a deployment would.

use crate::harness::topology::{Changes, Topology};

/// Per API key 3 a minute; per client 2 an hour, with a JSON 429 of its own. The third
/// request passes the minute limit with nothing left and is denied by the hour's.
const EDGE: &str = r#"
domain: edge
descriptors:
  - key: api_key
    rate_limit: { name: per-minute, unit: minute, requests_per_unit: 3 }
  - key: remote_address
    rate_limit:
      name: per-hour
      unit: hour
      requests_per_unit: 2
      response:
        body: '{"error": "hourly quota used up", "limit": {limit}, "window_seconds": {window}, "retry_in": {reset}}'
        content_type: application/json
        headers:
          x-quota-window: '{window}'
"#;

#[test]
fn a_denied_client_gets_the_denying_limits_body_headers_and_numbers() {
    let edge = Topology::start_changed(Changes {
        policies: &[("edge.yaml", EDGE)],
        env: &[
            ("TOLLGATE_RATELIMIT_HEADERS", "ietf"),
            ("TOLLGATE_LIMIT_HEADERS", "true"),
            ("TOLLGATE_RESPONSE_HEADERS", "true"),
            ("TOLLGATE_RETRY_AFTER_JITTER", "0.5"),
        ],
        ..Changes::default()
    });
    let get = || edge.get("/", &[("x-api-key", "carol")]);

    // Allowed: the fields describe the most constraining limit (the hour's: 1 of 2 left).
    let first = get();
    assert_eq!(first.status, 200, "{first:#?}");
    assert_eq!(
        first.header("ratelimit-policy"),
        Some(r#""per-minute";q=3;w=60, "per-hour";q=2;w=3600"#),
        "{first:#?}"
    );
    let current = first.header("ratelimit").expect("RateLimit field");
    assert!(current.starts_with(r#""per-hour";r=1;t="#), "{first:#?}");
    assert!(first.header("retry-after").is_none());
    assert_eq!(get().status, 200);

    // Denied by the hour (the minute passed with 0 left): its body, content-type and
    // headers, and every header set about the hour.
    let denied = get();
    assert_eq!(denied.status, 429, "{denied:#?}");
    assert_eq!(denied.header("content-type"), Some("application/json"), "{denied:#?}");
    assert_eq!(denied.header("x-quota-window"), Some("3600"));
    let body: serde_json::Value = serde_json::from_str(&denied.body).expect("a JSON body");
    assert_eq!((body["error"].as_str(), body["limit"].as_u64()), (Some("hourly quota used up"), Some(2)));
    assert_eq!(body["window_seconds"], 3600);
    // GCRA, 2 an hour: the next request passes half an hour after the last one passed.
    let retry_in = body["retry_in"].as_u64().expect("retry_in");
    assert!((1_700..=1_800).contains(&retry_in), "{body}");
    assert_eq!(denied.header("ratelimit"), Some(format!(r#""per-hour";r=0;t={retry_in}"#).as_str()));
    assert_eq!(denied.int_header("ratelimit-limit"), 2, "the peer's headers: the hour's limit");
    assert_eq!(denied.int_header("ratelimit-reset"), retry_in);
    let retry_after = denied.int_header("retry-after");
    assert!(
        (retry_in..=retry_in + retry_in / 2).contains(&retry_after),
        "retry-after {retry_after}: the wait {retry_in} plus up to half of it"
    );
    assert_eq!(edge.envoy.stat_or_zero("cluster.upstream.ratelimit.error"), 0, "{}", edge.envoy.log_tail());
}
