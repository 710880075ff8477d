//! The domain fields `charge` and `hash_tag`, and `--stop-charging-when-over-limit`
//! (`LoadOptions::stop_charging_when_over_limit`), alone and across merged files.

use std::path::PathBuf;

use super::{errors, load, only_domain};
use crate::config::{compile_sources_with, ChargeMode, ConfigErrors, HashTag, LoadOptions, Snapshot};

const RULE: &str = "descriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n";

fn file(head: &str) -> String {
    format!("domain: d\n{head}{RULE}")
}

fn with(options: LoadOptions, files: &[(&str, String)]) -> Result<Snapshot, ConfigErrors> {
    let sources: Vec<_> = files.iter().map(|(name, yaml)| (PathBuf::from(name), yaml.clone())).collect();
    compile_sources_with(&sources, &options)
}

fn stop_charging() -> LoadOptions {
    LoadOptions { stop_charging_when_over_limit: true, ..LoadOptions::default() }
}

fn modes(snapshot: &Snapshot) -> (ChargeMode, HashTag) {
    let domain = only_domain(snapshot);
    (domain.charge, domain.hash_tag)
}

#[test]
fn the_defaults_are_per_descriptor_and_the_descriptor_tag() {
    assert_eq!(modes(&load(&file(""))), (ChargeMode::PerDescriptor, HashTag::Descriptor));
}

#[test]
fn charge_and_hash_tag_load_in_any_case() {
    let snapshot = load(&file("charge: all_or_nothing\nhash_tag: domain\n"));
    assert_eq!(modes(&snapshot), (ChargeMode::AllOrNothing, HashTag::Domain));
    let snapshot = load(&file("charge: Per_Descriptor\nhash_tag: DESCRIPTOR\n"));
    assert_eq!(modes(&snapshot), (ChargeMode::PerDescriptor, HashTag::Descriptor));
}

#[test]
fn unknown_values_name_the_field_and_the_allowed_values() {
    let found = errors(&file("charge: all\nhash_tag: cluster\n"));
    let found: Vec<_> =
        found.errors().iter().map(|e| (e.path.as_str(), e.line, e.message.as_str())).collect();
    assert_eq!(
        found,
        [
            ("charge", Some(2), "unknown charge \"all\" (expected per_descriptor or all_or_nothing)"),
            ("hash_tag", Some(3), "unknown hash_tag \"cluster\" (expected descriptor or domain)"),
        ]
    );
}

#[test]
fn the_flag_sets_all_or_nothing_where_the_domain_sets_no_charge() {
    let snapshot = with(stop_charging(), &[("d.yaml", file(""))]).expect("loads");
    assert_eq!(modes(&snapshot), (ChargeMode::AllOrNothing, HashTag::Descriptor));
    let own = with(stop_charging(), &[("d.yaml", file("charge: per_descriptor\n"))]).expect("loads");
    assert_eq!(modes(&own).0, ChargeMode::PerDescriptor, "the domain's field wins");
}

#[test]
fn the_flag_is_part_of_the_version() {
    let plain = with(LoadOptions::default(), &[("d.yaml", file(""))]).expect("loads").version;
    let flagged = with(stop_charging(), &[("d.yaml", file(""))]).expect("loads").version;
    assert_ne!(plain, flagged);
}

#[test]
fn merged_files_agree_on_charge_and_hash_tag() {
    let merge = LoadOptions { merge_domains: true, ..stop_charging() };
    let other =
        "domain: d\ndescriptors:\n  - key: other\n    rate_limit: {unit: second, requests_per_unit: 1}\n";
    let one_sets_it =
        [("a.yaml", file("charge: per_descriptor\nhash_tag: domain\n")), ("b.yaml", other.to_owned())];
    let snapshot = with(merge, &one_sets_it).expect("loads");
    assert_eq!(
        modes(&snapshot),
        (ChargeMode::PerDescriptor, HashTag::Domain),
        "set in one file: the domain's"
    );

    let other_differs =
        other.replace("domain: d\n", "domain: d\ncharge: all_or_nothing\nhash_tag: descriptor\n");
    let differ = [("a.yaml", file("charge: per_descriptor\nhash_tag: domain\n")), ("b.yaml", other_differs)];
    let found = with(merge, &differ).expect_err("two charges");
    let found: Vec<_> =
        found.errors().iter().map(|e| (e.file.display().to_string(), e.path.clone(), e.line)).collect();
    assert_eq!(
        found,
        [
            ("b.yaml".to_owned(), "charge".to_owned(), Some(2)),
            ("b.yaml".to_owned(), "hash_tag".to_owned(), Some(3))
        ]
    );
    let text = with(merge, &differ).expect_err("two charges").to_string();
    assert!(text.contains("charge \"all_or_nothing\" differs from \"per_descriptor\" in a.yaml"), "{text}");
}
