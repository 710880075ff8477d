//! How long a reload of a 10,000-rule config takes.
//!
//! `cargo run --release --example reload_timing [RULES]` writes one domain with RULES rules
//! (default 10,000: tenants with an exact value and a nested wildcard path each, plus users
//! and API keys) into a temporary directory, then times `config::load_path` (read, parse,
//! validate, compile) and `Live::reload` (the same plus per-rule metric handles and the
//! swap), alternating two contents so that every reload really swaps. Prints the median,
//! min and max of several runs.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tollgate::sources::serving::Live;
use tollgate::telemetry::metrics::Metrics;

const RUNS: usize = 11;

/// A domain with exactly `rules` rules; `variant` changes every limit (a new version).
fn policy(rules: usize, variant: u32) -> String {
    let mut yaml = String::from("domain: big\nfailure_mode: open\ndescriptors:\n");
    let tenants = rules / 2;
    for i in 0..tenants {
        let _ = write!(
            yaml,
            "  - key: tenant\n    value: t{i}\n    rate_limit: {{ name: tenant-{i}, unit: minute, requests_per_unit: {} }}\n    descriptors:\n      - key: path\n        value: \"/v{}/*\"\n        rate_limit: {{ unit: second, requests_per_unit: {}, algorithm: sliding_window }}\n",
            1000 + variant,
            i % 7,
            10 + variant
        );
    }
    for i in 0..rules - 2 * tenants {
        let _ = write!(
            yaml,
            "  - key: user\n    value: u{i}\n    rate_limit: {{ unit: hour, requests_per_unit: {} }}\n",
            50 + variant
        );
    }
    yaml
}

fn summary(mut samples: Vec<Duration>) -> (Duration, Duration, Duration) {
    samples.sort();
    (samples[samples.len() / 2], samples[0], samples[samples.len() - 1])
}

fn report(what: &str, samples: Vec<Duration>) {
    let (median, min, max) = summary(samples);
    println!("{what:<26} median {median:>10.2?}   min {min:>10.2?}   max {max:>10.2?}   ({RUNS} runs)");
}

fn main() -> anyhow::Result<()> {
    let rules: usize = std::env::args().nth(1).map(|n| n.parse()).transpose()?.unwrap_or(10_000);
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("big.yaml");
    let contents = [policy(rules, 0), policy(rules, 1)];
    std::fs::write(&file, &contents[0])?;
    let snapshot = tollgate::config::load_path(dir.path()).map_err(|e| anyhow::anyhow!("{e}"))?;
    println!(
        "{} rules, {} bytes of YAML, version {}",
        snapshot.rule_count(),
        contents[0].len(),
        snapshot.version
    );
    anyhow::ensure!(snapshot.rule_count() == rules, "generated {} rules", snapshot.rule_count());

    let mut samples = Vec::with_capacity(RUNS);
    for _ in 0..RUNS {
        let started = Instant::now();
        let loaded = tollgate::config::load_path(dir.path());
        samples.push(started.elapsed());
        anyhow::ensure!(loaded.is_ok(), "load failed");
    }
    report("config::load_path", samples);

    let live =
        Live::load_initial(dir.path(), Arc::new(Metrics::new())).map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut samples = Vec::with_capacity(RUNS);
    for run in 0..RUNS {
        // Alternate the two contents (outside the timing) so every reload swaps.
        std::fs::write(&file, &contents[(run + 1) % 2])?;
        let started = Instant::now();
        let reloaded = live.reload();
        samples.push(started.elapsed());
        anyhow::ensure!(matches!(reloaded, Ok((_, true))), "reload {run} did not swap: {reloaded:?}");
    }
    report("Live::reload (with swap)", samples);
    Ok(())
}
