//! Server-wide options: global shadow mode and response headers.

use tollgate::app::StoreKind;

use crate::support::*;

const POLICY: &str = r#"
domain: api
descriptors:
  - key: user
    rate_limit: { unit: minute, requests_per_unit: 2 }
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn global_shadow_mode_decides_but_answers_ok() {
    let mut options = Options::new(StoreKind::Memory);
    options.shadow_mode = true;
    let app = spawn_with(options, &[("api.yaml", POLICY)]).await;
    let req = request("api", &[&[("user", "a")]]);
    for expected_remaining in [1, 0, 0] {
        let response = app.check(req.clone()).await;
        assert!(!over(&response));
        assert!(is_ok(&response.statuses[0]));
        assert_eq!(response.statuses[0].limit_remaining, expected_remaining);
    }
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
