//! Shared fixtures of the criterion benches: generated policies and requests.

#![allow(dead_code)]

use std::fmt::Write as _;
use std::path::PathBuf;

use tollgate::config::{compile_sources, Snapshot};
use tollgate::service::wire::RateLimitDescriptor;

/// A policy of `rules` rules (rounded to an even number) in domain `bench`: `rules / 2`
/// routes `/r<i>`, each with its own limit and a nested `user` limit, plus a wildcard path
/// rule and a top-level `user` rule (as in a real config, the lookup also meets those).
pub fn snapshot(rules: usize) -> Snapshot {
    let mut yaml = String::from("domain: bench\ndescriptors:\n");
    yaml.push_str("  - key: user\n    rate_limit: { unit: second, requests_per_unit: 1000000 }\n");
    yaml.push_str(
        "  - key: path\n    value: \"/static/*\"\n    share_threshold: true\n    \
         rate_limit: { unit: second, requests_per_unit: 100 }\n",
    );
    for i in 0..(rules / 2).max(1) {
        // Writing to a String cannot fail.
        let _ = write!(
            yaml,
            "  - key: route\n    value: \"/r{i}\"\n    rate_limit: {{ unit: second, requests_per_unit: 100 }}\n    \
             descriptors:\n      - key: user\n        rate_limit: {{ unit: minute, requests_per_unit: 10 }}\n"
        );
    }
    compile_sources(&[(PathBuf::from("bench.yaml"), yaml)]).expect("generated policy compiles")
}

/// A descriptor from `(key, value)` pairs.
pub fn descriptor(entries: &[(&str, &str)]) -> RateLimitDescriptor {
    RateLimitDescriptor::from_entries(entries.iter().copied())
}

/// `n` single-entry `user` descriptors with distinct values.
pub fn user_descriptors(n: usize) -> Vec<RateLimitDescriptor> {
    (0..n).map(|i| descriptor(&[("user", &format!("user-{i}"))])).collect()
}
