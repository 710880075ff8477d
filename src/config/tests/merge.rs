//! `--merge-domains`: the files of one domain merge; what they disagree on is an error
//! naming both files.

use std::path::PathBuf;

use crate::config::{compile_sources, compile_sources_with, load_path_with, ConfigErrors, FailureMode};
use crate::config::{LoadOptions, Lookup, Snapshot};

const MERGE: LoadOptions = LoadOptions {
    merge_domains: true,
    default_algorithm: crate::algorithm::Algorithm::Gcra,
    stop_charging_when_over_limit: false,
};

fn sources(files: &[(&str, &str)]) -> Vec<(PathBuf, String)> {
    files.iter().map(|(name, yaml)| (PathBuf::from(name), yaml.to_string())).collect()
}

fn merged(files: &[(&str, &str)]) -> Snapshot {
    compile_sources_with(&sources(files), &MERGE).unwrap_or_else(|errors| panic!("does not load:\n{errors}"))
}

fn refused(files: &[(&str, &str)]) -> ConfigErrors {
    match compile_sources_with(&sources(files), &MERGE) {
        Ok(_) => panic!("loaded but should not: {files:?}"),
        Err(errors) => errors,
    }
}

const KEY1: &str = "domain: test-domain\ndescriptors:\n  - key: key1\n    value: value1\n    rate_limit: {unit: minute, requests_per_unit: 10}\n";
const KEY2: &str = "domain: test-domain\ndescriptors:\n  - key: key2\n    value: value2\n    rate_limit: {name: second, unit: minute, requests_per_unit: 20}\n";

fn limit_of(snapshot: &Snapshot, entries: &[(&str, &str)]) -> Option<(String, u64)> {
    let domain = snapshot.domain("test-domain")?;
    match domain.lookup(entries.iter().copied()) {
        Lookup::Rule(rule) => match &rule.limit {
            crate::config::RuleLimit::Limited(limits) => {
                Some((rule.label().to_owned(), limits[0].params.limit))
            }
            crate::config::RuleLimit::Unlimited => None,
        },
        _ => None,
    }
}

#[test]
fn descriptors_of_one_domain_in_two_files_merge() {
    let snapshot = merged(&[("key1.yaml", KEY1), ("key2.yaml", KEY2)]);
    assert_eq!(snapshot.domains.len(), 1);
    // Unnamed rules carry their file's stem; named ones keep their name.
    assert_eq!(limit_of(&snapshot, &[("key1", "value1")]), Some(("key1:descriptors[0]".into(), 10)));
    assert_eq!(limit_of(&snapshot, &[("key2", "value2")]), Some(("second".into(), 20)));
    let domain = snapshot.domain("test-domain").expect("domain");
    assert_eq!(domain.file, PathBuf::from("key1.yaml"));
    assert_eq!(domain.files, [PathBuf::from("key1.yaml"), PathBuf::from("key2.yaml")]);
    let ids: Vec<usize> = domain.rules.iter().map(|rule| rule.id.0).collect();
    assert_eq!(ids, [0, 1], "rule ids index the merged domain's rules");
}

#[test]
fn without_the_flag_a_second_file_of_a_domain_is_an_error() {
    let Err(errors) = compile_sources(&sources(&[("key1.yaml", KEY1), ("key2.yaml", KEY2)])) else {
        panic!("a duplicate domain loaded without --merge-domains");
    };
    let [error] = errors.errors() else { panic!("{errors}") };
    assert_eq!(
        (error.file.to_str(), error.path.as_str(), error.line),
        (Some("key2.yaml"), "domain", Some(1))
    );
    assert!(error.message.contains("key1.yaml") && error.message.contains("--merge-domains"), "{error}");
}

#[test]
fn a_domain_in_one_file_keeps_its_paths_with_the_flag() {
    let snapshot = merged(&[
        ("key1.yaml", KEY1),
        (
            "other.yaml",
            "domain: other\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
        ),
    ]);
    let other = snapshot.domain("other").expect("other");
    assert_eq!(other.rules[0].path, "descriptors[0]");
    assert_eq!(other.files, [PathBuf::from("other.yaml")]);
}

#[test]
fn the_same_key_and_value_in_two_files_is_an_error_naming_both() {
    let errors = refused(&[("a.yaml", KEY1), ("b.yaml", KEY1)]);
    let [error] = errors.errors() else { panic!("{errors}") };
    assert_eq!(
        (error.file.to_str(), error.path.as_str(), error.line),
        (Some("b.yaml"), "descriptors[0].value", Some(4))
    );
    assert!(error.message.contains("descriptors[0] in a.yaml"), "{error}");
    // A value-less key too, and the top level only: the same key nested under different
    // top-level pairs is no conflict.
    let bare = "domain: test-domain\ndescriptors:\n  - key: user\n    rate_limit: {unit: second, requests_per_unit: 1}\n";
    let errors = refused(&[
        ("a.yaml", bare),
        ("b.yaml", "domain: test-domain\ndescriptors:\n  - key: ip\n  - key: user\n"),
    ]);
    let [error] = errors.errors() else { panic!("{errors}") };
    assert_eq!((error.path.as_str(), error.line), ("descriptors[1].key", Some(4)));
    assert!(error.message.contains("a.yaml") && error.to_string().starts_with("b.yaml:4:"), "{error}");
}

#[test]
fn a_domain_level_field_set_in_one_file_applies_to_the_merged_domain() {
    let closed = "domain: test-domain\nfailure_mode: closed\n";
    let snapshot = merged(&[("a.yaml", KEY1), ("b.yaml", closed), ("c.yaml", KEY2)]);
    assert_eq!(snapshot.domain("test-domain").map(|d| d.failure_mode), Some(FailureMode::Closed));
    // The same value twice is no conflict.
    let snapshot = merged(&[("a.yaml", closed), ("b.yaml", closed)]);
    assert_eq!(snapshot.domain("test-domain").map(|d| d.failure_mode), Some(FailureMode::Closed));
}

#[test]
fn two_different_values_of_a_domain_level_field_are_an_error_naming_both_files() {
    let errors = refused(&[
        ("a.yaml", "domain: test-domain\nfailure_mode: closed\n"),
        ("b.yaml", KEY1),
        ("c.yaml", "domain: test-domain\n# open\nfailure_mode: open\n"),
    ]);
    let [error] = errors.errors() else { panic!("{errors}") };
    assert_eq!(
        (error.file.to_str(), error.path.as_str(), error.line),
        (Some("c.yaml"), "failure_mode", Some(3))
    );
    assert!(error.message.contains("\"open\"") && error.message.contains("\"closed\" in a.yaml"), "{error}");
}

#[test]
fn wildcards_keep_file_name_order() {
    let broad = "domain: test-domain\ndescriptors:\n  - key: path\n    value: /api/*\n    rate_limit: {unit: second, requests_per_unit: 1}\n";
    let narrow = "domain: test-domain\ndescriptors:\n  - key: path\n    value: /api/v1/*\n    rate_limit: {unit: second, requests_per_unit: 2}\n";
    let dir = tempfile::tempdir().expect("tempdir");
    // Written in the other order: the loader sorts by name, and the first file's wildcard wins.
    std::fs::write(dir.path().join("b-narrow.yaml"), narrow).expect("write");
    std::fs::write(dir.path().join("a-broad.yaml"), broad).expect("write");
    let snapshot = load_path_with(dir.path(), &MERGE).unwrap_or_else(|errors| panic!("{errors}"));
    assert_eq!(limit_of(&snapshot, &[("path", "/api/v1/x")]), Some(("a-broad:descriptors[0]".into(), 1)));
    let rename =
        |from: &str, to: &str| std::fs::rename(dir.path().join(from), dir.path().join(to)).expect("rename");
    rename("b-narrow.yaml", "0-narrow.yaml");
    let snapshot = load_path_with(dir.path(), &MERGE).unwrap_or_else(|errors| panic!("{errors}"));
    assert_eq!(limit_of(&snapshot, &[("path", "/api/v1/x")]), Some(("0-narrow:descriptors[0]".into(), 2)));
    assert_eq!(limit_of(&snapshot, &[("path", "/api/v2")]), Some(("a-broad:descriptors[0]".into(), 1)));
}

#[test]
fn errors_of_a_merged_domain_name_their_own_file_in_file_order() {
    let bad = |unit: &str| {
        format!("domain: test-domain\ndescriptors:\n  - key: k{unit}\n    rate_limit: {{unit: {unit}, requests_per_unit: 1}}\n")
    };
    let errors =
        refused(&[("a.yaml", &bad("fortnight")), ("b.yaml", "domain: other\n"), ("c.yaml", &bad("aeon"))]);
    let found: Vec<String> = errors.errors().iter().map(ToString::to_string).collect();
    assert_eq!(found.len(), 2, "{errors}");
    assert!(
        found[0].starts_with("a.yaml:4: descriptors[0].rate_limit.unit: unknown unit \"fortnight\""),
        "{errors}"
    );
    assert!(
        found[1].starts_with("c.yaml:4: descriptors[0].rate_limit.unit: unknown unit \"aeon\""),
        "{errors}"
    );
}

#[test]
fn replaces_reach_across_the_files_of_a_domain() {
    let replacing = "domain: test-domain\ndescriptors:\n  - key: key2\n    rate_limit: {unit: minute, requests_per_unit: 5, replaces: [{name: first}]}\n";
    let named = "domain: test-domain\ndescriptors:\n  - key: key1\n    rate_limit: {name: first, unit: minute, requests_per_unit: 10}\n";
    let snapshot = merged(&[("a.yaml", named), ("b.yaml", replacing)]);
    let domain = snapshot.domain("test-domain").expect("domain");
    assert_eq!(domain.rules[1].replaces, ["first"]);
    assert_eq!(domain.rules[1].label(), "b:descriptors[0]");
}
