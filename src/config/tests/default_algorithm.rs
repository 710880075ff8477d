//! `--default-algorithm`: the algorithm of every limit that names none.

use std::path::PathBuf;

use crate::algorithm::Algorithm;
use crate::config::{compile_sources, compile_sources_with, LoadOptions, RuleLimit, Snapshot};

const RULES: &str = r#"domain: d
descriptors:
  - key: plain
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: named_gcra
    rate_limit: {unit: minute, requests_per_unit: 3, algorithm: gcra}
  - key: burst_only
    rate_limit: {unit: minute, requests_per_unit: 3, burst: 1}
  - key: sliding
    rate_limit: {unit: minute, requests_per_unit: 3, algorithm: sliding_window}
"#;

fn with_default(algorithm: Algorithm, yaml: &str) -> Result<Snapshot, crate::config::ConfigErrors> {
    let options = LoadOptions { default_algorithm: algorithm, ..LoadOptions::default() };
    compile_sources_with(&[(PathBuf::from("d.yaml"), yaml.to_owned())], &options)
}

fn algorithms(snapshot: &Snapshot) -> Vec<Algorithm> {
    let domain = snapshot.domain("d").expect("domain d");
    domain
        .rules
        .iter()
        .map(|rule| match &rule.limit {
            RuleLimit::Limited(limits) => limits[0].params.algorithm,
            RuleLimit::Unlimited => panic!("unlimited"),
        })
        .collect()
}

#[test]
fn limits_that_name_no_algorithm_take_the_default_and_burst_means_gcra() {
    use Algorithm::{FixedWindow, Gcra, SlidingWindow};
    let fixed = with_default(FixedWindow, RULES).expect("loads");
    assert_eq!(algorithms(&fixed), [FixedWindow, Gcra, Gcra, SlidingWindow]);
    assert_eq!(fixed.default_algorithm, FixedWindow);
    assert_eq!(fixed.domain("d").map(|d| d.default_algorithm), Some(FixedWindow), "overrides follow it");
    let sliding = with_default(SlidingWindow, RULES).expect("loads");
    assert_eq!(algorithms(&sliding), [SlidingWindow, Gcra, Gcra, SlidingWindow]);
    let gcra = compile_sources(&[(PathBuf::from("d.yaml"), RULES.to_owned())]).expect("loads");
    assert_eq!(algorithms(&gcra), [Gcra, Gcra, Gcra, SlidingWindow]);
}

#[test]
fn burst_with_a_window_algorithm_stays_an_error_whatever_the_default() {
    let yaml = "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 3, algorithm: fixed_window, burst: 2}\n";
    let errors = with_default(Algorithm::FixedWindow, yaml).expect_err("burst on a window");
    assert!(errors.to_string().contains("burst applies to gcra only"), "{errors}");
}

#[test]
fn the_default_is_part_of_the_version_except_gcra() {
    let version = |algorithm| with_default(algorithm, RULES).expect("loads").version;
    let plain = compile_sources(&[(PathBuf::from("d.yaml"), RULES.to_owned())]).expect("loads").version;
    assert_eq!(version(Algorithm::Gcra), plain, "the default flag leaves versions as they were");
    assert_ne!(version(Algorithm::FixedWindow), plain, "a flag change rolls out like a config change");
    assert_ne!(version(Algorithm::FixedWindow), version(Algorithm::SlidingWindow));
}
