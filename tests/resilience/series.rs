//! Metric series stay bounded whatever the traffic: distinct request values on rules that
//! put values in the `rule` label, and reloads that drop rules.

use std::time::Instant;

use tollgate::app::StoreKind;

use crate::support::*;

/// A `detailed_metric` rule, a `share_threshold` rule with `value_to_metric`, and a plain one.
const WEB: &str = r#"
domain: web
descriptors:
  - key: path
    detailed_metric: true
    rate_limit: { name: per-path, unit: hour, requests_per_unit: 1000 }
  - key: route
    value: "/api/*"
    share_threshold: true
    value_to_metric: true
    rate_limit: { name: shared, unit: hour, requests_per_unit: 1000000 }
  - key: user
    rate_limit: { name: per-user, unit: hour, requests_per_unit: 1000 }
"#;

/// The default `--max-detailed-series`.
const CAP: usize = 1_000;
/// `/metrics` stays under this with 3,000 hostile values at the default limits.
const MAX_METRICS_BYTES: usize = 1536 * 1024;

/// The `tollgate_decisions_total` lines of domain `web` whose rule label starts with `rule`.
fn decision_lines<'t>(text: &'t str, rule: &str) -> Vec<&'t str> {
    let prefix = format!(r#"tollgate_decisions_total{{domain="web",rule="{rule}"#);
    text.lines().filter(|line| line.starts_with(&prefix)).collect()
}

fn decisions(text: &str, rule: &str, result: &str) -> Option<f64> {
    metric(text, &format!(r#"tollgate_decisions_total{{domain="web",rule="{rule}",result="{result}"}}"#))
}

/// The `result` values of `tollgate_decisions_total`: one series each per label set.
const RESULTS: usize = 8;

/// 4 KiB values, distinct in their first bytes, with a newline and a right-to-left override.
fn hostile_path(i: usize) -> String {
    format!("{i:05}\n\u{202e}{}", "x".repeat(4000))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn distinct_values_stay_within_the_series_cap() {
    let app = spawn_app(StoreKind::Memory, &[("web.yaml", WEB)]).await;
    let started = Instant::now();
    for i in 0..3_000 {
        let path = hostile_path(i);
        let route = format!("/api/{i}");
        let response = app.check(request("web", &[&[("path", &path)], &[("route", &route)]])).await;
        assert!(!over(&response));
    }
    let text = app.metrics().await;
    let size = text.len();
    println!("figures: 3,000 requests in {:?}; /metrics {size} bytes", started.elapsed());

    // per-path: one label set per value up to the cap (RESULTS each), then `_other_`.
    let per_path = decision_lines(&text, "per-path:");
    assert_eq!(per_path.len(), (CAP + 1) * RESULTS, "{} lines", per_path.len());
    assert_eq!(decisions(&text, "per-path:_other_", "within_limit"), Some(2_000.0));
    assert_eq!(metric(&text, r#"tollgate_metric_series_dropped_total{domain="web"}"#), Some(2_000.0));
    // Each value is escaped and cut to 64 bytes: 5 digits, 2 escapes (17 bytes), 44 x, the mark.
    let first = format!(r#"per-path:path_00000\\x0a\\u{{202e}}{}…"#, "x".repeat(44));
    assert_eq!(decisions(&text, &first, "within_limit"), Some(1.0), "{}", per_path[0]);
    assert!(!text.contains('\u{202e}'), "no raw control or reordering character in /metrics");
    let counted: f64 = per_path
        .iter()
        .filter(|line| line.contains(r#"result="within_limit""#))
        .filter_map(|line| line.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum();
    assert_eq!(counted, 3_000.0, "every decision counted once");

    // The share_threshold rule: 3,000 paths, one bucket, one label set (the plain rule).
    assert_eq!(decision_lines(&text, "shared").len(), RESULTS);
    assert_eq!(decisions(&text, "shared", "within_limit"), Some(3_000.0));

    let all = text.lines().filter(|line| line.starts_with("tollgate_decisions_total{")).count();
    assert!(all <= (CAP + 4) * RESULTS, "{all} decision series");
    assert!(size < MAX_METRICS_BYTES, "/metrics is {size} bytes");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_removes_the_series_of_the_rules_it_drops() {
    let mut options = Options::new(StoreKind::Memory);
    options.watch_config = false;
    let app = spawn_with(options, &[("web.yaml", WEB)]).await;
    for value in ["/a", "/b"] {
        app.check(request("web", &[&[("path", value)], &[("user", "alice")], &[("route", "/api/x")]])).await;
    }
    let before = app.metrics().await;
    assert_eq!(decision_lines(&before, "per-path:").len(), 2 * RESULTS);
    assert_eq!(decisions(&before, "per-user", "within_limit"), Some(2.0));

    // Drop per-user and shared; per-path stays as it was and keeps its sets.
    let file = app.config_path().join("web.yaml");
    let only_path = "domain: web\ndescriptors:\n  - key: path\n    detailed_metric: true\n    rate_limit: { name: per-path, unit: hour, requests_per_unit: 1000 }\n";
    std::fs::write(&file, only_path).expect("write");
    assert_eq!(app.admin("POST", "/reload").await.status, 200);
    let after = app.metrics().await;
    assert!(decision_lines(&after, "per-user").is_empty(), "{after}");
    assert!(decision_lines(&after, "shared").is_empty(), "{after}");
    assert!(!after.contains(r#"rule="per-user"#), "hits series gone too");
    assert_eq!(decisions(&after, "per-path:path_/a", "within_limit"), Some(1.0), "unchanged rule kept");

    // Drop the detailed rule: its value sets go; the domain's overflow counter stays (it is
    // exported for every configured domain, from startup).
    std::fs::write(
        &file,
        "domain: web\ndescriptors:\n  - key: ip\n    rate_limit: { unit: hour, requests_per_unit: 1 }\n",
    )
    .expect("write");
    assert_eq!(app.admin("POST", "/reload").await.status, 200);
    let last = app.metrics().await;
    assert!(!last.contains("per-path"), "{last}");
    assert!(last.contains(r#"tollgate_metric_series_dropped_total{domain="web"}"#), "{last}");
    assert_eq!(decision_lines(&last, "descriptors[0]").len(), RESULTS, "the new rule's series");
}
