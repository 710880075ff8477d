//! `--merge-domains`: one domain served from two files, shown in `/rlconfig` with every
//! file, and a reload that breaks the merge keeps the old config serving and names both
//! files.

use tollgate::app::StoreKind;
use tollgate::config::LoadOptions;

use crate::support::*;

const USERS: &str = "domain: api\nfailure_mode: closed\ndescriptors:\n  - key: user\n    rate_limit: { name: per-user, unit: hour, requests_per_unit: 2 }\n";
const IPS: &str =
    "domain: api\ndescriptors:\n  - key: ip\n    rate_limit: { unit: hour, requests_per_unit: 3 }\n";

async fn merged_app() -> TestApp {
    let options = Options {
        watch_config: false,
        config_options: LoadOptions { merge_domains: true, ..LoadOptions::default() },
        ..Options::new(StoreKind::Memory)
    };
    spawn_with(options, &[("api-users.yaml", USERS), ("api-ips.yaml", IPS)]).await
}

/// The limit and how many of `n` requests pass for one descriptor of domain `api`.
async fn limit_and_allowed(app: &TestApp, entry: (&str, &str), n: usize) -> (u32, usize) {
    let req = request("api", &[&[entry]]);
    let limit = limits(&app.check(req.clone()).await)[0];
    (limit, 1 + app.allowed_of(n - 1, &req).await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_domain_from_two_files_serves_the_limits_of_both() {
    let app = merged_app().await;
    assert_eq!(limit_and_allowed(&app, ("user", "alice"), 5).await, (2, 2));
    assert_eq!(limit_and_allowed(&app, ("ip", "10.0.0.1"), 5).await, (3, 3));

    let json = app.admin("GET", "/rlconfig?format=json").await;
    let json: serde_json::Value = serde_json::from_str(&json.body).expect("json");
    let [api] = json["domains"].as_array().expect("domains").as_slice() else { panic!("{json}") };
    let dir = app.config_path();
    let file = |name: &str| dir.join(name).display().to_string();
    assert_eq!(api["file"], file("api-ips.yaml"), "file: the first, in file-name order");
    assert_eq!(api["files"], serde_json::json!([file("api-ips.yaml"), file("api-users.yaml")]));
    assert_eq!(api["failure_mode"], "closed", "set in one file, it applies to the merged domain");
    let labels: Vec<(&str, &str)> = api["rules"]
        .as_array()
        .expect("rules")
        .iter()
        .map(|rule| (rule["path"].as_str().unwrap_or(""), rule["name"].as_str().unwrap_or("")))
        .collect();
    assert_eq!(labels, [("api-ips:descriptors[0]", ""), ("api-users:descriptors[0]", "per-user")]);
    let metrics = app.metrics().await;
    assert!(
        metrics.contains(r#"rule="api-ips:descriptors[0]""#),
        "unnamed rules carry their file's stem:\n{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_that_breaks_the_merge_keeps_the_old_config_and_names_both_files() {
    let app = merged_app().await;
    let ips = app.config_path().join("api-ips.yaml");
    let ip_limit = || async { limits(&app.check(request("api", &[&[("ip", "10.0.0.1")]])).await)[0] };

    // The same top-level key in both files.
    std::fs::write(&ips, IPS.replace("key: ip", "key: user")).expect("write");
    let rejected = app.admin("POST", "/reload").await;
    assert_eq!(rejected.status, 422, "{}", rejected.body);
    for expected in ["api-ips.yaml", "api-users.yaml", "duplicate descriptor", "descriptors[0]"] {
        assert!(rejected.body.contains(expected), "422 body lacks {expected:?}: {}", rejected.body);
    }
    assert_eq!(ip_limit().await, 3, "the previous config keeps serving");

    // Two failure modes for one domain.
    std::fs::write(&ips, IPS.replace("domain: api\n", "domain: api\nfailure_mode: open\n")).expect("write");
    let rejected = app.admin("POST", "/reload").await;
    assert_eq!(rejected.status, 422, "{}", rejected.body);
    for expected in ["api-ips.yaml", "api-users.yaml", "failure_mode"] {
        assert!(rejected.body.contains(expected), "422 body lacks {expected:?}: {}", rejected.body);
    }
    assert_eq!(ip_limit().await, 3);

    std::fs::write(&ips, IPS.replace("requests_per_unit: 3", "requests_per_unit: 30")).expect("fix");
    let applied = app.admin("POST", "/reload").await;
    assert_eq!(applied.status, 200, "{}", applied.body);
    assert_eq!(ip_limit().await, 30);
    let text = app.metrics().await;
    assert_eq!(metric(&text, r#"tollgate_config_reloads_total{result="failure"}"#), Some(2.0));
}
