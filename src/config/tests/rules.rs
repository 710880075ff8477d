//! What a compiled rule carries: limits, units, algorithms, flags, levels, metadata.

use std::path::PathBuf;

use serde_json::json;

use super::{load, matched, only_domain};
use crate::algorithm::{Algorithm, Params};
use crate::config::{compile_sources, FailureMode, Level, RuleId, RuleLimit, Unit};

fn limited(limit: &RuleLimit) -> (Params, Unit) {
    match limit {
        RuleLimit::Limited(limits) => (limits[0].params, limits[0].unit),
        RuleLimit::Unlimited => panic!("expected a limited rule"),
    }
}

#[test]
fn share_threshold_sets_the_shared_pattern_of_its_level() {
    let snapshot = load(
        r#"
domain: d
descriptors:
  - key: route
    value: "api/*"
    share_threshold: true
    descriptors:
      - key: method
        rate_limit: {unit: minute, requests_per_unit: 60}
  - key: files
    value: "files/*"
    rate_limit: {unit: hour, requests_per_unit: 10}
"#,
    );
    let domain = only_domain(&snapshot);
    let shared = matched(domain, &[("route", "api/v1"), ("method", "GET")]);
    assert_eq!(
        shared.levels,
        [
            Level {
                key: "route".into(),
                shared_pattern: Some("api/*".into()),
                value: Some("api/*".into()),
                value_to_metric: false,
            },
            Level { key: "method".into(), ..Level::default() },
        ]
    );
    let isolated = matched(domain, &[("files", "files/a.pdf")]);
    assert_eq!(isolated.levels[0].shared_pattern, None);
}

#[test]
fn units_in_any_case_with_month_30_days_and_year_365() {
    let snapshot = load(
        r#"
domain: d
descriptors:
  - {key: a, rate_limit: {unit: SECOND, requests_per_unit: 1}}
  - {key: b, rate_limit: {unit: Minute, requests_per_unit: 1}}
  - {key: c, rate_limit: {unit: hour, requests_per_unit: 1}}
  - {key: d, rate_limit: {unit: Day, requests_per_unit: 1}}
  - {key: e, rate_limit: {unit: WEEK, requests_per_unit: 1}}
  - {key: f, rate_limit: {unit: month, requests_per_unit: 1}}
  - {key: g, rate_limit: {unit: Year, requests_per_unit: 1}}
"#,
    );
    let domain = only_domain(&snapshot);
    let seconds: Vec<(Unit, u64)> = domain
        .rules
        .iter()
        .map(|rule| {
            let (params, unit) = limited(&rule.limit);
            (unit, params.unit_us / 1_000_000)
        })
        .collect();
    assert_eq!(
        seconds,
        [
            (Unit::Second, 1),
            (Unit::Minute, 60),
            (Unit::Hour, 3_600),
            (Unit::Day, 86_400),
            (Unit::Week, 604_800),
            (Unit::Month, 30 * 86_400),
            (Unit::Year, 365 * 86_400),
        ]
    );
}

#[test]
fn zero_requests_per_unit_loads_and_blocks() {
    let snapshot = load(
        "domain: d\ndescriptors:\n  - key: ip\n    value: 50.0.0.5\n    rate_limit: {unit: second, requests_per_unit: 0}\n",
    );
    let rule = matched(only_domain(&snapshot), &[("ip", "50.0.0.5")]);
    assert_eq!(limited(&rule.limit).0.limit, 0);
}

#[test]
fn algorithm_and_burst_become_params() {
    let snapshot = load(
        r#"
domain: d
descriptors:
  - {key: a, rate_limit: {unit: minute, requests_per_unit: 600}}
  - {key: b, rate_limit: {unit: minute, requests_per_unit: 600, algorithm: gcra, burst: 50}}
  - {key: c, rate_limit: {unit: minute, requests_per_unit: 600, algorithm: sliding_window}}
  - {key: d, rate_limit: {unit: minute, requests_per_unit: 600, algorithm: fixed_window}}
"#,
    );
    let params: Vec<Params> = only_domain(&snapshot).rules.iter().map(|r| limited(&r.limit).0).collect();
    let expect = |algorithm, burst| Params {
        algorithm,
        limit: 600,
        unit_us: 60_000_000,
        burst,
        penalty_us: 0,
        period: None,
    };
    assert_eq!(
        params,
        [
            expect(Algorithm::Gcra, 600),
            expect(Algorithm::Gcra, 50),
            expect(Algorithm::SlidingWindow, 600),
            expect(Algorithm::FixedWindow, 600),
        ]
    );
}

#[test]
fn flags_replaces_and_metadata_load_into_the_rule() {
    let snapshot = load(
        r#"
domain: d
descriptors:
  - key: user
    shadow_mode: true
    quota_mode: true
    detailed_metric: true
    value_to_metric: true
    metadata:
      team: payments
      tier: 2
      enabled: true
      nested: {a: 1}
      "0": zero
    rate_limit:
      name: per_user
      replaces:
        - name: global
        - name: other
      unit: second
      requests_per_unit: 5
  - key: plain
    rate_limit: {unlimited: true}
"#,
    );
    let domain = only_domain(&snapshot);
    let rule = matched(domain, &[("user", "u1")]);
    assert!(rule.shadow_mode && rule.quota_mode && rule.detailed_metric && rule.value_to_metric);
    assert_eq!(rule.name.as_deref(), Some("per_user"));
    assert_eq!(rule.label(), "per_user");
    assert_eq!(rule.replaces, ["global", "other"]);
    // Typed as in YAML (what `google.protobuf.Struct` holds), keys as text, sorted.
    let metadata: Vec<(&str, serde_json::Value)> =
        rule.metadata.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
    assert_eq!(
        metadata,
        [
            ("0", json!("zero")),
            ("enabled", json!(true)),
            ("nested", json!({"a": 1})),
            ("team", json!("payments")),
            ("tier", json!(2)),
        ]
    );
    let plain = matched(domain, &[("plain", "x")]);
    assert_eq!(plain.limit, RuleLimit::Unlimited);
    assert!(!plain.shadow_mode && !plain.quota_mode && !plain.detailed_metric);
    assert!(plain.replaces.is_empty() && plain.metadata.is_empty() && plain.name.is_none());
    assert_eq!(plain.label(), "descriptors[1]");
}

#[test]
fn metadata_keeps_lists_floats_and_nested_maps() {
    let snapshot = load(
        r#"
domain: d
descriptors:
  - key: k
    metadata:
      list: [1, "two", 3.5, null]
      deep: { 1: { x: [a] }, true: b }
      nan: .nan
      big: 18446744073709551615
    rate_limit: { unit: second, requests_per_unit: 1 }
"#,
    );
    let rule = matched(only_domain(&snapshot), &[("k", "v")]);
    let got: serde_json::Map<String, serde_json::Value> = rule.metadata.iter().cloned().collect();
    assert_eq!(
        serde_json::Value::Object(got),
        json!({
            "list": [1, "two", 3.5, null],
            "deep": { "1": { "x": ["a"] }, "true": "b" },
            "nan": ".nan",
            "big": 18446744073709551615u64,
        }),
        "a float JSON cannot hold keeps its YAML text; keys that are not strings become text"
    );
}

#[test]
fn rules_are_numbered_in_file_order() {
    let snapshot = load(
        r#"
domain: d
descriptors:
  - key: a
    rate_limit: {unit: second, requests_per_unit: 1}
    descriptors:
      - key: b
        rate_limit: {unit: second, requests_per_unit: 2}
      - key: c
  - key: e
    rate_limit: {unit: second, requests_per_unit: 3}
"#,
    );
    let domain = only_domain(&snapshot);
    let paths: Vec<(RuleId, &str)> = domain.rules.iter().map(|r| (r.id, r.path.as_str())).collect();
    assert_eq!(
        paths,
        [
            (RuleId(0), "descriptors[0]"),
            (RuleId(1), "descriptors[0].descriptors[0]"),
            (RuleId(2), "descriptors[1]"),
        ]
    );
    assert_eq!(snapshot.rule_count(), 3);
}

#[test]
fn domain_settings_and_snapshot_identity() {
    let a = (PathBuf::from("x/a.yaml"), "domain: a\nfailure_mode: closed\n".to_owned());
    let b = (PathBuf::from("x/b.yaml"), "domain: b\ndescriptors:\n".to_owned());
    let snapshot = compile_sources(&[a.clone(), b.clone()]).expect("loads");
    let domain_a = snapshot.domain("a").expect("domain a");
    assert_eq!(domain_a.failure_mode, FailureMode::Closed);
    assert_eq!(domain_a.file, PathBuf::from("x/a.yaml"));
    assert_eq!(snapshot.domain("b").map(|d| d.failure_mode), Some(FailureMode::Open));
    assert_eq!(snapshot.files, [PathBuf::from("x/a.yaml"), PathBuf::from("x/b.yaml")]);

    let version = &snapshot.version;
    assert_eq!(version.len(), 16);
    assert!(version.chars().all(|c| c.is_ascii_hexdigit()));
    // Same names and contents elsewhere: same version. Any change: another one.
    let moved = [(PathBuf::from("y/a.yaml"), a.1.clone()), (PathBuf::from("y/b.yaml"), b.1.clone())];
    assert_eq!(&compile_sources(&moved).expect("loads").version, version);
    let edited = [a.clone(), (b.0.clone(), format!("{}# comment\n", b.1))];
    assert_ne!(&compile_sources(&edited).expect("loads").version, version);
    let renamed = [a, (PathBuf::from("x/c.yaml"), b.1)];
    assert_ne!(&compile_sources(&renamed).expect("loads").version, version);
}
