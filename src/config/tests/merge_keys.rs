//! YAML merge keys (`<<`) and the scalar rules around them: what merges, what wins, where
//! errors point, and that integers and booleans stay text while floats are refused.

use super::{errors, load, matched, only_domain};
use crate::algorithm::{Algorithm, Params};
use crate::config::{ConfigError, FailureMode, Lookup, RuleLimit, Snapshot, Unit};

fn limit_of(snapshot: &Snapshot, entries: &[(&str, &str)]) -> (u64, String) {
    let (params, unit) = params_of(snapshot, entries);
    (params.limit, unit.as_str().to_owned())
}

fn params_of(snapshot: &Snapshot, entries: &[(&str, &str)]) -> (Params, Unit) {
    match &matched(only_domain(snapshot), entries).limit {
        RuleLimit::Limited(limits) => (limits[0].params, limits[0].unit),
        RuleLimit::Unlimited => panic!("{entries:?} is unlimited"),
    }
}

fn one_error(yaml: &str) -> ConfigError {
    let found = errors(yaml);
    let [error] = found.errors() else { panic!("expected one error, got:\n{found}") };
    error.clone()
}

#[test]
fn integers_and_booleans_stay_text_with_and_without_merge_keys() {
    let snapshot = load(
        r#"domain: d
descriptors:
  - &port
    key: port
    value: 123
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: flag
    value: true
    rate_limit: {unit: second, requests_per_unit: 2}
  - <<: *port
    value: 0x1F
  - <<: *port
    value: 007
  - <<: *port
    value: True
  - <<: *port
    key: 8080
    value: false
"#,
    );
    let domain = only_domain(&snapshot);
    let values: Vec<(String, Option<String>)> =
        domain.rules.iter().map(|rule| (rule.levels[0].key.clone(), rule.levels[0].value.clone())).collect();
    let expected = [
        ("port", "123"),
        ("flag", "true"),
        ("port", "0x1F"),
        ("port", "007"),
        ("port", "True"),
        ("8080", "false"),
    ];
    let expected: Vec<(String, Option<String>)> =
        expected.iter().map(|(k, v)| (k.to_string(), Some(v.to_string()))).collect();
    assert_eq!(values, expected);
    assert_eq!(matched(domain, &[("port", "123")]).path, "descriptors[0]");
    assert_eq!(matched(domain, &[("port", "0x1F")]).path, "descriptors[2]");
    assert_eq!(matched(domain, &[("8080", "false")]).path, "descriptors[5]");
}

#[test]
fn written_keys_win_and_earlier_merges_win_over_later_ones() {
    let snapshot = load(
        r#"domain: d
descriptors:
  - key: a
    rate_limit: &slow {unit: hour, requests_per_unit: 1, name: slow}
  - key: b
    rate_limit: &fast {unit: second, requests_per_unit: 100}
  - key: c
    rate_limit:
      <<: [*fast, *slow]
      requests_per_unit: 7
  - key: d
    rate_limit:
      <<: [*slow, *fast]
"#,
    );
    assert_eq!(limit_of(&snapshot, &[("c", "x")]), (7, "second".into()));
    let c = matched(only_domain(&snapshot), &[("c", "x")]);
    // `name` only in the later `*slow`: still merged in.
    assert_eq!(c.name.as_deref(), Some("slow"));
    assert_eq!(limit_of(&snapshot, &[("d", "x")]), (1, "hour".into()));
}

#[test]
fn merging_is_shallow_nests_and_null_overrides() {
    let snapshot = load(
        r#"domain: d
descriptors:
  - &base
    key: a
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 5, algorithm: fixed_window}
  - &second
    <<: *base
    value: second
    shadow_mode: false
  - <<: *second
    value: third
    rate_limit: {unit: hour, requests_per_unit: 9}
  - <<: *base
    value: fourth
    rate_limit: ~
"#,
    );
    let domain = only_domain(&snapshot);
    let second = matched(domain, &[("a", "second")]);
    assert!(!second.shadow_mode);
    assert_eq!(params_of(&snapshot, &[("a", "second")]).0.algorithm, Algorithm::FixedWindow);
    let third = matched(domain, &[("a", "third")]);
    assert!(!third.shadow_mode, "merged from *second, which overrides *base");
    // The written rate_limit replaces the merged one whole: the default algorithm.
    let (params, unit) = params_of(&snapshot, &[("a", "third")]);
    assert_eq!((params.limit, unit, params.algorithm), (9, Unit::Hour, Algorithm::Gcra));
    // `rate_limit: ~` overrides the merged limit: an allow node.
    assert_eq!(domain.lookup([("a", "fourth")]), Lookup::Allow);
    assert_eq!(domain.rules.len(), 3);
}

#[test]
fn a_key_overriding_a_merged_one_is_not_a_duplicate_but_twice_written_is() {
    load("domain: d\ndescriptors:\n  - &a {key: k, value: v}\n  - <<: *a\n    value: w\n");
    let error = one_error(
        "domain: d\ndescriptors:\n  - &a {key: k, value: v}\n  - <<: *a\n    value: w\n    value: x\n",
    );
    assert!(error.message.contains("duplicate field `value`"), "{error}");
    assert_eq!(error.path, "descriptors[1].value");
}

#[test]
fn descriptor_lists_reused_through_aliases_and_merged_files_load() {
    let snapshot = load(
        r#"<<: {failure_mode: closed}
domain: d
descriptors:
  - key: tenant
    value: a
    descriptors: &per_user
      - key: user
        rate_limit: {unit: second, requests_per_unit: 3}
  - key: tenant
    value: b
    descriptors: *per_user
"#,
    );
    let domain = only_domain(&snapshot);
    assert_eq!(domain.failure_mode, FailureMode::Closed);
    assert_eq!(matched(domain, &[("tenant", "b"), ("user", "u")]).path, "descriptors[1].descriptors[0]");
}

#[test]
fn parse_errors_in_merged_content_point_at_the_anchor_text() {
    // A rate_limit mapping merged into a descriptor: its `unit` is unknown there.
    let error = one_error(
        "domain: d\ndescriptors:\n  - key: a\n    rate_limit: &rl\n      unit: second\n      requests_per_unit: 1\n  - <<: *rl\n    key: b\n",
    );
    assert_eq!((error.path.as_str(), error.line), ("descriptors[1].<<.unit", Some(5)), "{error}");
    assert!(error.message.starts_with("unknown field `unit`"), "{error}");

    let error = one_error("domain: d\ndescriptors:\n  - key: a\n    <<: just text\n");
    assert_eq!((error.path.as_str(), error.line), ("descriptors[0].<<", Some(4)), "{error}");
    assert!(error.message.contains("a mapping or a list of mappings to merge"), "{error}");
}

#[test]
fn validation_errors_of_merged_fields_point_at_the_merge_key() {
    let found = errors(
        r#"domain: d
descriptors:
  - key: a
    rate_limit: &rl
      unit: fortnight
      requests_per_unit: 1
  - key: b
    rate_limit:
      requests_per_unit: 2
      <<: *rl
"#,
    );
    let found: Vec<(&str, Option<usize>)> =
        found.errors().iter().map(|e| (e.path.as_str(), e.line)).collect();
    assert_eq!(
        found,
        [("descriptors[0].rate_limit.unit", Some(5)), ("descriptors[1].rate_limit.unit", Some(10))]
    );
}

#[test]
fn a_self_referencing_merge_is_an_error_not_a_crash() {
    let error = one_error("domain: d\ndescriptors:\n  - &a\n    key: k\n    <<: *a\n");
    assert_eq!(error.line, Some(3), "{error}");
    assert!(error.message.contains("recursion limit"), "{error}");
}

#[test]
fn floats_where_strings_belong_are_refused_with_a_hint() {
    let cases = [
        ("domain: d\ndescriptors:\n  - key: version\n    value: 1.5\n", "descriptors[0].value", 4),
        ("domain: d\ndescriptors:\n  - key: 1.5\n", "descriptors[0].key", 3),
        ("domain: 2.0\n", "domain", 1),
        ("domain: d\ndescriptors:\n  - {key: a, value: 1e3}\n", "descriptors[0].value", 3),
        ("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: .inf, requests_per_unit: 1}\n", "descriptors[0].rate_limit.unit", 4),
        ("domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      replaces:\n        - name: 0.5\n", "descriptors[0].rate_limit.replaces[0].name", 8),
        ("domain: d\ndescriptors:\n  - &a {key: k, value: v}\n  - <<: *a\n    value: 3.25\n", "descriptors[1].value", 5),
    ];
    for (yaml, path, line) in cases {
        let error = one_error(yaml);
        assert_eq!((error.path.as_str(), error.line), (path, Some(line)), "{yaml}");
        assert!(error.message.contains("floating-point number where a string belongs"), "{error}");
        assert!(error.message.contains("quote it"), "{error}");
    }
}

#[test]
fn floats_quoted_in_metadata_or_in_text_load() {
    let snapshot = load(
        r#"domain: d
descriptors:
  - key: version
    value: "1.5"
    rate_limit: {unit: second, requests_per_unit: 1}
    metadata: {ratio: 0.25, value: 1.5}
  - key: ip
    value: 10.0.0.1
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: release
    value: 1.2.3
    rate_limit: {unit: second, requests_per_unit: 1}
"#,
    );
    let domain = only_domain(&snapshot);
    assert_eq!(matched(domain, &[("version", "1.5")]).path, "descriptors[0]");
    assert_eq!(matched(domain, &[("ip", "10.0.0.1")]).path, "descriptors[1]");
    assert_eq!(matched(domain, &[("release", "1.2.3")]).path, "descriptors[2]");
}
