//! Unit tests of `rlconfig`: the listings, text and JSON, of a compiled snapshot.

use std::path::PathBuf;

use super::*;
use crate::config::compile_sources;

const POLICY: &str = r#"domain: api
charge: all_or_nothing
descriptors:
  - key: api_key
    rate_limits:
      - { name: burst, unit: second, requests_per_unit: 20 }
      - { name: five, unit: minute, unit_multiplier: 5, requests_per_unit: 7, algorithm: fixed_window }
  - key: user
    rate_limit: { name: per-user, unit: second, unit_multiplier: 30, requests_per_unit: 2, burst: 3 }
"#;

fn snapshot() -> Snapshot {
    compile_sources(&[(PathBuf::from("api.yaml"), POLICY.to_owned())]).expect("valid policy")
}

fn store() -> StoreState {
    StoreState { kind: "memory", healthy: true, detail: String::new(), client_cert: None, windows: None }
}

#[test]
fn text_and_json_show_a_calendar_period_and_its_next_reset() {
    let policy = "domain: billing\ndescriptors:\n  - key: plan\n    rate_limit: {unit: week, requests_per_unit: 9, calendar: {}}\n";
    let snapshot = compile_sources(&[(PathBuf::from("b.yaml"), policy.to_owned())]).expect("valid policy");
    let text = text(&snapshot, &store());
    assert!(text.contains("9 per calendar week, UTC (fixed_window) next reset 20"), "{text}");
    let json = json(&snapshot, &store());
    let limit = &json["domains"][0]["rules"][0]["limits"][0];
    assert_eq!(
        (limit["unit"].as_str(), limit["period"].as_str()),
        (Some("week"), Some("calendar week, UTC"))
    );
    assert_eq!(limit["calendar"]["time_zone"], "UTC");
    assert!(limit["calendar"]["next_reset"].as_str().is_some_and(|t| t.ends_with("T00:00:00+00:00")));
}

#[test]
fn the_path_of_each_rule_follows_redis_windows_and_what_the_rule_needs() {
    let policy = "domain: w\ndescriptors:\n  - key: f\n    rate_limit: {unit: minute, requests_per_unit: 9, algorithm: fixed_window}\n  - key: s\n    rate_limit: {unit: minute, requests_per_unit: 9, algorithm: sliding_window}\n  - key: c\n    rate_limit: {unit: month, requests_per_unit: 9, calendar: {}}\n  - key: g\n    rate_limit: {unit: minute, requests_per_unit: 9}\n";
    let snapshot = compile_sources(&[(PathBuf::from("w.yaml"), policy.to_owned())]).expect("valid");
    let redis = |windows| StoreState { kind: "redis", windows: Some(windows), ..store() };
    let paths = |store: &StoreState| -> Vec<Value> {
        let json = json(&snapshot, store);
        json["domains"][0]["rules"]
            .as_array()
            .expect("rules")
            .iter()
            .map(|r| r["redis_path"].clone())
            .collect()
    };
    assert_eq!(paths(&redis(Windows::Plain)), [json!("plain"), json!("plain"), json!("lua"), json!("lua")]);
    assert_eq!(paths(&redis(Windows::Lua)), vec![json!("lua"); 4]);
    assert_eq!(paths(&store()), [Value::Null, Value::Null, Value::Null, Value::Null]);
    let text = text(&snapshot, &redis(Windows::Plain));
    assert!(text.contains("redis_windows: plain") && text.contains("(sliding_window) path plain"), "{text}");
    // Every descriptor of an all_or_nothing domain is one script call.
    let all = text_of_snapshot_paths(&snapshot_all_or_nothing(), &redis(Windows::Plain));
    assert!(all.iter().all(|p| p == "lua"), "{all:?}");
}

fn snapshot_all_or_nothing() -> Snapshot {
    let policy = "domain: a\ncharge: all_or_nothing\ndescriptors:\n  - key: f\n    rate_limit: {unit: minute, requests_per_unit: 9, algorithm: fixed_window}\n";
    compile_sources(&[(PathBuf::from("a.yaml"), policy.to_owned())]).expect("valid")
}

fn text_of_snapshot_paths(snapshot: &Snapshot, store: &StoreState) -> Vec<String> {
    let json = json(snapshot, store);
    let rules = json["domains"][0]["rules"].as_array().cloned().unwrap_or_default();
    rules.iter().map(|r| r["redis_path"].as_str().unwrap_or("").to_string()).collect()
}

#[test]
fn text_shows_every_limit_its_window_and_the_domain_modes() {
    let text = text(&snapshot(), &store());
    for expected in [
        "domain api (failure_mode open, charge all_or_nothing, hash_tag descriptor, consistency exact, api.yaml)",
        "descriptors[0] [api_key]: burst: 20 per second (gcra); five: 7 per 5 minutes (fixed_window)",
        "per-user [user]: 2 per 30 seconds (gcra) burst 3",
    ] {
        assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
    }
}

#[test]
fn json_adds_the_domain_modes_and_each_limit_keeping_the_old_fields() {
    let json = json(&snapshot(), &store());
    let domain = &json["domains"][0];
    assert_eq!(
        (domain["charge"].as_str(), domain["hash_tag"].as_str()),
        (Some("all_or_nothing"), Some("descriptor"))
    );
    assert_eq!(domain["failure_mode"], "open");
    assert_eq!(domain["consistency"], "exact");
    let several = &domain["rules"][0];
    assert_eq!(several["name"], Value::Null);
    assert_eq!((several["requests_per_unit"].as_u64(), several["unit"].as_str()), (Some(20), Some("second")));
    let five = &several["limits"][1];
    assert_eq!(five["name"], "five");
    assert_eq!(five["unit"], "minute");
    assert_eq!(five["unit_multiplier"], 5);
    assert_eq!(five["window_seconds"], 300);
    assert_eq!(five["algorithm"], "fixed_window");
    let single = &domain["rules"][1]["limits"][0];
    assert_eq!((single["name"].clone(), single["window_seconds"].as_u64()), (Value::Null, Some(30)));
}

#[test]
fn text_and_json_show_an_approximate_domain() {
    let yaml = "domain: edge\nconsistency: approximate\ndescriptors:\n  - key: ip\n    rate_limit: { unit: minute, requests_per_unit: 1000, algorithm: sliding_window }\n";
    let snapshot = compile_sources(&[(PathBuf::from("edge.yaml"), yaml.to_owned())]).expect("valid policy");
    let text = text(&snapshot, &store());
    assert!(
        text.contains("domain edge (failure_mode open, charge per_descriptor, hash_tag descriptor, consistency approximate, edge.yaml)"),
        "{text}"
    );
    assert_eq!(json(&snapshot, &store())["domains"][0]["consistency"], "approximate");
}
