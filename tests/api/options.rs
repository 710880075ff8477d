//! Server-wide options: global shadow mode and response headers.

use tollgate::app::StoreKind;

use crate::support::*;

const POLICY: &str = r#"
domain: api
descriptors:
  - key: user
    rate_limit: { unit: minute, requests_per_unit: 2 }
"#;

const CLOSED: &str = r#"
domain: closed
failure_mode: closed
descriptors:
  - key: user
    rate_limit: { unit: minute, requests_per_unit: 2 }
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn global_shadow_mode_decides_but_answers_ok() {
    let mut options = Options::new(StoreKind::Memory);
    options.shadow_mode = true;
    let app = spawn_with(options, &[("api.yaml", POLICY), ("closed.yaml", CLOSED)]).await;
    let req = request("api", &[&[("user", "a")]]);
    for (expected_remaining, denied) in [(1, false), (0, false), (0, true)] {
        let response = app.check(req.clone()).await;
        assert!(!over(&response), "the overall code is always OK");
        // Each descriptor keeps the code it was decided with: the evidence for access logs.
        assert_eq!(is_ok(&response.statuses[0]), !denied);
        assert_eq!(response.statuses[0].limit_remaining, expected_remaining);
    }
    // Oversized requests take the failure policy (closed: OVER_LIMIT), and shadow mode
    // covers them too.
    let long = "x".repeat(5000);
    let oversized = app.check(request("closed", &[&[("user", &long)]])).await;
    assert!(!over(&oversized), "an oversized request on a closed domain is not denied in shadow mode");
    assert!(!is_ok(&oversized.statuses[0]), "its status keeps the policy's code");
    let text = app.metrics().await;
    assert_eq!(metric(&text, r#"tollgate_shadow_overrides_total{domain="api"}"#), Some(1.0));
    assert_eq!(metric(&text, r#"tollgate_shadow_overrides_total{domain="closed"}"#), Some(1.0));
    assert_eq!(
        metric(&text, r#"tollgate_decisions_total{domain="api",rule="descriptors[0]",result="over_limit"}"#),
        Some(1.0),
        "decisions keep their own result"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn response_headers_when_asked_for() {
    let mut options = Options::new(StoreKind::Memory);
    options.response_headers = true;
    let app = spawn_with(options, &[("api.yaml", POLICY)]).await;
    let req = request("api", &[&[("user", "b")]]);
    let headers = |r: &envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse| {
        r.response_headers_to_add.iter().map(|h| (h.key.clone(), h.value.clone())).collect::<Vec<_>>()
    };
    let first = headers(&app.check(req.clone()).await);
    assert!(first.contains(&("x-ratelimit-limit".into(), "2, 2;w=60".into())), "{first:?}");
    assert!(first.contains(&("x-ratelimit-remaining".into(), "1".into())), "{first:?}");
    assert!(!first.iter().any(|(k, _)| k == "retry-after"));
    app.check(req.clone()).await;
    let denied = headers(&app.check(req).await);
    let retry: u64 = denied
        .iter()
        .find(|(k, _)| k == "retry-after")
        .map(|(_, v)| v.parse().expect("int"))
        .expect("retry-after");
    assert!((1..=30).contains(&retry), "{denied:?}");

    let plain = spawn_app(StoreKind::Memory, &[("api.yaml", POLICY)]).await;
    assert!(plain.check(request("api", &[&[("user", "c")]])).await.response_headers_to_add.is_empty());
}
