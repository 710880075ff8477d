//! Unit tests of the config module: matching, compiled rules, validation and positions.
//! Fixture-driven tests of every validation rule and of the directory loader live in
//! `tests/config_fixtures.rs`.

mod calendar;
mod charge;
mod consistency;
mod controls;
mod default_algorithm;
mod matching;
mod merge;
mod merge_keys;
mod rate_limits;
mod raw;
mod reservations;
mod rules;
mod validation;

use std::path::PathBuf;

use super::{compile_sources, ConfigErrors, Domain, Lookup, Rule, Snapshot};

/// Compiles one YAML text as `test.yaml`, panicking with the errors if it does not load.
fn load(yaml: &str) -> Snapshot {
    match compile_sources(&[(PathBuf::from("test.yaml"), yaml.to_owned())]) {
        Ok(snapshot) => snapshot,
        Err(errors) => panic!("config does not load:\n{errors}"),
    }
}

/// The only domain of a one-file snapshot.
fn only_domain(snapshot: &Snapshot) -> &Domain {
    assert_eq!(snapshot.domains.len(), 1);
    snapshot.domains.values().next().expect("one domain")
}

/// Compiles one YAML text that must fail.
fn errors(yaml: &str) -> ConfigErrors {
    match compile_sources(&[(PathBuf::from("test.yaml"), yaml.to_owned())]) {
        Ok(_) => panic!("config loaded but should not:\n{yaml}"),
        Err(errors) => errors,
    }
}

/// `(path, line, message)` of every error.
fn found(errors: &ConfigErrors) -> Vec<(String, Option<usize>, String)> {
    errors.errors().iter().map(|e| (e.path.clone(), e.line, e.message.clone())).collect()
}

/// The one error of `yaml`: its path and line; its message must contain `fragment`.
fn one_error(yaml: &str, fragment: &str) -> (String, Option<usize>) {
    let all = found(&errors(yaml));
    assert_eq!(all.len(), 1, "{all:#?}");
    let (path, line, message) = all.into_iter().next().expect("one error");
    assert!(message.contains(fragment), "{message:?} lacks {fragment:?}");
    (path, line)
}

/// Looks `entries` up in `domain`.
fn lookup<'d>(domain: &'d Domain, entries: &[(&str, &str)]) -> Lookup<'d> {
    domain.lookup(entries.iter().copied())
}

/// The path of the rule `entries` reach; panics on anything but a rule.
fn rule_path(domain: &Domain, entries: &[(&str, &str)]) -> String {
    matched(domain, entries).path.clone()
}

fn matched<'d>(domain: &'d Domain, entries: &[(&str, &str)]) -> &'d Rule {
    match lookup(domain, entries) {
        Lookup::Rule(rule) => rule,
        other => panic!("{entries:?} reached {other:?}, expected a rule"),
    }
}
