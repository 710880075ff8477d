//! The hot-key view fed exactly as the request path feeds it: descriptors planned by
//! `service::plan`, their buckets picked by `hot_buckets`, recorded in `hotkeys`.

use std::path::PathBuf;

use super::hot_buckets;
use crate::config::{compile_sources, Snapshot};
use crate::service::plan;
use crate::service::wire::RateLimitDescriptor;
use crate::store::key::{digest_hex, part_digest};
use crate::telemetry::hotkeys::*;

const POLICY: &str = r#"
domain: api
descriptors:
  - key: user
    rate_limit: { name: per-user, unit: minute, requests_per_unit: 100 }
  - key: tenant
    detailed_metric: true
    rate_limit: { unit: minute, requests_per_unit: 100 }
  - key: route
    value: "api/*"
    share_threshold: true
    descriptors:
      - key: method
        rate_limit: { unit: minute, requests_per_unit: 100 }
  - key: plan
    value: gold
    rate_limit: { unit: minute, requests_per_unit: 100 }
"#;

fn snapshot() -> Snapshot {
    compile_sources(&[(PathBuf::from("api.yaml"), POLICY.to_owned())]).expect("the policy loads")
}

/// Decides nothing: plans `descriptors` as the service does and records them `times` times.
fn feed(hot: &SnapshotHotKeys, snapshot: &Snapshot, now: u64, entries: &[(&str, &str)], times: usize) {
    let domain = snapshot.domain("api").expect("api");
    let descriptors = [RateLimitDescriptor::from_entries(entries.iter().copied())];
    let (plans, charges, _) = plan::plan(domain, &descriptors, 1, "");
    for _ in 0..times {
        hot.record("api", now, hot_buckets(&plans, &charges, &descriptors));
    }
}

fn read(hot: &SnapshotHotKeys, snapshot: &Snapshot, values: Values<'_>) -> HotKeysView {
    let domain = snapshot.domain("api").expect("api");
    view(domain, hot.domain("api").expect("sketch"), 10, 20, values, |_| false)
}

fn entry_json(view: &HotKeysView, rule: &str) -> serde_json::Value {
    let key = view.keys.iter().find(|k| k.rule == rule).unwrap_or_else(|| panic!("{rule} in {view:?}"));
    serde_json::to_value(&key.descriptor).expect("json")
}

#[test]
fn values_show_only_where_the_config_shows_them() {
    let snapshot = snapshot();
    let hot = HotKeys::default().for_snapshot(&snapshot, 1);
    feed(&hot, &snapshot, 10, &[("user", "secret-api-key")], 3);
    feed(&hot, &snapshot, 10, &[("tenant", "acme\n")], 2);
    feed(&hot, &snapshot, 10, &[("route", "api/v1"), ("method", "GET")], 1);
    feed(&hot, &snapshot, 10, &[("route", "api/v2"), ("method", "GET")], 1);
    feed(&hot, &snapshot, 10, &[("plan", "gold")], 1);
    let view = read(&hot, &snapshot, Values::AsConfigured);
    assert_eq!(view.domain, "api");
    assert_eq!(view.since_seconds, 9);
    let hash = |value: &str| digest_hex(&part_digest(value.as_bytes()));
    assert_eq!(
        entry_json(&view, "per-user"),
        serde_json::json!([{ "key": "user", "value_hash": hash("secret-api-key") }])
    );
    assert!(!serde_json::to_string(&view).expect("json").contains("secret-api-key"));
    // detailed_metric: shown, escaped.
    assert_eq!(
        entry_json(&view, "descriptors[1]"),
        serde_json::json!([{ "key": "tenant", "value": "acme\\x0a" }])
    );
    // share_threshold: one bucket for both routes, shown as its pattern; the method hashed.
    let shared = view.keys.iter().find(|k| k.rule == "descriptors[2].descriptors[0]").expect("shared");
    assert_eq!(shared.rate_per_second, round3(2.0 / 9.0));
    assert_eq!(
        serde_json::to_value(&shared.descriptor).expect("json"),
        serde_json::json!([{ "key": "route", "value": "api/*" }, { "key": "method", "value_hash": hash("GET") }])
    );
    // An exact value is config text.
    assert_eq!(entry_json(&view, "descriptors[3]"), serde_json::json!([{ "key": "plan", "value": "gold" }]));
    // Busiest first, shares of the 8 decisions.
    assert_eq!(view.keys[0].rule, "per-user");
    assert_eq!(view.keys[0].share, 0.375);
    assert!(view.keys.iter().all(|k| !k.leased));
    // Without the token's protection (the status page) no request value shows.
    let hashed = read(&hot, &snapshot, Values::Hashed);
    assert_eq!(
        entry_json(&hashed, "descriptors[1]"),
        serde_json::json!([{ "key": "tenant", "value_hash": hash("acme\n") }])
    );
    assert_eq!(
        entry_json(&hashed, "descriptors[3]"),
        serde_json::json!([{ "key": "plan", "value": "gold" }])
    );
}

#[test]
fn an_open_admin_port_sees_every_request_value_keyed_with_the_process_key() {
    let snapshot = snapshot();
    let hot = HotKeys::default().for_snapshot(&snapshot, 1);
    let long = "z".repeat(200);
    feed(&hot, &snapshot, 10, &[("user", "203.0.113.7")], 3);
    feed(&hot, &snapshot, 10, &[("tenant", "acme")], 2);
    feed(&hot, &snapshot, 10, &[("user", &long)], 1);
    feed(&hot, &snapshot, 10, &[("plan", "gold")], 1);
    let (key, other) = (ViewKey::random(), ViewKey::random());
    let view = read(&hot, &snapshot, Values::Keyed(&key));
    let text = serde_json::to_string(&view).expect("json");
    for value in ["203.0.113.7", "acme", long.as_str()] {
        let hash = digest_hex(&part_digest(value.as_bytes()));
        assert!(!text.contains(value) && !text.contains(&hash), "{value} in {text}");
    }
    assert!(!text.contains("value_hash"), "{text}");
    // Even a `detailed_metric` value; the config's own text still shows.
    let tenant = entry_json(&view, "descriptors[1]");
    assert_eq!(tenant[0]["value_hmac"].as_str().map(str::len), Some(32), "{tenant}");
    assert_eq!(entry_json(&view, "descriptors[3]"), serde_json::json!([{ "key": "plan", "value": "gold" }]));
    // One value, one set of digits in this process; another process's key gives others.
    let again = read(&hot, &snapshot, Values::Keyed(&key));
    assert_eq!(serde_json::to_string(&again).expect("json"), text);
    let elsewhere = serde_json::to_string(&read(&hot, &snapshot, Values::Keyed(&other))).expect("json");
    assert_ne!(elsewhere, text);
    assert!(!format!("{key:?}").contains(|c: char| c.is_ascii_digit()), "the key never prints");
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

#[test]
fn a_long_value_is_kept_cut_and_hashed_as_the_bucket_key_hashes_it() {
    let snapshot = snapshot();
    let hot = HotKeys::default().for_snapshot(&snapshot, 1);
    let long = format!("{}é{}", "x".repeat(63), "y".repeat(100));
    feed(&hot, &snapshot, 10, &[("user", &long)], 1);
    feed(&hot, &snapshot, 10, &[("tenant", &long)], 1);
    let view = read(&hot, &snapshot, Values::AsConfigured);
    let hash = digest_hex(&part_digest(long.as_bytes()));
    assert_eq!(entry_json(&view, "per-user"), serde_json::json!([{ "key": "user", "value_hash": hash }]));
    // The operator finds the same hash in the bucket key.
    let domain = snapshot.domain("api").expect("api");
    let rule = domain.rules.iter().find(|r| r.label() == "per-user").expect("rule");
    let key = crate::store::key::limit_key(
        "",
        domain,
        rule,
        &rule.limits()[0],
        [("user", long.as_str())].into_iter(),
    );
    assert!(key.ends_with(&format!("#{hash}")), "{key}");
    // Shown values are cut whole characters short of 64 bytes, and marked.
    assert_eq!(entry_json(&view, "descriptors[1]")[0]["value"], format!("{}…", "x".repeat(63)));
}

#[test]
fn overrides_count_under_their_own_rule_with_every_value_hashed() {
    let snapshot = snapshot();
    let hot = HotKeys::default().for_snapshot(&snapshot, 1);
    let domain = snapshot.domain("api").expect("api");
    let mut descriptor = RateLimitDescriptor::from_entries([("anything", "v")]);
    descriptor.limit = Some(crate::service::wire::RateLimitOverride { requests_per_unit: 5, unit: 2 });
    let descriptors = [descriptor];
    let (plans, charges, _) = plan::plan(domain, &descriptors, 1, "");
    hot.record("api", 10, hot_buckets(&plans, &charges, &descriptors));
    let view = read(&hot, &snapshot, Values::AsConfigured);
    assert_eq!(view.keys.len(), 1);
    assert_eq!(view.keys[0].rule, OVERRIDE_RULE);
    assert_eq!(entry_json(&view, OVERRIDE_RULE)[0]["value_hash"], digest_hex(&part_digest(b"v")));
}

#[test]
fn unmatched_descriptors_are_not_counted_and_a_reload_keeps_the_counts() {
    let snapshot = snapshot();
    let hot_keys = HotKeys::default();
    let hot = hot_keys.for_snapshot(&snapshot, 1);
    feed(&hot, &snapshot, 10, &[("nobody", "x")], 5);
    assert!(read(&hot, &snapshot, Values::AsConfigured).keys.is_empty());
    feed(&hot, &snapshot, 10, &[("user", "a")], 5);
    let reloaded = hot_keys.for_snapshot(&snapshot, 10);
    let view = read(&reloaded, &snapshot, Values::AsConfigured);
    assert_eq!(view.keys.len(), 1);
    assert_eq!(view.keys[0].share, 1.0);
    assert_eq!(reloaded.shares(10, 10), vec![("api".to_string(), vec![1.0])]);
}
