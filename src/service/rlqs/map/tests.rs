use std::path::PathBuf;

use super::*;
use crate::config::compile_sources;
use crate::service::rlqs::wire::{Bounds, BucketId, Entry};

const POLICY: &str = r#"
domain: api
descriptors:
  - key: name
    value: user
    descriptors:
      - key: user
        value: vip
        rate_limit: {unit: minute, requests_per_unit: 1000}
      - key: user
        rate_limit: {unit: minute, requests_per_unit: 120}
  - key: user
    value: "bot-*"
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: user
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: tenant
    descriptors:
      - key: plan
        value: free
        rate_limit: {unit: hour, requests_per_unit: 100}
  - key: plan
    value: gold
    descriptors:
      - key: tenant
        rate_limit: {unit: hour, requests_per_unit: 5000}
  - key: health
    value: check
"#;

fn snapshot() -> Snapshot {
    compile_sources(&[(PathBuf::from("api.yaml"), POLICY.to_owned())]).expect("compiles")
}

fn key(pairs: &[(&str, &str)]) -> BucketKey {
    let id = BucketId { bucket: pairs.iter().map(|(k, v)| Entry::new(k, v)).collect() };
    BucketKey::new(Some(&id), &Bounds::default()).expect("valid")
}

/// The config path of the rule the mapping reached, if it reached one.
fn rule_of<'c>(mapping: &Mapping<'c, '_>) -> Option<&'c str> {
    match mapping {
        Mapping::Descriptor { lookup: Lookup::Rule(rule), .. } => Some(rule.path.as_str()),
        _ => None,
    }
}

#[test]
fn envoys_name_and_user_id_is_the_nested_policy() {
    let snapshot = snapshot();
    let alice = key(&[("user", "alice"), ("name", "user")]);
    let mapping = map(&snapshot, "api", &alice);
    match &mapping {
        Mapping::Descriptor { entries, .. } => assert_eq!(entries, &[("name", "user"), ("user", "alice")]),
        other => panic!("no descriptor: {other:?}"),
    }
    // The default node under `name: user`, exactly as the RLS matcher finds it.
    assert_eq!(rule_of(&mapping), Some("descriptors[0].descriptors[1]"));
    let domain = snapshot.domain("api").expect("domain");
    assert_eq!(
        mapping,
        Mapping::Descriptor {
            entries: vec![("name", "user"), ("user", "alice")],
            lookup: domain.lookup([("name", "user"), ("user", "alice")]),
        }
    );
    // The exact value wins over the default, as in RLS.
    let vip = key(&[("name", "user"), ("user", "vip")]);
    assert_eq!(rule_of(&map(&snapshot, "api", &vip)), Some("descriptors[0].descriptors[0]"));
}

#[test]
fn a_single_entry_is_that_descriptor_with_wildcards_and_defaults() {
    let snapshot = snapshot();
    assert_eq!(rule_of(&map(&snapshot, "api", &key(&[("user", "bot-7")]))), Some("descriptors[1]"));
    assert_eq!(rule_of(&map(&snapshot, "api", &key(&[("user", "carol")]))), Some("descriptors[2]"));
    // An explicit allow node: matched, no rule.
    let health_key = key(&[("health", "check")]);
    let health = map(&snapshot, "api", &health_key);
    assert!(matches!(health, Mapping::Descriptor { lookup: Lookup::Allow, .. }));
    // A single key the policy does not have: a descriptor that matches nothing.
    let other_key = key(&[("region", "eu")]);
    let other = map(&snapshot, "api", &other_key);
    assert!(matches!(other, Mapping::Descriptor { lookup: Lookup::NoMatch, .. }));
}

#[test]
fn the_first_path_in_file_order_with_the_keys_decides_the_order() {
    let snapshot = snapshot();
    // `tenant → plan` comes before `plan → tenant` in the file: its order is used, and
    // its value `free` does not match `gold` — no backtracking to the later path.
    let gold_key = key(&[("plan", "gold"), ("tenant", "acme")]);
    let gold = map(&snapshot, "api", &gold_key);
    match &gold {
        Mapping::Descriptor { entries, lookup } => {
            assert_eq!(entries, &[("tenant", "acme"), ("plan", "gold")]);
            assert_eq!(*lookup, Lookup::NoMatch);
        }
        other => panic!("no descriptor: {other:?}"),
    }
    let free_key = key(&[("plan", "free"), ("tenant", "acme")]);
    let free = map(&snapshot, "api", &free_key);
    assert_eq!(rule_of(&free), Some("descriptors[3].descriptors[0]"));
}

#[test]
fn keys_of_no_path_and_unknown_domains_have_no_policy() {
    let snapshot = snapshot();
    assert_eq!(map(&snapshot, "api", &key(&[("name", "user"), ("region", "eu")])), Mapping::NoPath);
    assert_eq!(map(&snapshot, "api", &key(&[("name", "user"), ("user", "a"), ("x", "y")])), Mapping::NoPath);
    assert_eq!(map(&snapshot, "web", &key(&[("user", "alice")])), Mapping::UnknownDomain);
}
