//! Hot reload: each trigger serves the new limit within 2 s without failing a request in
//! flight; a broken file keeps the old limits, is counted and names file and rule; 100
//! reloads under traffic never show a mixed snapshot.

use std::path::Path;
use std::time::Duration;

use tollgate::app::StoreKind;

use super::{user_limit, user_policy};
use crate::support::*;

/// Runs `trigger` while 4 tasks send requests; the new limit (2000, from 1000) must serve
/// within 2 s and no request may fail.
async fn assert_reload_without_errors(app: &TestApp, trigger: impl FnOnce()) {
    assert_eq!(user_limit(app).await, 1000);
    let traffic = Traffic::start(&app.client, &request("api", &[&[("user", "alice")]]), 4);
    trigger();
    let reloaded = eventually(Duration::from_secs(2), || async { user_limit(app).await == 2000 }).await;
    let report = traffic.stop().await;
    assert!(reloaded, "the new limit was not served within 2 s");
    assert!(report.errors.is_empty(), "requests failed during the reload: {:?}", report.errors);
    assert!(report.requests > 0);
    assert!(report.limits.iter().all(|l| l == &[1000] || l == &[2000]), "{:?}", report.limits);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_place_write_reloads() {
    let app = spawn_app(StoreKind::Memory, &[("api.yaml", &user_policy(1000))]).await;
    let file = app.config_path().join("api.yaml");
    assert_reload_without_errors(&app, || std::fs::write(&file, user_policy(2000)).expect("write")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rename_onto_the_file_reloads() {
    let app = spawn_app(StoreKind::Memory, &[("api.yaml", &user_policy(1000))]).await;
    let dir = app.config_path();
    assert_reload_without_errors(&app, || {
        // A dotfile: the loader ignores it, as editors' and tools' temporaries.
        std::fs::write(dir.join(".api.yaml.tmp"), user_policy(2000)).expect("write temp");
        std::fs::rename(dir.join(".api.yaml.tmp"), dir.join("api.yaml")).expect("rename");
    })
    .await;
}

/// A Kubernetes ConfigMap volume: `api.yaml -> ..data/api.yaml`, `..data -> ..<timestamp>`.
fn configmap_version(dir: &Path, name: &str, yaml: &str) {
    std::fs::create_dir(dir.join(name)).expect("mkdir");
    std::fs::write(dir.join(name).join("api.yaml"), yaml).expect("write");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configmap_symlink_swap_reloads() {
    let dir = tempfile::tempdir().expect("tempdir");
    configmap_version(dir.path(), "..2026_01_01_00_00_00.1", &user_policy(1000));
    std::os::unix::fs::symlink("..2026_01_01_00_00_00.1", dir.path().join("..data")).expect("..data");
    std::os::unix::fs::symlink("..data/api.yaml", dir.path().join("api.yaml")).expect("api.yaml");
    let app = spawn_in(Options::new(StoreKind::Memory), dir).await;
    let dir = app.config_path();
    assert_reload_without_errors(&app, || {
        // What the kubelet does: new directory, `..data_tmp` symlink, rename over `..data`.
        configmap_version(&dir, "..2026_01_01_00_01_00.2", &user_policy(2000));
        std::os::unix::fs::symlink("..2026_01_01_00_01_00.2", dir.join("..data_tmp")).expect("..data_tmp");
        std::fs::rename(dir.join("..data_tmp"), dir.join("..data")).expect("swap ..data");
    })
    .await;
}

const BROKEN: &str =
    "domain: api\ndescriptors:\n  - key: user\n    rate_limit: { unit: fortnight, requests_per_unit: 5 }\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn post_reload_applies_rejects_a_broken_file_and_recovers() {
    let options = Options { watch_config: false, ..Options::new(StoreKind::Memory) };
    let app = spawn_with(options, &[("api.yaml", &user_policy(1000))]).await;
    let file = app.config_path().join("api.yaml");
    let version = |body: &str| body.trim().rsplit(' ').next().unwrap_or_default().to_string();

    std::fs::write(&file, user_policy(2000)).expect("write");
    assert_eq!(user_limit(&app).await, 1000, "watching is off: nothing reloads by itself");
    let ok = app.admin("POST", "/reload").await;
    assert_eq!(ok.status, 200, "{}", ok.body);
    assert!(ok.body.starts_with("reloaded: version "), "{}", ok.body);
    assert_eq!(user_limit(&app).await, 2000);
    let rlconfig = app.admin("GET", "/rlconfig?format=json").await;
    let json: serde_json::Value = serde_json::from_str(&rlconfig.body).expect("json");
    assert_eq!(json["version"].as_str(), Some(version(&ok.body).as_str()));

    std::fs::write(&file, BROKEN).expect("write broken");
    let rejected = app.admin("POST", "/reload").await;
    assert_eq!(rejected.status, 422, "{}", rejected.body);
    for expected in ["api.yaml", "descriptors[0].rate_limit.unit", "fortnight"] {
        assert!(rejected.body.contains(expected), "422 body lacks {expected:?}: {}", rejected.body);
    }
    assert_eq!(user_limit(&app).await, 2000, "the previous config keeps serving");
    let text = app.metrics().await;
    assert_eq!(metric(&text, r#"tollgate_config_reloads_total{result="failure"}"#), Some(1.0), "{text}");
    assert_eq!(metric(&text, r#"tollgate_config_reloads_total{result="success"}"#), Some(1.0));

    std::fs::write(&file, user_policy(3000)).expect("fix");
    assert_eq!(app.admin("POST", "/reload").await.status, 200);
    assert_eq!(user_limit(&app).await, 3000);
    let unchanged = app.admin("POST", "/reload").await;
    assert!(unchanged.status == 200 && unchanged.body.starts_with("unchanged"), "{}", unchanged.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broken_file_seen_by_the_watcher_keeps_the_old_limits() {
    let app = spawn_app(StoreKind::Memory, &[("api.yaml", &user_policy(1000))]).await;
    let file = app.config_path().join("api.yaml");
    std::fs::write(&file, BROKEN).expect("write broken");
    let counted = eventually(Duration::from_secs(2), || async {
        metric(&app.metrics().await, r#"tollgate_config_reloads_total{result="failure"}"#)
            .is_some_and(|n| n >= 1.0)
    })
    .await;
    assert!(counted, "the failed reload was not counted");
    assert_eq!(user_limit(&app).await, 1000);
    std::fs::write(&file, user_policy(2000)).expect("fix");
    assert!(eventually(Duration::from_secs(2), || async { user_limit(&app).await == 2000 }).await);
}

/// Two descriptors whose limits move together: a mixed snapshot would pair them wrongly.
fn pair_policy(a: u32, b: u32) -> String {
    format!(
        "domain: api\ndescriptors:\n  - key: a\n    rate_limit: {{ unit: hour, requests_per_unit: {a} }}\n  - key: b\n    rate_limit: {{ unit: hour, requests_per_unit: {b} }}\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hundred_reloads_under_traffic_never_mix_snapshots() {
    let options = Options { watch_config: false, ..Options::new(StoreKind::Memory) };
    let app = spawn_with(options, &[("api.yaml", &pair_policy(1000, 2000))]).await;
    let file = app.config_path().join("api.yaml");
    let traffic = Traffic::start(&app.client, &request("api", &[&[("a", "x")], &[("b", "y")]]), 8);
    for i in 0..100 {
        let (a, b) = if i % 2 == 0 { (1001, 2001) } else { (1000, 2000) };
        std::fs::write(&file, pair_policy(a, b)).expect("write");
        let response = app.admin("POST", "/reload").await;
        assert!(response.status == 200 && response.body.starts_with("reloaded"), "{}", response.body);
    }
    let report = traffic.stop().await;
    assert!(report.errors.is_empty(), "gRPC errors: {:?}", &report.errors[..report.errors.len().min(5)]);
    let expected: std::collections::BTreeSet<Vec<u32>> = [vec![1000, 2000], vec![1001, 2001]].into();
    assert_eq!(report.limits, expected, "every response from one whole snapshot, both seen");
    assert!(report.requests >= 100, "too little traffic to mean anything: {}", report.requests);
    let text = app.metrics().await;
    assert_eq!(metric(&text, r#"tollgate_config_reloads_total{result="success"}"#), Some(100.0));
}

/// `--admin-token-file`: `POST /reload` needs the bearer token; read endpoints never do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_token_guards_post_endpoints_only() {
    let dir = tempfile::tempdir().expect("tempdir");
    let token_file = dir.path().join("admin-token");
    std::fs::write(&token_file, "t0ken-s3cret\n").expect("write token");
    let options = Options { admin_token_file: Some(token_file), ..Options::new(StoreKind::Memory) };
    let app = spawn_with(options, &[("api.yaml", &user_policy(3))]).await;
    let addr = app.admin_addr();
    let post = |headers: &'static [(&'static str, &'static str)]| async move {
        http_with(addr, "POST", "/reload", headers).await.expect("admin").status
    };
    assert_eq!(post(&[]).await, 401, "no token");
    assert_eq!(post(&[("Authorization", "Bearer wrong")]).await, 401, "a wrong token");
    assert_eq!(post(&[("Authorization", "t0ken-s3cret")]).await, 401, "not a bearer");
    assert_eq!(post(&[("Authorization", "Bearer t0ken-s3cret")]).await, 200, "the token");
    for path in ["/healthz", "/readyz", "/metrics", "/rlconfig", "/rlconfig?format=json"] {
        let response = app.admin("GET", path).await;
        assert_eq!(response.status, 200, "{path} needs no token");
        assert!(!response.body.contains("t0ken-s3cret"), "{path} shows the token");
    }
}

/// `user` at `per_user` per hour (gcra), with `hash_tag` given when `Some`.
fn tagged_policy(hash_tag: Option<&str>, per_user: u32) -> String {
    let tag = hash_tag.map_or(String::new(), |tag| format!("hash_tag: {tag}\n"));
    format!(
        "domain: api\n{tag}descriptors:\n  - key: user\n    rate_limit: {{ name: per-user, unit: hour, requests_per_unit: {per_user} }}\n"
    )
}

/// A reload that changes `hash_tag` starts the domain's buckets afresh (an exhausted bucket
/// admits again) and counts it per domain; a new limit alone keeps the counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_hash_tag_starts_buckets_afresh_and_is_counted() {
    let options = Options { watch_config: false, ..Options::new(StoreKind::Memory) };
    let app = spawn_with(options, &[("api.yaml", &tagged_policy(None, 2))]).await;
    let file = app.config_path().join("api.yaml");
    let alice = request("api", &[&[("user", "alice")]]);
    let fresh = |text: &str| metric(text, r#"tollgate_config_reload_fresh_rules_total{domain="api"}"#);
    assert_eq!(fresh(&app.metrics().await), Some(0.0), "exported from the start");
    assert_eq!(app.allowed_of(3, &alice).await, 2);

    std::fs::write(&file, tagged_policy(None, 3)).expect("write");
    assert_eq!(app.admin("POST", "/reload").await.status, 200);
    assert_eq!(app.allowed_of(1, &alice).await, 0, "a new limit keeps the exhausted bucket");
    assert_eq!(fresh(&app.metrics().await), Some(0.0), "exported at 0; nothing started afresh");

    std::fs::write(&file, tagged_policy(Some("domain"), 3)).expect("write");
    let response = app.admin("POST", "/reload").await;
    assert!(response.status == 200 && response.body.starts_with("reloaded: version "), "{}", response.body);
    assert_eq!(app.allowed_of(4, &alice).await, 3, "a new hash_tag: a new, full bucket");
    assert_eq!(fresh(&app.metrics().await), Some(1.0));
}
