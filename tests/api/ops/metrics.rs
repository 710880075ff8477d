//! Metrics: after a known sequence of requests, every counter has an exact value.

use tollgate::app::StoreKind;

use crate::support::*;

const METERED: &str = r#"
domain: metered
failure_mode: open
descriptors:
  - key: user
    rate_limit: { name: two, unit: hour, requests_per_unit: 2 }
  - key: trial
    shadow_mode: true
    rate_limit: { name: trial, unit: hour, requests_per_unit: 1 }
  - key: health
    rate_limit: { unlimited: true }
"#;

const STRICT: &str = r#"
domain: strict
failure_mode: closed
descriptors:
  - key: ip
    rate_limit: { name: per-ip, unit: hour, requests_per_unit: 5 }
"#;

const RESULTS: [&str; 7] = [
    "within_limit",
    "near_limit",
    "over_limit",
    "shadow_mode",
    "unlimited",
    "failure_open",
    "failure_closed",
];

/// Asserts every result counter of one rule: `expected` lists the non-zero ones.
fn assert_decisions(text: &str, domain: &str, rule: &str, expected: &[(&str, f64)]) {
    for result in RESULTS {
        let want = expected.iter().find(|(r, _)| *r == result).map_or(0.0, |(_, n)| *n);
        let series =
            format!(r#"tollgate_decisions_total{{domain="{domain}",rule="{rule}",result="{result}"}}"#);
        assert_eq!(metric(text, &series), Some(want), "{series}\n{text}");
    }
}

fn hits(text: &str, domain: &str, rule: &str) -> Option<f64> {
    metric(text, &format!(r#"tollgate_hits_total{{domain="{domain}",rule="{rule}"}}"#))
}

/// 10 calls: 3 within/near/over, 2 on a shadow rule, 1 unlimited, 2 for an unknown domain,
/// then Redis stops: 1 on a fail-open domain, 1 on a fail-closed one.
async fn known_sequence(app: &mut TestApp) {
    let mut codes = Vec::new();
    // Limit 2, near-limit ratio 0.8: 1 of 2 used is within, 2 of 2 is near, then over.
    for _ in 0..3 {
        codes.push(over(&app.check(request("metered", &[&[("user", "alice")]])).await));
    }
    assert_eq!(codes, [false, false, true]);
    // Shadow rule, limit 1: the first is near (1 of 1), the second would be denied.
    for _ in 0..2 {
        assert!(!over(&app.check(request("metered", &[&[("trial", "t")]])).await));
    }
    app.check(request("metered", &[&[("health", "h")]])).await;
    for _ in 0..2 {
        app.check(request("nowhere", &[&[("user", "alice")]])).await;
    }
    app.redis().stop();
    assert!(!over(&app.check(request("metered", &[&[("user", "bob")]])).await), "open domain");
    assert!(over(&app.check(request("strict", &[&[("ip", "192.0.2.1")]])).await), "closed domain");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_result_is_counted_exactly() {
    let mut app = spawn_app(StoreKind::Redis, &[("metered.yaml", METERED), ("strict.yaml", STRICT)]).await;
    known_sequence(&mut app).await;

    let text = app.metrics().await;
    assert_decisions(
        &text,
        "metered",
        "two",
        &[("within_limit", 1.0), ("near_limit", 1.0), ("over_limit", 1.0), ("failure_open", 1.0)],
    );
    assert_decisions(&text, "metered", "trial", &[("near_limit", 1.0), ("shadow_mode", 1.0)]);
    // An unnamed rule is labelled with its config path.
    assert_decisions(&text, "metered", "descriptors[2]", &[("unlimited", 1.0)]);
    assert_decisions(&text, "strict", "per-ip", &[("failure_closed", 1.0)]);
    // Hits are the hits asked for by every decided descriptor, denied and failed included.
    assert_eq!(hits(&text, "metered", "two"), Some(4.0));
    assert_eq!(hits(&text, "metered", "trial"), Some(2.0));
    assert_eq!(hits(&text, "metered", "descriptors[2]"), Some(0.0));
    assert_eq!(metric(&text, "tollgate_unknown_domain_requests_total"), Some(2.0));
    assert_eq!(metric(&text, r#"tollgate_store_requests_total{store="redis",outcome="ok"}"#), Some(5.0));
    let failed: f64 = ["timeout", "unavailable", "server_error", "circuit_open"]
        .iter()
        .filter_map(|o| {
            metric(&text, &format!(r#"tollgate_store_requests_total{{store="redis",outcome="{o}"}}"#))
        })
        .sum();
    assert_eq!(failed, 2.0, "{text}");
    assert_eq!(metric(&text, r#"tollgate_store_duration_seconds_count{store="redis"}"#), Some(7.0));
    assert_eq!(metric(&text, "tollgate_request_duration_seconds_count"), Some(10.0));

    let rlconfig = app.admin("GET", "/rlconfig?format=json").await;
    let json: serde_json::Value = serde_json::from_str(&rlconfig.body).expect("json");
    let version = json["version"].as_str().expect("version");
    assert_eq!(metric(&text, &format!(r#"tollgate_config_info{{version="{version}"}}"#)), Some(1.0));
    assert_eq!(text.matches("tollgate_config_info{").count(), 1, "one version at a time");
    // Two failed calls within 0.5 s are no outage yet (`store::redis::health`); failing calls
    // with none succeeding for that long are.
    assert_eq!(json["store"]["healthy"], serde_json::Value::Bool(true), "two failed calls");
    tokio::time::sleep(std::time::Duration::from_millis(600)).await;
    app.check(request("strict", &[&[("ip", "192.0.2.2")]])).await;
    let status = app.admin("GET", "/rlconfig?format=json").await;
    let json: serde_json::Value = serde_json::from_str(&status.body).expect("json");
    assert_eq!(json["store"]["healthy"], serde_json::Value::Bool(false), "redis is down");
    assert_eq!(app.admin("GET", "/readyz").await.status, 200, "readiness does not follow redis");
}

/// A rule with `rate_limits` counts each decision under the limit that decided it,
/// labelled `<rule path>/<name>`; the limits' series exist from the start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_limit_of_a_rule_has_its_own_series() {
    let policy =
        "domain: several\ndescriptors:\n  - key: key\n    rate_limits:\n      - { name: burst, unit: hour, \
                  requests_per_unit: 2 }\n      - { name: daily, unit: day, requests_per_unit: 100 }\n";
    let app = spawn_app(StoreKind::Memory, &[("several.yaml", policy)]).await;
    let req = request("several", &[&[("key", "k")]]);
    assert_eq!(app.allowed_of(3, &req).await, 2);
    let text = app.metrics().await;
    let series = |rule: &str, result: &str| {
        let name =
            format!("tollgate_decisions_total{{domain=\"several\",rule=\"{rule}\",result=\"{result}\"}}");
        metric(&text, &name)
    };
    // burst decides all three: 1 of 2 left (50 %) beats 99 of 100; then 0 left; then denied.
    assert_eq!(series("descriptors[0]/burst", "within_limit"), Some(1.0), "{text}");
    assert_eq!(series("descriptors[0]/burst", "near_limit"), Some(1.0), "{text}");
    assert_eq!(series("descriptors[0]/burst", "over_limit"), Some(1.0), "{text}");
    assert_eq!(series("descriptors[0]/daily", "within_limit"), Some(0.0), "the series exists: {text}");
}

/// A scrape as the server writes it: a labelled counter family registered, none of its
/// series incremented yet; one gauge.
const SCRAPE: &str = "# HELP tollgate_decisions Decisions.\n# TYPE tollgate_decisions counter\n\
                      # HELP tollgate_memory_keys Keys.\n# TYPE tollgate_memory_keys gauge\n\
                      tollgate_memory_keys 3\n# EOF\n";

#[test]
#[should_panic(expected = "metric series tollgate_memory_keyz is not exported")]
fn reading_a_series_that_is_not_exported_fails_the_test() {
    assert_eq!(metric_value(SCRAPE, "tollgate_memory_keys"), 3.0);
    metric_value(SCRAPE, "tollgate_memory_keyz");
}

#[test]
#[should_panic(expected = "metric family tollgate_decisionz_total is not exported")]
fn a_counter_of_a_family_that_is_not_exported_fails_the_test() {
    // Not yet incremented, of an exported family: 0, as the server means it.
    let ok = r#"tollgate_decisions_total{domain="d",rule="r",result="failure_open"}"#;
    assert_eq!(counter_value(SCRAPE, ok), 0.0);
    counter_value(SCRAPE, r#"tollgate_decisionz_total{domain="d",rule="r",result="failure_open"}"#);
}
