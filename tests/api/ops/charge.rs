//! `--stop-charging-when-over-limit`: the charge mode of every domain that sets none, kept
//! across reloads; a domain's own `charge` wins. Shown in `/rlconfig`.

use tollgate::app::StoreKind;
use tollgate::config::LoadOptions;

use crate::support::*;

const POLICY: &str =
    "domain: api\ndescriptors:\n  - key: user\n    rate_limit: { unit: hour, requests_per_unit: 2 }\n";

/// `(charge, hash_tag)` of domain `api` in `/rlconfig?format=json`.
async fn modes(app: &TestApp) -> (String, String) {
    let json = app.admin("GET", "/rlconfig?format=json").await;
    let json: serde_json::Value = serde_json::from_str(&json.body).expect("json");
    let api = &json["domains"][0];
    assert_eq!(api["domain"], "api");
    let text = |field: &str| api[field].as_str().unwrap_or_default().to_owned();
    (text("charge"), text("hash_tag"))
}

fn all_or_nothing() -> (String, String) {
    ("all_or_nothing".to_owned(), "descriptor".to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_flag_sets_the_charge_mode_and_survives_a_reload() {
    let options = Options {
        watch_config: false,
        config_options: LoadOptions { stop_charging_when_over_limit: true, ..LoadOptions::default() },
        ..Options::new(StoreKind::Memory)
    };
    let app = spawn_with(options, &[("api.yaml", POLICY)]).await;
    assert_eq!(modes(&app).await, all_or_nothing());
    let text = app.admin("GET", "/rlconfig").await.body;
    assert!(
        text.contains("domain api (failure_mode open, charge all_or_nothing, hash_tag descriptor,"),
        "{text}"
    );

    let file = app.config_path().join("api.yaml");
    std::fs::write(&file, POLICY.replace("requests_per_unit: 2", "requests_per_unit: 3")).expect("write");
    assert_eq!(app.admin("POST", "/reload").await.status, 200);
    assert_eq!(modes(&app).await, all_or_nothing(), "a reload keeps the flag");

    let own = POLICY.replace("domain: api\n", "domain: api\ncharge: per_descriptor\nhash_tag: domain\n");
    std::fs::write(&file, own).expect("write");
    assert_eq!(app.admin("POST", "/reload").await.status, 200);
    assert_eq!(
        modes(&app).await,
        ("per_descriptor".to_owned(), "domain".to_owned()),
        "the domain's field wins"
    );
}
