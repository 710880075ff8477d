//! `rate_limits` (several named limits on one descriptor) and `unit_multiplier` (a window
//! of several units): every accepted shape, and every misuse with its path and line.

use super::{errors, found, load, matched, one_error, only_domain};
use crate::algorithm::Algorithm;
use crate::config::{Limit, RuleLimit};

fn limits(yaml: &str, entries: &[(&str, &str)]) -> Vec<Limit> {
    let snapshot = load(yaml);
    matched(only_domain(&snapshot), entries).limits().to_vec()
}

const TWO: &str = r#"domain: d
descriptors:
  - key: api_key
    rate_limits:
      - { name: burst, unit: second, requests_per_unit: 20 }
      - name: daily
        unit: day
        requests_per_unit: 50000
        algorithm: fixed_window
"#;

#[test]
fn rate_limits_compile_in_file_order_with_their_names() {
    let snapshot = load(TWO);
    let rule = matched(only_domain(&snapshot), &[("api_key", "k")]);
    assert_eq!(rule.name, None, "the node has no name; its limits have");
    let limits = rule.limits();
    assert_eq!(limits.len(), 2);
    assert_eq!(limits[0].name.as_deref(), Some("burst"));
    assert_eq!((limits[0].params.limit, limits[0].params.algorithm), (20, Algorithm::Gcra));
    assert_eq!(limits[0].params.unit_us, 1_000_000);
    assert_eq!(limits[1].name.as_deref(), Some("daily"));
    assert_eq!((limits[1].params.limit, limits[1].params.algorithm), (50_000, Algorithm::FixedWindow));
    assert_eq!(limits[1].window_seconds(), 86_400);
    assert_eq!(rule.limit_label(&limits[0]), "descriptors[0]/burst");
}

#[test]
fn a_single_entry_list_and_a_gcra_burst_per_entry_load() {
    let yaml = "domain: d\ndescriptors:\n  - key: k\n    rate_limits:\n      - {name: only, unit: minute, requests_per_unit: 10, burst: 2}\n";
    let limits = limits(yaml, &[("k", "v")]);
    assert_eq!(limits.len(), 1);
    assert_eq!((limits[0].params.burst, limits[0].multiplier), (2, 1));
}

#[test]
fn unit_multiplier_makes_the_window_on_rate_limit_and_on_entries() {
    let yaml = r#"domain: d
descriptors:
  - key: single
    rate_limit: { unit: second, requests_per_unit: 2, unit_multiplier: 30 }
  - key: several
    rate_limits:
      - { name: five_min, unit: minute, requests_per_unit: 7, unit_multiplier: 5, algorithm: sliding_window }
      - { name: week, unit: day, requests_per_unit: 1000, unit_multiplier: 7, algorithm: fixed_window }
"#;
    let single = limits(yaml, &[("single", "x")]);
    assert_eq!((single[0].multiplier, single[0].params.unit_us), (30, 30_000_000));
    assert_eq!(single[0].window(), "30 seconds");
    assert_eq!(single[0].name, None);
    let several = limits(yaml, &[("several", "x")]);
    assert_eq!((several[0].multiplier, several[0].window_seconds()), (5, 300));
    assert_eq!(several[0].window(), "5 minutes");
    assert_eq!(several[1].params.unit_us, 7 * 86_400 * 1_000_000);
    assert_eq!(several[1].window(), "7 days");
    let one = limits("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1, unit_multiplier: 1}\n", &[("k", "v")]);
    assert_eq!((one[0].multiplier, one[0].window()), (1, "hour".to_owned()));
}

#[test]
fn the_longest_window_is_71_years() {
    let yaml = |n: u64| {
        format!("domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: year\n      requests_per_unit: 1\n      unit_multiplier: {n}\n")
    };
    assert_eq!(limits(&yaml(71), &[("k", "v")])[0].multiplier, 71);
    for n in [72, u64::MAX] {
        let (path, line) = one_error(&yaml(n), "longer than 71 years");
        assert_eq!((path.as_str(), line), ("descriptors[0].rate_limit.unit_multiplier", Some(7)), "{n}");
    }
}

#[test]
fn the_burst_drain_check_counts_the_whole_window() {
    // burst 2 at 1 per 36 years drains in 72 years: past GCRA's exact range.
    let yaml = "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: year\n      unit_multiplier: 36\n      requests_per_unit: 1\n      burst: 2\n";
    let (path, line) = one_error(yaml, "burst 2 at 1 per 36 years takes more than 71 years to drain");
    assert_eq!((path.as_str(), line), ("descriptors[0].rate_limit.burst", Some(8)));
    let fits = yaml.replace("unit_multiplier: 36", "unit_multiplier: 35");
    assert_eq!(limits(&fits, &[("k", "v")])[0].params.burst, 2);
}

#[test]
fn replaces_of_entries_merge_into_the_rule_and_may_name_entries_elsewhere() {
    let yaml = r#"domain: d
descriptors:
  - key: api_key
    rate_limits:
      - { name: burst, unit: second, requests_per_unit: 20, replaces: [{name: per_ip}] }
      - { name: daily, unit: day, requests_per_unit: 500, replaces: [{name: per_ip}, {name: other}] }
  - key: remote_address
    rate_limit: { name: per_ip, unit: second, requests_per_unit: 5, replaces: [{name: daily}] }
"#;
    let snapshot = load(yaml);
    let domain = only_domain(&snapshot);
    assert_eq!(matched(domain, &[("api_key", "k")]).replaces, ["per_ip", "other"]);
    assert_eq!(matched(domain, &[("remote_address", "a")]).replaces, ["daily"], "a limit's name");
}

#[test]
fn merge_keys_work_inside_and_for_rate_limits() {
    let yaml = r#"domain: d
descriptors:
  - key: a
    rate_limits: &pair
      - &base { name: short, unit: second, requests_per_unit: 5 }
      - { <<: *base, name: long, unit: hour }
  - key: b
    rate_limits: *pair
"#;
    for key in ["a", "b"] {
        let limits = limits(yaml, &[(key, "v")]);
        let names: Vec<_> =
            limits.iter().map(|l| (l.name.as_deref(), l.params.limit, l.unit.as_str())).collect();
        assert_eq!(names, [(Some("short"), 5, "second"), (Some("long"), 5, "hour")], "{key}");
    }
}

#[test]
fn rate_limit_and_rate_limits_together_is_an_error() {
    let yaml = "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n    rate_limits:\n      - {name: a, unit: second, requests_per_unit: 1}\n";
    let (path, line) = one_error(yaml, "rate_limit and rate_limits on one descriptor");
    assert_eq!((path.as_str(), line), ("descriptors[0].rate_limits", Some(5)));
}

#[test]
fn an_empty_list_is_an_error() {
    let yaml = "domain: d\ndescriptors:\n  - key: k\n    rate_limits: []\n";
    let (path, line) = one_error(yaml, "empty rate_limits list");
    assert_eq!((path.as_str(), line), ("descriptors[0].rate_limits", Some(4)));
}

#[test]
fn names_are_required_non_empty_and_unique() {
    let yaml = r#"domain: d
descriptors:
  - key: k
    rate_limits:
      - unit: second
        requests_per_unit: 1
      - name: ""
        unit: minute
        requests_per_unit: 1
      - name: a
        unit: hour
        requests_per_unit: 1
      - name: a
        unit: day
        requests_per_unit: 1
"#;
    let all = found(&errors(yaml));
    let at: Vec<_> = all.iter().map(|(path, line, _)| (path.as_str(), *line)).collect();
    assert_eq!(
        at,
        [
            ("descriptors[0].rate_limits[0].name", Some(5)),
            ("descriptors[0].rate_limits[1].name", Some(7)),
            ("descriptors[0].rate_limits[3].name", Some(13)),
        ]
    );
    assert!(all[0].2.starts_with("missing name"), "{all:?}");
    assert!(all[1].2.starts_with("empty name"), "{all:?}");
    assert!(all[2].2.contains("duplicate name \"a\": rate_limits[2] has it already"), "{all:?}");
}

#[test]
fn at_most_16_limits() {
    let entry = |i: usize| format!("      - {{name: l{i}, unit: second, requests_per_unit: 1}}\n");
    let yaml = |n: usize| {
        format!(
            "domain: d\ndescriptors:\n  - key: k\n    rate_limits:\n{}",
            (0..n).map(entry).collect::<String>()
        )
    };
    assert_eq!(limits(&yaml(16), &[("k", "v")]).len(), 16);
    let (path, line) = one_error(&yaml(17), "17 limits in rate_limits: at most 16 per descriptor");
    assert_eq!((path.as_str(), line), ("descriptors[0].rate_limits", Some(4)));
    assert!(errors(&yaml(17)).to_string().contains("64-bit mask"));
}

#[test]
fn unlimited_is_refused_inside_rate_limits() {
    let yaml =
        "domain: d\ndescriptors:\n  - key: k\n    rate_limits:\n      - name: a\n        unlimited: true\n";
    let (path, line) = one_error(yaml, "unlimited is not allowed in rate_limits");
    assert_eq!((path.as_str(), line), ("descriptors[0].rate_limits[0].unlimited", Some(6)));
}

#[test]
fn unit_multiplier_zero_is_an_error_on_both_shapes() {
    let single = "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      unit_multiplier: 0\n";
    let (path, line) = one_error(single, "unit_multiplier must be at least 1");
    assert_eq!((path.as_str(), line), ("descriptors[0].rate_limit.unit_multiplier", Some(7)));
    let entry = "domain: d\ndescriptors:\n  - key: k\n    rate_limits:\n      - name: a\n        unit: second\n        requests_per_unit: 1\n        unit_multiplier: 0\n";
    let (path, line) = one_error(entry, "unit_multiplier must be at least 1");
    assert_eq!((path.as_str(), line), ("descriptors[0].rate_limits[0].unit_multiplier", Some(8)));
}

#[test]
fn unit_multiplier_is_a_whole_positive_number_and_not_for_unlimited() {
    let negative = "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, unit_multiplier: -2}\n";
    let (path, line) = one_error(negative, "integer `-2`, expected u64");
    assert_eq!((path.as_str(), line), ("descriptors[0].rate_limit.unit_multiplier", Some(4)));
    let unlimited = "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unlimited: true\n      unit_multiplier: 3\n";
    let (path, line) = one_error(unlimited, "unit_multiplier must not be set together with unlimited");
    assert_eq!((path.as_str(), line), ("descriptors[0].rate_limit.unit_multiplier", Some(6)));
}

#[test]
fn an_entry_may_not_replace_a_limit_of_its_own_node() {
    let yaml = "domain: d\ndescriptors:\n  - key: k\n    rate_limits:\n      - name: a\n        unit: second\n        requests_per_unit: 1\n      - name: b\n        unit: minute\n        requests_per_unit: 1\n        replaces:\n          - name: a\n";
    let (path, line) = one_error(yaml, "\"a\" is a limit of this descriptor's own rate_limits");
    assert_eq!((path.as_str(), line), ("descriptors[0].rate_limits[1].replaces[0].name", Some(12)));
}

#[test]
fn entries_are_validated_like_rate_limit_and_every_problem_is_reported() {
    let yaml = r#"domain: d
descriptors:
  - key: k
    rate_limits:
      - name: a
        unit: fortnight
        requests_per_unit: 1
      - name: b
        unit: second
        algorithm: fixed_window
        burst: 3
"#;
    let all = found(&errors(yaml));
    let at: Vec<_> = all.iter().map(|(path, line, _)| (path.as_str(), *line)).collect();
    assert_eq!(
        at,
        [
            ("descriptors[0].rate_limits[0].unit", Some(6)),
            ("descriptors[0].rate_limits[1].burst", Some(11)),
            ("descriptors[0].rate_limits[1].requests_per_unit", Some(8)),
        ]
    );
    let unknown = "domain: d\ndescriptors:\n  - key: k\n    rate_limits:\n      - name: a\n        unit: second\n        requests_per_unit: 1\n        unlimted: true\n";
    let (path, line) = one_error(unknown, "unknown field `unlimted`");
    assert_eq!((path.as_str(), line), ("descriptors[0].rate_limits[0].unlimted", Some(8)));
}

#[test]
fn an_unlimited_rate_limit_stays_as_it_was() {
    let snapshot = load("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true}\n");
    assert_eq!(matched(only_domain(&snapshot), &[("k", "v")]).limit, RuleLimit::Unlimited);
}
