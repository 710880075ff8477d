//! Matching semantics (docs/architecture.md#matching): precedence, wildcards, no backtracking, depth.

use std::fmt::Write as _;

use super::{load, lookup, matched, only_domain, rule_path};
use crate::config::Lookup;

const PRECEDENCE: &str = r#"
domain: d
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: k
    value: "a*"
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: k
    value: ab
    rate_limit: {unit: second, requests_per_unit: 3}
  - key: k
    value: "ab*"
    rate_limit: {unit: second, requests_per_unit: 4}
"#;

#[test]
fn exact_then_wildcard_then_default() {
    let snapshot = load(PRECEDENCE);
    let domain = only_domain(&snapshot);
    assert_eq!(rule_path(domain, &[("k", "ab")]), "descriptors[2]");
    assert_eq!(rule_path(domain, &[("k", "axyz")]), "descriptors[1]");
    assert_eq!(rule_path(domain, &[("k", "zzz")]), "descriptors[0]");
    assert_eq!(lookup(domain, &[("other", "ab")]), Lookup::NoMatch);
}

#[test]
fn first_matching_wildcard_in_file_order_wins() {
    let snapshot = load(PRECEDENCE);
    let domain = only_domain(&snapshot);
    // Both `a*` (descriptors[1]) and `ab*` (descriptors[3]) match: file order decides,
    // not specificity.
    assert_eq!(rule_path(domain, &[("k", "abc")]), "descriptors[1]");
}

#[test]
fn star_at_start_middle_and_several() {
    let snapshot = load(
        r#"
domain: d
descriptors:
  - key: path
    value: "/api/*/resource/*/action"
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: path
    value: "/api/*/action"
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: path
    value: "*.pdf"
    rate_limit: {unit: minute, requests_per_unit: 3}
"#,
    );
    let domain = only_domain(&snapshot);
    let path = |value| rule_path(domain, &[("path", value)]);
    assert_eq!(path("/api/v1/resource/7/action"), "descriptors[0]");
    assert_eq!(path("/api/123/action"), "descriptors[1]");
    assert_eq!(path("/api//action"), "descriptors[1]");
    assert_eq!(path("docs/x.pdf"), "descriptors[2]");
    assert_eq!(lookup(domain, &[("path", "/api/123/other")]), Lookup::NoMatch);
    assert_eq!(lookup(domain, &[("path", "x.pdf.gz")]), Lookup::NoMatch);
}

#[test]
fn no_backtracking_after_an_exact_match() {
    let snapshot = load(
        r#"
domain: d
descriptors:
  - key: a
    value: x
    descriptors:
      - key: b
        value: only
        rate_limit: {unit: second, requests_per_unit: 1}
  - key: a
    value: "x*"
    descriptors:
      - key: b
        rate_limit: {unit: second, requests_per_unit: 2}
  - key: a
    descriptors:
      - key: b
        rate_limit: {unit: second, requests_per_unit: 3}
"#,
    );
    let domain = only_domain(&snapshot);
    // `a=x` commits to the exact node; its subtree has no `b=other`, and the wildcard or
    // default siblings (which would match) are not tried.
    assert_eq!(lookup(domain, &[("a", "x"), ("b", "other")]), Lookup::NoMatch);
    assert_eq!(rule_path(domain, &[("a", "x"), ("b", "only")]), "descriptors[0].descriptors[0]");
    assert_eq!(rule_path(domain, &[("a", "xy"), ("b", "z")]), "descriptors[1].descriptors[0]");
    assert_eq!(rule_path(domain, &[("a", "q"), ("b", "z")]), "descriptors[2].descriptors[0]");
}

#[test]
fn limit_applies_only_to_the_last_entrys_node() {
    let snapshot = load(
        r#"
domain: d
descriptors:
  - key: key
    value: value
    rate_limit: {unit: second, requests_per_unit: 300}
  - key: outer
    descriptors:
      - key: inner
        rate_limit: {unit: second, requests_per_unit: 1}
"#,
    );
    let domain = only_domain(&snapshot);
    assert_eq!(rule_path(domain, &[("key", "value")]), "descriptors[0]");
    // Deeper than the tree: the limit of a node passed on the way does not apply.
    assert_eq!(lookup(domain, &[("key", "value"), ("sub", "v")]), Lookup::NoMatch);
    // Shallower than the tree: a node with children but no limit matches nothing.
    assert_eq!(lookup(domain, &[("outer", "o")]), Lookup::NoMatch);
    assert_eq!(rule_path(domain, &[("outer", "o"), ("inner", "i")]), "descriptors[1].descriptors[0]");
    assert_eq!(lookup(domain, &[("outer", "o"), ("inner", "i"), ("x", "y")]), Lookup::NoMatch);
    assert_eq!(lookup(domain, &[]), Lookup::NoMatch);
}

#[test]
fn node_without_limit_or_children_is_an_explicit_allow() {
    let snapshot = load(
        r#"
domain: d
descriptors:
  - key: remote_address
    value: 10.0.0.1
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 10}
"#,
    );
    let domain = only_domain(&snapshot);
    assert_eq!(lookup(domain, &[("remote_address", "10.0.0.1")]), Lookup::Allow);
    assert_eq!(rule_path(domain, &[("remote_address", "10.0.0.2")]), "descriptors[1]");
}

#[test]
fn nested_rules_at_several_depths() {
    let snapshot = load(
        r#"
domain: messaging
descriptors:
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit: {unit: day, requests_per_unit: 5}
  - key: to_number
    rate_limit: {unit: day, requests_per_unit: 100}
"#,
    );
    let domain = only_domain(&snapshot);
    let marketing = matched(domain, &[("message_type", "marketing"), ("to_number", "2061111111")]);
    assert_eq!(marketing.path, "descriptors[0].descriptors[0]");
    let keys: Vec<&str> = marketing.levels.iter().map(|l| l.key.as_str()).collect();
    assert_eq!(keys, ["message_type", "to_number"]);
    assert_eq!(rule_path(domain, &[("to_number", "2061111111")]), "descriptors[1]");
    assert_eq!(lookup(domain, &[("message_type", "transactional"), ("to_number", "1")]), Lookup::NoMatch);
}

#[test]
fn key_with_underscore_differs_from_key_and_value() {
    let snapshot = load(
        r#"
domain: d
descriptors:
  - key: a_b
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: a
    value: b
    rate_limit: {unit: second, requests_per_unit: 2}
"#,
    );
    let domain = only_domain(&snapshot);
    assert_eq!(rule_path(domain, &[("a_b", "anything")]), "descriptors[0]");
    assert_eq!(rule_path(domain, &[("a", "b")]), "descriptors[1]");
    assert_eq!(lookup(domain, &[("a", "b_c")]), Lookup::NoMatch);
}

#[test]
fn empty_value_is_the_default_node() {
    let snapshot = load(
        r#"
domain: d
descriptors:
  - key: k
    value: ""
    rate_limit: {unit: second, requests_per_unit: 1}
"#,
    );
    let domain = only_domain(&snapshot);
    assert_eq!(rule_path(domain, &[("k", "anything")]), "descriptors[0]");
}

#[test]
fn ten_thousand_rules_lookup() {
    let mut yaml = String::from("domain: big\ndescriptors:\n");
    for i in 0..10_000 {
        let _ = write!(
            yaml,
            "  - key: user\n    value: u{i}\n    rate_limit: {{unit: minute, requests_per_unit: {i}}}\n"
        );
    }
    yaml.push_str("  - key: user\n    value: \"w*\"\n    rate_limit: {unit: hour, requests_per_unit: 1}\n");
    let snapshot = load(&yaml);
    let domain = only_domain(&snapshot);
    assert_eq!(domain.rules.len(), 10_001);
    assert_eq!(rule_path(domain, &[("user", "u9876")]), "descriptors[9876]");
    assert_eq!(rule_path(domain, &[("user", "wat")]), "descriptors[10000]");
    assert_eq!(lookup(domain, &[("user", "x")]), Lookup::NoMatch);
}
