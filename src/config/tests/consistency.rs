//! The domain field `consistency`: its values, its agreement across merged files, and what
//! an approximate domain refuses (gcra, written or resolved; leases), with file, line and
//! field.

use std::path::PathBuf;

use super::{errors, load, only_domain};
use crate::algorithm::Algorithm;
use crate::config::{compile_sources_with, ConfigErrors, Consistency, LoadOptions, Snapshot};

fn with(options: LoadOptions, files: &[(&str, &str)]) -> Result<Snapshot, ConfigErrors> {
    let sources: Vec<_> =
        files.iter().map(|(name, yaml)| (PathBuf::from(name), (*yaml).to_owned())).collect();
    compile_sources_with(&sources, &options)
}

/// `(path, line, message)` of every error.
fn found(errors: &ConfigErrors) -> Vec<(String, Option<usize>, String)> {
    errors.errors().iter().map(|e| (e.path.clone(), e.line, e.message.clone())).collect()
}

const SLIDING: &str = "descriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, algorithm: sliding_window}\n";

#[test]
fn the_default_is_exact() {
    let snapshot = load(&format!("domain: d\n{SLIDING}"));
    assert_eq!(only_domain(&snapshot).consistency, Consistency::Exact);
    assert_eq!(Consistency::default().as_str(), "exact");
}

#[test]
fn both_values_load_in_any_case() {
    let approximate = load(&format!("domain: d\nconsistency: Approximate\n{SLIDING}"));
    assert_eq!(only_domain(&approximate).consistency, Consistency::Approximate);
    assert_eq!(Consistency::Approximate.as_str(), "approximate");
    let exact = load(&format!("domain: d\nconsistency: EXACT\n{SLIDING}"));
    assert_eq!(only_domain(&exact).consistency, Consistency::Exact);
}

#[test]
fn an_unknown_value_names_the_field_and_the_allowed_values() {
    let found = found(&errors(&format!("domain: d\nconsistency: eventual\n{SLIDING}")));
    assert_eq!(
        found,
        [(
            "consistency".to_owned(),
            Some(2),
            "unknown consistency \"eventual\" (expected exact or approximate)".to_owned()
        )]
    );
}

#[test]
fn merged_files_agree_on_consistency() {
    let merge = LoadOptions { merge_domains: true, ..LoadOptions::default() };
    let a = "domain: d\nconsistency: approximate\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, algorithm: fixed_window}\n";
    let b = "domain: d\ndescriptors:\n  - key: b\n    rate_limit: {unit: second, requests_per_unit: 1, algorithm: sliding_window}\n";
    let snapshot = with(merge, &[("a.yaml", a), ("b.yaml", b)]).expect("set in one file");
    assert_eq!(only_domain(&snapshot).consistency, Consistency::Approximate);

    let differs = b.replace("domain: d\n", "domain: d\nconsistency: exact\n");
    let errors = with(merge, &[("a.yaml", a), ("b.yaml", &differs)]).expect_err("two values");
    let files: Vec<_> = errors.errors().iter().map(|e| e.file.display().to_string()).collect();
    assert_eq!(files, ["b.yaml"]);
    assert_eq!(found(&errors)[0].0, "consistency");
    assert_eq!(found(&errors)[0].1, Some(2));
    assert!(
        errors.to_string().contains("consistency \"exact\" differs from \"approximate\" in a.yaml"),
        "{errors}"
    );
}

#[test]
fn an_approximate_domain_serves_sliding_and_fixed_windows() {
    let yaml = "domain: d\nconsistency: approximate\ndescriptors:\n  - key: s\n    rate_limit: {unit: second, requests_per_unit: 1, algorithm: sliding_window}\n  - key: f\n    rate_limits:\n      - {name: a, unit: minute, requests_per_unit: 5, algorithm: fixed_window}\n      - {name: b, unit: hour, requests_per_unit: 50, algorithm: sliding_window}\n  - key: u\n    rate_limit: {unlimited: true}\n";
    assert_eq!(only_domain(&load(yaml)).rules.len(), 3);
    // With a window default, a limit that names no algorithm is served too.
    let plain = "domain: d\nconsistency: approximate\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n";
    for default in [Algorithm::SlidingWindow, Algorithm::FixedWindow] {
        let options = LoadOptions { default_algorithm: default, ..LoadOptions::default() };
        with(options, &[("d.yaml", plain)]).expect("the default is a window");
    }
}

#[test]
fn gcra_written_is_refused_with_file_line_and_field() {
    let yaml = "domain: d\nconsistency: approximate\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      algorithm: gcra\n";
    let errors = errors(yaml);
    assert_eq!(
        found(&errors),
        [(
            "descriptors[0].rate_limit.algorithm".to_owned(),
            Some(8),
            "consistency: approximate serves sliding_window and fixed_window, not gcra; set \
             algorithm: sliding_window"
                .to_owned()
        )]
    );
    assert!(errors.to_string().starts_with("test.yaml:8: descriptors[0].rate_limit.algorithm: "), "{errors}");
}

#[test]
fn gcra_by_default_is_refused_at_the_limit() {
    let yaml = "domain: d\nconsistency: approximate\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n";
    assert_eq!(
        found(&errors(yaml)),
        [(
            "descriptors[0].rate_limit.algorithm".to_owned(),
            Some(5),
            "consistency: approximate serves sliding_window and fixed_window, not gcra (the \
             default algorithm, --default-algorithm gcra); set algorithm: sliding_window"
                .to_owned()
        )]
    );
}

#[test]
fn every_limit_of_rate_limits_is_checked_and_a_burst_means_gcra() {
    let yaml = "domain: d\nconsistency: approximate\ndescriptors:\n  - key: k\n    rate_limits:\n      - {name: a, unit: second, requests_per_unit: 1, algorithm: sliding_window}\n      - {name: b, unit: minute, requests_per_unit: 9, burst: 3}\n      - {name: c, unit: hour, requests_per_unit: 9, algorithm: GCRA}\n";
    let options = LoadOptions { default_algorithm: Algorithm::FixedWindow, ..LoadOptions::default() };
    let errors = with(options, &[("test.yaml", yaml)]).expect_err("gcra twice");
    let found = found(&errors);
    let paths: Vec<_> = found.iter().map(|(path, line, _)| (path.as_str(), *line)).collect();
    assert_eq!(
        paths,
        [
            ("descriptors[0].rate_limits[1].burst", Some(7)),
            ("descriptors[0].rate_limits[2].algorithm", Some(8))
        ]
    );
    assert!(found[0].2.contains("not gcra (a burst without an algorithm means gcra)"), "{errors}");
    assert!(found[0].2.ends_with("remove burst and set algorithm: sliding_window"), "{errors}");
}

#[test]
fn a_merged_file_without_the_field_is_checked_by_the_domains_consistency() {
    let merge = LoadOptions { merge_domains: true, ..LoadOptions::default() };
    let a = "domain: d\nconsistency: approximate\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, algorithm: fixed_window}\n";
    let b = "domain: d\ndescriptors:\n  - key: b\n    rate_limit: {unit: second, requests_per_unit: 1}\n";
    let errors = with(merge, &[("a.yaml", a), ("b.yaml", b)]).expect_err("b's limit is gcra");
    assert!(
        errors
            .to_string()
            .starts_with("b.yaml:4: descriptors[0].rate_limit.algorithm: consistency: approximate"),
        "{errors}"
    );
}

#[test]
fn a_lease_is_refused_in_an_approximate_domain() {
    let yaml = "domain: d\nconsistency: approximate\ndescriptors:\n  - key: k\n    lease: true\n    rate_limit: {unit: second, requests_per_unit: 1, algorithm: sliding_window}\n";
    let errors = errors(yaml);
    let found = found(&errors);
    assert_eq!(found.len(), 1, "{errors}");
    assert_eq!((found[0].0.as_str(), found[0].1), ("descriptors[0].lease", Some(5)));
    assert!(found[0].2.contains("leases are an exact-mode device"), "{errors}");
    // The same rule in an exact domain loads.
    load(&yaml.replace("consistency: approximate\n", ""));
}
