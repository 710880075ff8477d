//! `GET /v1/hotkeys`, `tollgate_hot_key_share` and the status page's hot keys, end to end:
//! values hidden or shown per rule, the token (the status page lists hot keys only with it,
//! when one is configured), `top`, an unknown domain, the gauge's ranks.

use serde_json::Value;
use sha2::{Digest, Sha256};
use tollgate::app::StoreKind;

use super::usage::call;
use crate::support::*;

const POLICY: &str = "domain: api
descriptors:
  - key: user
    rate_limit: { name: per-user, unit: hour, requests_per_unit: 1000 }
  - key: tenant
    detailed_metric: true
    rate_limit: { unit: hour, requests_per_unit: 1000 }
";

/// The `value_hash` of `value`: the first 16 bytes of its SHA-256, in hex.
fn value_hash(value: &str) -> String {
    Sha256::digest(value.as_bytes())[..16].iter().map(|b| format!("{b:02x}")).collect()
}

/// 5 × alice, 2 × tenant acme, 1 × bob: 8 charged descriptors.
async fn traffic(app: &TestApp) {
    for (entries, times) in [(("user", "alice-s3cret"), 5), (("tenant", "acme"), 2), (("user", "bob"), 1)] {
        assert_eq!(app.allowed_of(times, &request("api", &[&[entries]])).await, times);
    }
}

fn keys(json: &Value) -> &Vec<Value> {
    json["keys"].as_array().unwrap_or_else(|| panic!("keys in {json}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hot_keys_hide_values_unless_the_rule_shows_them() {
    let app = spawn_app(StoreKind::Memory, &[("api.yaml", POLICY)]).await;
    traffic(&app).await;
    let (status, json) = call(&app, "GET", "/v1/hotkeys?domain=api&top=20", None).await;
    assert_eq!(status, 200, "{json}");
    assert_eq!(json["domain"], "api");
    let since = json["since_seconds"].as_u64().unwrap_or_default();
    assert!((1..=60).contains(&since), "{json}");
    let keys = keys(&json);
    assert_eq!(keys.len(), 3, "{json}");
    let first = &keys[0];
    assert_eq!(first["rule"], "per-user");
    assert_eq!(
        first["descriptor"],
        serde_json::json!([{ "key": "user", "value_hash": value_hash("alice-s3cret") }])
    );
    assert_eq!(first["share"], 0.625);
    assert_eq!(first["leased"], false);
    let rate = first["rate_per_second"].as_f64().unwrap_or_default();
    assert!((rate - 5.0 / since as f64).abs() < 0.001, "{json}");
    assert!(!json.to_string().contains("alice-s3cret"), "{json}");
    // Without a configured token the status page shows them to everyone (loopback default).
    let (_, status) = call(&app, "GET", "/v1/status", None).await;
    assert_eq!(status["hot_keys_hidden"], false, "{status}");
    assert_eq!(status["domains"][0]["hot_keys"].as_array().map(Vec::len), Some(3), "{status}");
    assert!(app.admin("GET", "/").await.body.contains("class=\"hot-key\""));
    assert_eq!(keys[1]["descriptor"], serde_json::json!([{ "key": "tenant", "value": "acme" }]));
    assert_eq!(keys[1]["share"], 0.25);

    // `top`: honoured, capped, checked.
    assert_eq!(keys_of(&app, "/v1/hotkeys?domain=api&top=1").await, 1);
    assert_eq!(keys_of(&app, "/v1/hotkeys?domain=api").await, 3);
    assert_eq!(keys_of(&app, "/v1/hotkeys?domain=api&top=100000").await, 3);
    for (path, expected) in [
        ("/v1/hotkeys?domain=api&top=many", 400),
        ("/v1/hotkeys?top=3", 400),
        ("/v1/hotkeys?domain=nope", 404),
    ] {
        let (status, json) = call(&app, "GET", path, None).await;
        assert_eq!(status, expected, "{path}: {json}");
        assert!(json["error"].is_string(), "{path}: {json}");
    }
}

async fn keys_of(app: &TestApp, path: &str) -> usize {
    let (status, json) = call(app, "GET", path, None).await;
    assert_eq!(status, 200, "{path}: {json}");
    keys(&json).len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_token_guards_hot_keys() {
    let dir = tempfile::tempdir().expect("tempdir");
    let token_file = dir.path().join("admin-token");
    std::fs::write(&token_file, "t0ken-s3cret\n").expect("write token");
    let options = Options { admin_token_file: Some(token_file), ..Options::new(StoreKind::Memory) };
    let app = spawn_with(options, &[("api.yaml", POLICY)]).await;
    traffic(&app).await;
    let path = "/v1/hotkeys?domain=api";
    assert_eq!(call(&app, "GET", path, None).await.0, 401);
    assert_eq!(call(&app, "GET", path, Some("wrong")).await.0, 401);
    let (status, json) = call(&app, "GET", path, Some("t0ken-s3cret")).await;
    assert_eq!(status, 200, "{json}");
    assert_eq!(keys(&json).len(), 3);
    // The status page needs no token, but without it names no bucket: no hot keys, no hash.
    for token in [None, Some("wrong")] {
        let (status, json) = call(&app, "GET", "/v1/status", token).await;
        assert_eq!(status, 200);
        assert_eq!(json["hot_keys_hidden"], true, "{json}");
        assert_eq!(json["domains"][0]["hot_keys"], serde_json::json!([]), "{json}");
        assert_eq!(json["domains"][0]["rules"].as_array().map(Vec::len), Some(2), "the rules still show");
        let text = json.to_string();
        assert!(!text.contains(&value_hash("alice-s3cret")) && !text.contains("alice-s3cret"), "{json}");
        let bearer = token.map(|t| format!("Bearer {t}")).unwrap_or_default();
        let headers: &[(&str, &str)] = if token.is_some() { &[("Authorization", &bearer)] } else { &[] };
        let page = http_with(app.admin_addr(), "GET", "/", headers).await.expect("page");
        assert_eq!(page.status, 200);
        assert!(
            page.body.contains("id=\"hot-keys\"") && page.body.contains("need the admin token"),
            "{}",
            page.body
        );
        assert!(!page.body.contains("class=\"hot-key\""), "{}", page.body);
        for value in ["alice-s3cret", "bob"] {
            assert!(
                !page.body.contains(&value_hash(value)[..12]),
                "a bucket's hash on the page: {}",
                page.body
            );
        }
    }
    // With the token: every request value hashed, as before.
    let (status, json) = call(&app, "GET", "/v1/status", Some("t0ken-s3cret")).await;
    assert_eq!(status, 200);
    assert_eq!(json["hot_keys_hidden"], false, "{json}");
    let hot = json["domains"][0]["hot_keys"].as_array().unwrap_or_else(|| panic!("hot_keys in {json}"));
    assert_eq!(hot.len(), 3, "{json}");
    assert_eq!(
        hot[1]["descriptor"],
        serde_json::json!([{ "key": "tenant", "value_hash": value_hash("acme") }])
    );
    assert!(!json.to_string().contains("acme") && !json.to_string().contains("alice-s3cret"), "{json}");
    let page = http_with(app.admin_addr(), "GET", "/", &[("Authorization", "Bearer t0ken-s3cret")])
        .await
        .expect("page");
    assert!(page.body.contains("class=\"hot-key\""), "{}", page.body);
    assert!(page.body.contains(&format!("title=\"{}\"", value_hash("alice-s3cret"))));
    assert!(!page.body.contains("need the admin token"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_share_gauge_has_ten_ranks_per_domain_and_no_values() {
    let app = spawn_app(StoreKind::Memory, &[("api.yaml", POLICY)]).await;
    let text = app.metrics().await;
    let rank =
        |text: &str, n: u32| metric(text, &format!(r#"tollgate_hot_key_share{{domain="api",rank="{n}"}}"#));
    assert_eq!(rank(&text, 1), Some(0.0), "exported before any traffic");
    traffic(&app).await;
    let text = app.metrics().await;
    assert_eq!(rank(&text, 1), Some(0.625));
    assert_eq!(rank(&text, 2), Some(0.25));
    assert_eq!(rank(&text, 3), Some(0.125));
    assert_eq!(rank(&text, 10), Some(0.0));
    assert_eq!(rank(&text, 11), None);
    assert_eq!(text.lines().filter(|l| l.starts_with("tollgate_hot_key_share{")).count(), 10);
    assert!(!text.contains("alice-s3cret"));
}
