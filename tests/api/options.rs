//! Server-wide options: global shadow mode, response headers (Envoy's draft names and the
//! peer's `RateLimit-*`) and response dynamic metadata.

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

type Headers = Vec<(String, String)>;

fn headers_of(response: &envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse) -> Headers {
    response.response_headers_to_add.iter().map(|h| (h.key.clone(), h.value.clone())).collect()
}

fn header<'a>(headers: &'a Headers, name: &str) -> Option<&'a str> {
    headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limit_headers_carry_the_numbers_of_response_headers_under_the_peers_names() {
    let mut options = Options::new(StoreKind::Memory);
    options.response_headers = true;
    options.limit_headers = Some(Default::default());
    let app = spawn_with(options, &[("api.yaml", POLICY)]).await;
    let req = request("api", &[&[("user", "d")], &[("nothing", "x")]]);
    for expected_remaining in ["1", "0", "0"] {
        let headers = headers_of(&app.check(req.clone()).await);
        assert_eq!(header(&headers, "RateLimit-Limit"), Some("2"), "{headers:?}");
        assert_eq!(header(&headers, "RateLimit-Remaining"), Some(expected_remaining), "{headers:?}");
        // The same status as the x-ratelimit headers: equal numbers, both flags on at once.
        let draft_limit = header(&headers, "x-ratelimit-limit").and_then(|v| v.split(',').next());
        assert_eq!(draft_limit, Some("2"));
        assert_eq!(header(&headers, "RateLimit-Remaining"), header(&headers, "x-ratelimit-remaining"));
        assert_eq!(header(&headers, "RateLimit-Reset"), header(&headers, "x-ratelimit-reset"));
        let reset: u64 = header(&headers, "RateLimit-Reset").expect("reset").parse().expect("an integer");
        assert!((1..=60).contains(&reset), "whole seconds of a 2/minute bucket: {headers:?}");
    }

    // Renamed, and without --response-headers: only the three renamed headers.
    let mut options = Options::new(StoreKind::Memory);
    options.limit_headers = Some(tollgate::service::headers::LimitHeaderNames {
        limit: "A-Limit".into(),
        remaining: "A-Remaining".into(),
        reset: "A-Reset".into(),
    });
    let renamed = spawn_with(options, &[("api.yaml", POLICY)]).await;
    let headers = headers_of(&renamed.check(request("api", &[&[("user", "e")]])).await);
    let names: Vec<&str> = headers.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(names, ["A-Limit", "A-Remaining", "A-Reset"]);
    assert_eq!(header(&headers, "A-Remaining"), Some("1"));
    // Nothing limited, nothing to say.
    let unmatched = renamed.check(request("api", &[&[("nothing", "x")]])).await;
    assert!(unmatched.response_headers_to_add.is_empty());

    let plain = spawn_app(StoreKind::Memory, &[("api.yaml", POLICY)]).await;
    assert!(plain.check(request("api", &[&[("user", "f")]])).await.response_headers_to_add.is_empty());
}

const TAGGED: &str = r#"
domain: tagged
descriptors:
  - key: user
    metadata: { team: payments, cost: { tier: 1 } }
    rate_limit: { unit: minute, requests_per_unit: 1 }
  - key: path
    metadata: { team: search, cost: { units: 3 } }
    rate_limit: { unit: minute, requests_per_unit: 10 }
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dynamic_metadata_holds_the_request_and_the_passed_rules_metadata() {
    use envoy_types::pb::google::protobuf::{value::Kind, Struct, Value};
    fn text(value: &Value) -> String {
        match &value.kind {
            Some(Kind::StringValue(s)) => s.clone(),
            Some(Kind::NumberValue(n)) => n.to_string(),
            Some(Kind::ListValue(l)) => {
                format!("[{}]", l.values.iter().map(text).collect::<Vec<_>>().join(","))
            }
            Some(Kind::StructValue(s)) => show(s),
            other => format!("{other:?}"),
        }
    }
    /// `{k:v,…}` with keys sorted: a readable, order-independent form.
    fn show(s: &Struct) -> String {
        let mut fields: Vec<String> = s.fields.iter().map(|(k, v)| format!("{k}:{}", text(v))).collect();
        fields.sort();
        format!("{{{}}}", fields.join(","))
    }

    let mut options = Options::new(StoreKind::Memory);
    options.response_dynamic_metadata = true;
    let app = spawn_with(options, &[("tagged.yaml", TAGGED)]).await;
    let req = request("tagged", &[&[("user", "u")], &[("path", "/a")]]);
    let first = app.check(req.clone()).await.dynamic_metadata.expect("dynamic metadata");
    assert_eq!(
        show(&first),
        "{descriptors:[{entries:[user=u]},{entries:[path=/a]}],domain:tagged,\
         metadata:{cost:{tier:1,units:3},team:payments}}",
        "both passed: the first descriptor's team, both cost maps merged"
    );
    // The user's 1/minute is spent: only the path rule passed.
    let second = app.check(req).await.dynamic_metadata.expect("dynamic metadata");
    assert_eq!(text(&second.fields["domain"]), "tagged");
    assert_eq!(text(&second.fields["metadata"]), "{cost:{units:3},team:search}");

    let plain = spawn_app(StoreKind::Memory, &[("tagged.yaml", TAGGED)]).await;
    let response = plain.check(request("tagged", &[&[("user", "u")]])).await;
    assert_eq!(response.dynamic_metadata, None, "off by default");
}
