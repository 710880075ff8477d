use std::path::PathBuf;

use super::*;
use crate::config::compile_sources;
use crate::telemetry::metrics::SeriesLimits;

const POLICY: &str = r#"
domain: web
descriptors:
  - key: path
    detailed_metric: true
    rate_limit: { name: per-path, unit: hour, requests_per_unit: 100 }
  - key: user
    rate_limit: { name: per-user, unit: hour, requests_per_unit: 100 }
"#;

fn load(files: &[(&str, &str)]) -> Snapshot {
    let sources: Vec<(PathBuf, String)> =
        files.iter().map(|(name, yaml)| (PathBuf::from(name), yaml.to_string())).collect();
    compile_sources(&sources).unwrap_or_else(|errors| panic!("config does not load:\n{errors}"))
}

fn rule<'s>(snapshot: &'s Snapshot, domain: &str, name: &str) -> &'s Rule {
    let rules = &snapshot.domains[domain].rules;
    rules.iter().find(|rule| rule.label() == name).expect("rule")
}

/// The `tollgate_decisions_total` lines whose rule label starts with `rule`.
fn decision_series(metrics: &Metrics, rule: &str) -> usize {
    let prefix = format!("rule=\"{rule}");
    metrics
        .encode()
        .lines()
        .filter(|l| l.starts_with("tollgate_decisions_total{") && l.contains(&prefix))
        .count()
}

fn value_of(metrics: &Metrics, series: &str) -> Option<f64> {
    let text = metrics.encode();
    let line = text.lines().find(|line| line.starts_with(series))?;
    line[series.len()..].trim().parse().ok()
}

fn record(metrics: &Metrics, snapshot: &Snapshot, value: &str) {
    let rule = rule(snapshot, "web", "per-path");
    metrics.record_per_value("web", rule, [value.as_bytes()], Outcome::WithinLimit, 1);
}

#[test]
fn value_label_sets_stop_at_the_cap_and_the_rest_counts_under_other() {
    let metrics = Metrics::with_limits(SeriesLimits { max_label_value_bytes: 64, max_detailed_series: 10 });
    let snapshot = load(&[("web.yaml", POLICY)]);
    let counters = metrics.counters_for(&snapshot);
    assert!(matches!(counters.domains["web"][0], RuleSeries::PerValue));
    assert!(matches!(counters.domains["web"][1], RuleSeries::Fixed(_)));
    assert_eq!(decision_series(&metrics, "per-path"), 0, "no plain series for a per-value rule");
    for i in 0..30 {
        record(&metrics, &snapshot, &format!("/p/{i}"));
    }
    record(&metrics, &snapshot, "/p/3");
    assert_eq!(decision_series(&metrics, "per-path:"), 11 * 8, "10 sets and _other_, 8 results each");
    let within = |rule: &str| {
        value_of(
            &metrics,
            &format!(r#"tollgate_decisions_total{{domain="web",rule="{rule}",result="within_limit"}}"#),
        )
    };
    assert_eq!(within("per-path:path_/p/3"), Some(2.0), "a known value keeps its set");
    assert_eq!(within("per-path:_other_"), Some(20.0));
    assert_eq!(value_of(&metrics, r#"tollgate_metric_series_dropped_total{domain="web"}"#), Some(20.0));
    assert_eq!(
        value_of(&metrics, r#"tollgate_hits_total{domain="web",rule="per-path:_other_"}"#),
        Some(20.0)
    );
}

#[test]
fn a_reload_removes_the_series_of_dropped_and_changed_rules_and_frees_their_room() {
    let metrics = Metrics::with_limits(SeriesLimits { max_label_value_bytes: 64, max_detailed_series: 5 });
    let first = load(&[
        ("web.yaml", POLICY),
        (
            "other.yaml",
            "domain: other\ndescriptors:\n  - key: k\n    rate_limit: { unit: hour, requests_per_unit: 1 }\n",
        ),
    ]);
    let counters = metrics.counters_for(&first);
    if let RuleSeries::Fixed(user) = &counters.domains["web"][1] {
        let user = &user[0];
        user.record(Outcome::OverLimit, 1);
    }
    for i in 0..8 {
        record(&metrics, &first, &format!("/p/{i}"));
    }
    assert_eq!(decision_series(&metrics, "per-path:"), 6 * 8);

    // per-path becomes plain, `other` goes away; per-user stays and keeps its count.
    let second = load(&[("web.yaml", &POLICY.replace("detailed_metric: true", "shadow_mode: false"))]);
    metrics.counters_for(&second);
    assert_eq!(decision_series(&metrics, "per-path:"), 0, "value sets of a changed rule are gone");
    assert_eq!(decision_series(&metrics, "per-path"), 8, "its plain series replace them");
    let text = metrics.encode();
    assert!(!text.contains(r#"domain="other""#), "a removed domain leaves nothing:\n{text}");
    // Exported for every configured domain (from startup), value rules or not.
    assert!(text.contains(r#"tollgate_metric_series_dropped_total{domain="web"}"#), "{text}");
    let over = r#"tollgate_decisions_total{domain="web",rule="per-user",result="over_limit"}"#;
    assert_eq!(value_of(&metrics, over), Some(1.0), "an unchanged rule keeps counting");

    // Back to detailed: the room is free again, and in-flight requests of a rule the
    // serving snapshot no longer has create nothing.
    let third = load(&[("web.yaml", POLICY)]);
    metrics.counters_for(&third);
    assert_eq!(decision_series(&metrics, "per-path"), 0, "plain series of the rule removed");
    for i in 0..5 {
        record(&metrics, &third, &format!("/q/{i}"));
    }
    assert_eq!(decision_series(&metrics, "per-path:"), 5 * 8, "all five fit: the old sets freed their room");
    metrics.counters_for(&second);
    record(&metrics, &third, "/late");
    assert_eq!(decision_series(&metrics, "per-path:"), 0);
}
