//! Config fuzzing with proptest: generated and mutated YAML through parse + validate +
//! compile (and lookups on whatever compiles) never panics.
//!
//! CI runs a short pass (the default case count below). For a long run offline:
//! `PROPTEST_CASES=100000 cargo test --release --test config_fuzz`. Every crash found
//! becomes a case in `regressions()`.

use std::path::PathBuf;

use proptest::prelude::*;
use tollgate::config::{compile_sources, Lookup};

const SEEDS: [&str; 5] = [
    include_str!("fixtures/config/valid/edge_proxy.yaml"),
    include_str!("fixtures/config/valid/merge_keys.yaml"),
    include_str!("../config/api.yaml"),
    include_str!("../config/login.yaml"),
    include_str!("../config/partners.yaml"),
];

/// Compiles `yaml` as one file; if it compiles, walks it with `probes`.
fn exercise(yaml: &str, probes: &[Vec<(String, String)>]) {
    let sources = [(PathBuf::from("fuzz.yaml"), yaml.to_string())];
    let Ok(snapshot) = compile_sources(&sources) else { return };
    for domain in snapshot.domains.values() {
        for probe in probes {
            if let Lookup::Rule(rule) = domain.lookup(probe.iter().map(|(k, v)| (k.as_str(), v.as_str()))) {
                assert!(!rule.path.is_empty());
            }
        }
    }
}

fn word() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        "[a-z_]{1,8}",
        "[a-z*/]{0,6}\\*[a-z]{0,3}",
        Just("*".to_string()),
        "\\PC{0,12}",
    ]
}

fn unit() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("second".into()),
        Just("MINUTE".into()),
        Just("hour".into()),
        Just("day".into()),
        Just("week".into()),
        Just("month".into()),
        Just("year".into()),
        "[a-z]{0,7}",
    ]
}

/// Anchors, aliases and merge keys a node may carry (0: none): aliases to `n` and `r` (the
/// prelude's, see `ANCHORS`), and to `m` and `q`, which nodes define (later, or around
/// the alias: parse errors, which is fine here).
fn merge_shape(shape: u8) -> (&'static str, &'static str, &'static str, &'static str) {
    // (after `- `, merge line, after `rate_limit:`, merge line inside rate_limit)
    // Shapes that load are likelier, so that whole configs with merges still compile.
    match shape {
        1..=3 => ("&m\n  ", "", "", ""),
        4..=6 => ("", "  <<: *n\n", "", ""),
        7 => ("", "  <<: [*n, *r]\n", "", ""),
        8 | 9 => ("", "", " &q", ""),
        10..=12 => ("", "", "", "    <<: *r\n"),
        13 => ("", "  <<: [*m, *n]\n", "", "    <<: [*q, *r]\n"),
        14 => ("", "  <<: *m\n", "", ""),
        _ => ("", "", "", ""),
    }
}

/// A `rate_limits` list (names from a small set, so some repeat; multipliers including 0
/// and ones past the longest window), as the lines after `  rate_limits:`.
fn rate_limits() -> impl Strategy<Value = String> {
    let multiplier = prop_oneof![Just(0u64), Just(1), Just(5), Just(1_000_000), Just(u64::MAX)];
    let entry = (0u8..3, unit(), 0u64..100, proptest::option::of(multiplier), any::<bool>());
    proptest::collection::vec(entry, 0..4).prop_map(|entries| {
        entries
            .into_iter()
            .map(|(name, unit, rpu, multiplier, unlimited)| {
                let mut yaml =
                    format!("    - name: l{name}\n      unit: {unit}\n      requests_per_unit: {rpu}\n");
                if let Some(n) = multiplier {
                    yaml.push_str(&format!("      unit_multiplier: {n}\n"));
                }
                if unlimited {
                    yaml.push_str("      unlimited: true\n");
                }
                yaml
            })
            .collect()
    })
}

/// A descriptor node, as YAML lines at `indent`, up to `depth` levels deep.
fn node(depth: u32) -> BoxedStrategy<String> {
    let leaf = (
        word(),
        proptest::option::of(word()),
        proptest::option::of((unit(), 0u64..100, any::<bool>(), 0u8..4)),
    );
    let children = if depth == 0 {
        Just(Vec::new()).boxed()
    } else {
        proptest::collection::vec(node(depth - 1), 0..3).boxed()
    };
    (leaf, children, any::<bool>(), 0u8..24, proptest::option::of(rate_limits()))
        .prop_map(|((key, value, limit), children, shared, shape, several)| {
            let (anchor, merge, limit_anchor, limit_merge) = merge_shape(shape);
            let mut yaml = format!("- {anchor}key: {key:?}\n{merge}");
            if let Some(value) = value {
                yaml.push_str(&format!("  value: {value:?}\n"));
            }
            if shared {
                yaml.push_str("  share_threshold: true\n");
            }
            if let Some((unit, rpu, unlimited, algo)) = limit {
                let algorithm = ["gcra", "sliding_window", "fixed_window", "nope"][algo as usize];
                yaml.push_str(&format!(
                    "  rate_limit:{limit_anchor}\n{limit_merge}    unit: {unit}\n    requests_per_unit: {rpu}\n"
                ));
                yaml.push_str(&format!("    algorithm: {algorithm}\n"));
                if unlimited {
                    yaml.push_str("    unlimited: true\n");
                }
            }
            // Sometimes beside a `rate_limit` too: an error, which is fine here.
            if let Some(several) = several {
                yaml.push_str("  rate_limits:\n");
                yaml.push_str(&several);
            }
            if !children.is_empty() {
                yaml.push_str("  descriptors:\n");
                for child in children {
                    for line in child.lines() {
                        yaml.push_str(&format!("    {line}\n"));
                    }
                }
            }
            yaml
        })
        .boxed()
}

/// Anchors `n` (a descriptor) and `r` (its rate_limit), defined before any node uses them.
const ANCHORS: &str =
    "  - &n\n    key: anchored\n    rate_limit: &r\n      unit: minute\n      requests_per_unit: 3\n";

fn config() -> impl Strategy<Value = String> {
    (word(), proptest::collection::vec(node(3), 0..5)).prop_map(|(domain, nodes)| {
        let mut yaml = format!("domain: {domain:?}\ndescriptors:\n{ANCHORS}");
        for n in nodes {
            for line in n.lines() {
                yaml.push_str(&format!("  {line}\n"));
            }
        }
        yaml
    })
}

fn probes() -> impl Strategy<Value = Vec<Vec<(String, String)>>> {
    proptest::collection::vec(proptest::collection::vec((word(), word()), 1..4), 1..6)
}

/// A seed config with random edits: byte flips, insertions, deletions, truncation.
fn mutated() -> impl Strategy<Value = String> {
    (0..SEEDS.len(), proptest::collection::vec((any::<prop::sample::Index>(), 0u8..4, any::<char>()), 1..8))
        .prop_map(|(seed, edits)| {
            let mut chars: Vec<char> = SEEDS[seed].chars().collect();
            for (at, op, c) in edits {
                if chars.is_empty() {
                    break;
                }
                let i = at.index(chars.len());
                match op {
                    0 => chars[i] = c,
                    1 => chars.insert(i, c),
                    2 => {
                        chars.remove(i);
                    }
                    _ => chars.truncate(i),
                }
            }
            chars.into_iter().collect()
        })
}

/// 256 per property in CI; `PROPTEST_CASES` for a long run.
fn cases() -> u32 {
    std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(256)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    #[test]
    fn generated_configs_never_panic(yaml in config(), probes in probes()) {
        exercise(&yaml, &probes);
    }

    #[test]
    fn mutated_configs_never_panic(yaml in mutated(), probes in probes()) {
        exercise(&yaml, &probes);
    }
}

#[test]
fn regressions() {
    // Inputs that once mattered, kept as fixed cases.
    for yaml in [
        "",
        "---\n---\n",
        "domain: d\ndescriptors: null\n",
        "domain: d\ndescriptors:\n  - key: a\n    value: '***'\n    share_threshold: true\n    rate_limit: {unit: second, requests_per_unit: 0}\n",
        "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: year, requests_per_unit: 4294967295, burst: 18446744073709551615}\n",
        "domain: [1, 2]\n",
        "\u{feff}domain: d\n",
        "domain: d\ndescriptors:\n  - &a\n    key: k\n    <<: *a\n",
        "domain: d\ndescriptors:\n  - &a {key: k, <<: [*a, *a]}\n",
        "domain: d\n<<: *nowhere\n",
        "domain: d\ndescriptors:\n  - <<: [1.5, ~]\n",
    ] {
        exercise(yaml, &[vec![("a".into(), "x".into())]]);
    }
}
