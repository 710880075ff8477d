//! `between`: each change of a key part found once and worded; number changes, reordering
//! and `consistency` found as no change; agreement with `store::key` on every pair.

use std::path::PathBuf;

use super::*;
use crate::config::compile_sources;

fn snapshot(yaml: &str) -> Snapshot {
    compile_sources(&[(PathBuf::from("api.yaml"), yaml.to_owned())]).expect("compiles")
}

fn fresh(old: &str, new: &str) -> Vec<Fresh> {
    between(&snapshot(old), &snapshot(new))
}

const BASE: &str = "domain: api
descriptors:
  - key: user
    rate_limit: { name: per-user, unit: hour, requests_per_unit: 100 }
  - key: path
    value: /api/*
    share_threshold: true
    rate_limit: { unit: second, requests_per_unit: 10, algorithm: sliding_window }
  - key: tenant
    rate_limits:
      - { name: burst, unit: second, requests_per_unit: 5 }
      - { name: daily, unit: day, requests_per_unit: 1000, algorithm: fixed_window }
";

#[test]
fn numbers_consistency_and_order_start_nothing_afresh() {
    assert_eq!(fresh(BASE, BASE), vec![]);
    let numbers = BASE.replace("requests_per_unit: 100 }", "requests_per_unit: 7, burst: 3 }");
    assert_eq!(fresh(BASE, &numbers), vec![]);
    let modes = BASE.replace("domain: api\n", "domain: api\ncharge: all_or_nothing\nfailure_mode: closed\n");
    assert_eq!(fresh(BASE, &modes), vec![]);
    let windows = "domain: api\ndescriptors:\n  - key: user\n    rate_limit: { unit: minute, requests_per_unit: 9, algorithm: sliding_window }\n";
    let approximate = windows.replace("domain: api\n", "domain: api\nconsistency: approximate\n");
    assert_eq!(fresh(windows, &approximate), vec![], "exact and approximate share keys and format");
    // The same rules in another order: paired by descriptor path, not by position.
    let (head, tail) = BASE.split_at(BASE.find("  - key: path").expect("path rule"));
    let reordered =
        format!("domain: api\ndescriptors:\n{tail}{}", &head["domain: api\ndescriptors:\n".len()..]);
    assert_ne!(reordered, BASE);
    assert_eq!(fresh(BASE, &reordered), vec![]);
}

#[test]
fn hash_tag_starts_the_whole_domain_afresh() {
    let tagged = BASE.replace("domain: api\n", "domain: api\nhash_tag: domain\n");
    let found = fresh(BASE, &tagged);
    assert_eq!(
        found,
        vec![Fresh {
            domain: "api".into(),
            rule: None,
            rules: 3,
            changes: vec!["hash_tag descriptor → domain".into()],
        }]
    );
    assert!(found[0].to_string().contains("every bucket of the domain (3 rules"), "{}", found[0]);
    assert_eq!(fresh(&tagged, BASE)[0].changes, vec!["hash_tag domain → descriptor".to_string()]);
}

fn one(old: &str, new: &str) -> (Option<String>, Vec<String>) {
    let found = fresh(old, new);
    assert_eq!(found.len(), 1, "{found:?}");
    (found[0].rule.clone(), found[0].changes.clone())
}

#[test]
fn algorithm_unit_and_window_start_the_rule_afresh() {
    let algo = BASE.replace("requests_per_unit: 100 }", "requests_per_unit: 100, algorithm: fixed_window }");
    assert_eq!(one(BASE, &algo), (Some("per-user".into()), vec!["algorithm gcra → fixed_window".into()]));
    let unit = BASE.replace("unit: hour", "unit: minute");
    assert_eq!(one(BASE, &unit).1, vec!["unit hour → minute".to_string()]);
    let window = BASE.replace("unit: hour,", "unit: hour, unit_multiplier: 2,");
    assert_eq!(one(BASE, &window).1, vec!["unit_multiplier 1 → 2".to_string()]);
    let daily = BASE.replace("unit: day,", "unit: day, unit_multiplier: 7,");
    assert_eq!(
        one(BASE, &daily),
        (Some("descriptors[2]".into()), vec!["limit daily: unit_multiplier 1 → 7".into()])
    );
}

#[test]
fn a_calendar_and_its_zone_start_the_limit_afresh() {
    let calendar = BASE.replace("algorithm: fixed_window }", "algorithm: fixed_window, calendar: {} }");
    assert_eq!(one(BASE, &calendar).1, vec!["limit daily: calendar time_zone none → UTC".to_string()]);
    let paris = calendar.replace("calendar: {}", "calendar: { time_zone: Europe/Paris }");
    assert_eq!(
        one(&calendar, &paris).1,
        vec!["limit daily: calendar time_zone UTC → Europe/Paris".to_string()]
    );
}

#[test]
fn limit_names_and_the_limit_form_are_key_parts() {
    let renamed = BASE.replace("name: daily", "name: per-day");
    assert_eq!(one(BASE, &renamed).1, vec!["limit name daily → per-day".to_string()]);
    let several = BASE.replace(
        "rate_limit: { name: per-user, unit: hour, requests_per_unit: 100 }",
        "rate_limits:\n      - { name: hourly, unit: hour, requests_per_unit: 100 }",
    );
    let (rule, changes) = one(BASE, &several);
    assert_eq!(rule.as_deref(), Some("descriptors[0]"), "paired by config path");
    assert_eq!(changes, vec!["rate_limit → rate_limits entry hourly".to_string()]);
    // A limit removed from rate_limits: the other keeps its counts, nothing starts afresh.
    let fewer = BASE.replace("      - { name: burst, unit: second, requests_per_unit: 5 }\n", "");
    assert_eq!(fresh(BASE, &fewer), vec![]);
}

#[test]
fn descriptor_paths_and_share_threshold_are_key_parts() {
    // A named rule whose entry key changes: paired by name.
    let key = BASE.replace("  - key: user\n", "  - key: user_id\n");
    assert_eq!(one(BASE, &key), (Some("per-user".into()), vec!["descriptor path user → user_id".into()]));
    // An unnamed rule whose entry key changes: paired by config path.
    let tenant = BASE.replace("key: tenant", "key: org");
    assert_eq!(one(BASE, &tenant).1, vec!["descriptor path tenant → org".to_string()]);
    let unshared = BASE.replace("    share_threshold: true\n", "");
    assert_eq!(
        one(BASE, &unshared).1,
        vec!["share_threshold of path: shared (/api/*) → per value".to_string()]
    );
    let pattern = BASE.replace("value: /api/*", "value: /v1/*");
    assert_eq!(one(BASE, &pattern).1, vec!["descriptor path path=/api/* → path=/v1/*".to_string()]);
    // A wildcard that keys the request's value: a new pattern keeps the buckets it shares.
    let plain = BASE.replace("    share_threshold: true\n", "");
    assert_eq!(fresh(&plain, &plain.replace("value: /api/*", "value: /api/v*")), vec![]);
    // An exact value made a wildcard: that value's requests keep their bucket.
    let exact = BASE.replace("  - key: user\n", "  - key: user\n    value: alice\n");
    let wild = BASE.replace("  - key: user\n", "  - key: user\n    value: ali*\n");
    assert_eq!(fresh(&exact, &wild), vec![]);
}

#[test]
fn rules_and_domains_only_on_one_side_are_not_listed() {
    let other = BASE.replace("domain: api", "domain: web");
    assert_eq!(fresh(BASE, &other), vec![]);
    let unlimited = BASE.replace(
        "rate_limit: { name: per-user, unit: hour, requests_per_unit: 100 }",
        "rate_limit: { name: per-user, unlimited: true }",
    );
    assert_eq!(fresh(BASE, &unlimited), vec![]);
}

/// Every pair found unchanged has the same key for every limit, and every pair found
/// changed has a key that differs, with values a request could carry.
#[test]
fn agrees_with_the_bucket_keys() {
    let variants = [
        BASE.to_string(),
        BASE.replace("unit: hour", "unit: minute"),
        BASE.replace("requests_per_unit: 100 }", "requests_per_unit: 1 }"),
        BASE.replace("name: daily", "name: weekly"),
        BASE.replace("    share_threshold: true\n", ""),
    ];
    for old in &variants {
        for new in &variants {
            let (old_s, new_s) = (snapshot(old), snapshot(new));
            let (o, n) = (&old_s.domains["api"], &new_s.domains["api"]);
            let changed: Vec<String> = between(&old_s, &new_s).into_iter().filter_map(|f| f.rule).collect();
            for (ro, rn) in pair_rules(o, n) {
                let entries: Vec<(&str, &str)> =
                    ro.levels.iter().map(|l| (l.key.as_str(), "/api/x")).collect();
                let keys = |d: &Domain, r: &Rule| -> Vec<String> {
                    r.limits().iter().map(|l| key::limit_key("", d, r, l, entries.iter().copied())).collect()
                };
                let same = keys(o, ro) == keys(n, rn);
                assert_eq!(same, !changed.contains(&rn.label().to_string()), "{old}\n→\n{new}");
            }
        }
    }
}
