//! The operator's kit in `deploy/`: the Prometheus alert rules pass `promtool check rules`
//! and their unit tests, the Grafana dashboard's queries are valid PromQL, every metric
//! either names is one a running Tollgate on Redis exports (a `# TYPE` line in its
//! `/metrics`), and the scrape config points at `/metrics` on the admin port.
//!
//! promtool comes from Debian's `prometheus` package (`make deps`). Without it the promtool
//! tests say so and pass, except under `CI=true`, where a missing promtool fails them.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value as Json;
use serde_yaml::Value as Yaml;
use tollgate::app::StoreKind;

use crate::support::*;

const DASHBOARD: &str = "deploy/grafana/tollgate.json";
const ALERTS: &str = "deploy/prometheus/alerts.yaml";
const ALERT_TESTS: &str = "deploy/prometheus/alerts_test.yaml";
const SERVICE_MONITOR: &str = "deploy/prometheus/servicemonitor.yaml";
const MANIFESTS: &str = "envoy/istio/tollgate.yaml";

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

fn read(path: &str) -> String {
    std::fs::read_to_string(repo(path)).unwrap_or_else(|e| panic!("read {path}: {e}"))
}

/// The promtool to run (`$PROMTOOL`, else `promtool` on `PATH`). `None` only outside CI:
/// under `CI=true` a missing promtool is a failure, not a skip.
fn promtool() -> Option<PathBuf> {
    let tool = std::env::var_os("PROMTOOL").map_or_else(|| PathBuf::from("promtool"), PathBuf::from);
    let works = Command::new(&tool).arg("--version").output().is_ok_and(|o| o.status.success());
    if works {
        return Some(tool);
    }
    let ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0");
    assert!(!ci, "CI is set and there is no promtool: `make deps` installs it (Debian package prometheus)");
    eprintln!("SKIPPED: no promtool on this machine; `make deps` installs it (apt-get install prometheus)");
    None
}

fn run_promtool(tool: &Path, args: &[&str]) {
    let out = Command::new(tool).args(args).current_dir(repo(".")).output().expect("run promtool");
    assert!(
        out.status.success(),
        "promtool {args:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn alert_rules_pass_promtool_check_and_their_unit_tests() {
    let Some(tool) = promtool() else { return };
    run_promtool(&tool, &["check", "rules", ALERTS]);
    run_promtool(&tool, &["test", "rules", ALERT_TESTS]);
}

/// Every alert in `alerts.yaml` has a case that fires and one that does not.
#[test]
fn every_alert_has_a_firing_and_a_quiet_unit_test() {
    let tests: Yaml = serde_yaml::from_str(&read(ALERT_TESTS)).expect("alerts_test.yaml");
    let mut firing = BTreeSet::new();
    let mut quiet = BTreeSet::new();
    for test in tests["tests"].as_sequence().expect("tests") {
        for case in test["alert_rule_test"].as_sequence().expect("alert_rule_test") {
            let name = case["alertname"].as_str().expect("alertname").to_string();
            let fires = case["exp_alerts"].as_sequence().is_some_and(|a| !a.is_empty());
            if fires { &mut firing } else { &mut quiet }.insert(name);
        }
    }
    for alert in alert_rules().keys() {
        assert!(firing.contains(alert), "no firing case for {alert}");
        assert!(quiet.contains(alert), "no quiet case for {alert}");
    }
}

/// The dashboard's panel queries, with Grafana's variables replaced, are valid PromQL (as
/// recording rules that `promtool check rules` parses).
#[test]
fn dashboard_queries_are_valid_promql() {
    let Some(tool) = promtool() else { return };
    let rules: Vec<Json> = dashboard_exprs()
        .iter()
        .enumerate()
        .map(|(i, expr)| serde_json::json!({ "record": format!("dashboard:query_{i}"), "expr": grafana_to_promql(expr) }))
        .collect();
    assert!(rules.len() >= 15, "{} queries", rules.len());
    let file = serde_json::json!({ "groups": [{ "name": "dashboard", "rules": rules }] });
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("dashboard_rules.yaml");
    std::fs::write(&path, serde_yaml::to_string(&file).expect("yaml")).expect("write rules");
    run_promtool(&tool, &["check", "rules", path.to_str().expect("utf-8 path")]);
}

fn grafana_to_promql(expr: &str) -> String {
    expr.replace("$__rate_interval", "5m")
        .replace("$job", ".*")
        .replace("$instance", ".*")
        .replace("$domain", ".*")
}

/// The `expr` of every panel target of the dashboard.
fn dashboard_exprs() -> Vec<String> {
    let dashboard: Json = serde_json::from_str(&read(DASHBOARD)).expect("dashboard JSON");
    let mut exprs = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().into_iter().flatten() {
            exprs.push(target["expr"].as_str().expect("target expr").to_string());
        }
    }
    exprs
}

/// Every query text the dashboard holds: panel targets and template variable queries.
fn dashboard_queries() -> Vec<String> {
    let dashboard: Json = serde_json::from_str(&read(DASHBOARD)).expect("dashboard JSON");
    let mut queries = dashboard_exprs();
    for variable in dashboard["templating"]["list"].as_array().expect("templating") {
        queries.push(variable["definition"].as_str().expect("variable definition").to_string());
        queries.push(variable["query"]["query"].as_str().expect("variable query").to_string());
    }
    queries
}

/// Alert name → expression.
fn alert_rules() -> BTreeMap<String, String> {
    let alerts: Yaml = serde_yaml::from_str(&read(ALERTS)).expect("alerts.yaml");
    let mut rules = BTreeMap::new();
    for group in alerts["groups"].as_sequence().expect("groups") {
        for rule in group["rules"].as_sequence().expect("rules") {
            let name = rule["alert"].as_str().expect("only alerting rules").to_string();
            rules.insert(name, rule["expr"].as_str().expect("expr").to_string());
        }
    }
    rules
}

/// The series names of the alert unit tests' input.
fn alert_test_series() -> Vec<String> {
    let tests: Yaml = serde_yaml::from_str(&read(ALERT_TESTS)).expect("alerts_test.yaml");
    let mut series = Vec::new();
    for test in tests["tests"].as_sequence().expect("tests") {
        for input in test["input_series"].as_sequence().expect("input_series") {
            series.push(input["series"].as_str().expect("series").to_string());
        }
    }
    series
}

/// The `tollgate_*` names in a query (identifiers, not parts of longer ones).
fn metric_names(query: &str) -> BTreeSet<String> {
    let is_ident = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    let mut names = BTreeSet::new();
    let mut rest = query;
    while let Some(at) = rest.find("tollgate_") {
        let before = rest[..at].chars().next_back();
        let tail = &rest[at..];
        let len = tail.find(|c: char| !is_ident(c)).unwrap_or(tail.len());
        if !before.is_some_and(is_ident) {
            names.insert(tail[..len].to_string());
        }
        rest = &tail[len..];
    }
    names
}

/// `# TYPE` lines of an exposition: family → type.
fn families(exposition: &str) -> BTreeMap<String, String> {
    exposition
        .lines()
        .filter_map(|line| {
            let mut parts = line.strip_prefix("# TYPE ")?.split_whitespace();
            Some((parts.next()?.to_string(), parts.next()?.to_string()))
        })
        .collect()
}

/// Whether a series name used in a query belongs to an exported family of the right type:
/// counters are queried as `<family>_total`, histograms as `<family>_bucket|_sum|_count`.
fn exported(name: &str, families: &BTreeMap<String, String>) -> bool {
    let family_is = |base: &str, kind: &str| families.get(base).is_some_and(|t| t == kind);
    if let Some(base) = name.strip_suffix("_total") {
        if family_is(base, "counter") {
            return true;
        }
    }
    for suffix in ["_bucket", "_sum", "_count"] {
        if name.strip_suffix(suffix).is_some_and(|base| family_is(base, "histogram")) {
            return true;
        }
    }
    families.get(name).is_some_and(|t| t != "counter" && t != "histogram")
}

/// `per-user` for the over-limit cache; `per-ip` carries values in its label (so the
/// domain has a `tollgate_metric_series_dropped_total` series); `local` for the in-memory
/// decisions of a store failure.
const POLICY: &str = "domain: api
failure_mode: local
descriptors:
  - key: user
    rate_limit: { name: per-user, unit: hour, requests_per_unit: 1 }
  - key: ip
    detailed_metric: true
    rate_limit: { name: per-ip, unit: hour, requests_per_unit: 100 }
";

/// Whether the first descriptor was over its limit (its own code: `--shadow-mode` keeps it).
fn first_over(response: &envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse) -> bool {
    !is_ok(&response.statuses[0])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_the_dashboard_and_alerts_use_is_exported() {
    // Shadow mode, so that tollgate_shadow_overrides_total has a series too.
    let options = Options { shadow_mode: true, ..Options::new(StoreKind::Redis) };
    let mut app = spawn_with(options, &[("api.yaml", POLICY)]).await;
    let alice = request("api", &[&[("user", "alice")], &[("ip", "192.0.2.1")]]);
    // Allowed, denied by Redis, then denied by the over-limit cache without a Redis call.
    let mut denied = Vec::new();
    for _ in 0..3 {
        denied.push(first_over(&app.check(alice.clone()).await));
    }
    assert_eq!(denied, [false, true, true]);
    // Redis gone: `failure_mode: local` decides in memory.
    app.redis().stop();
    app.check(request("api", &[&[("user", "bob")]])).await;
    let text = app.metrics().await;
    let families = families(&text);

    let used = used_names();
    assert!(used.len() >= 15, "{used:?}");
    let missing: Vec<_> = used.iter().filter(|(name, _)| !exported(name, &families)).collect();
    assert!(missing.is_empty(), "not exported by Tollgate (name, used in): {missing:?}\n{text}");

    // The new metrics carry what they promise.
    let hits = metric(&text, r#"tollgate_over_limit_cache_hits_total{store="redis"}"#);
    assert_eq!(hits, Some(1.0), "one charge answered by the cache\n{text}");
    let cap = metric(&text, "tollgate_memory_max_keys").expect("tollgate_memory_max_keys");
    assert!(cap >= 100_000.0, "the local limiter's cap, --memory-max-keys 100000: {cap}");
    for bucket in [
        r#"tollgate_request_duration_seconds_bucket{le="0.01"}"#,
        r#"tollgate_request_duration_seconds_bucket{le="0.02"}"#,
        r#"tollgate_store_duration_seconds_bucket{le="0.01",store="redis"}"#,
        r#"tollgate_store_duration_seconds_bucket{le="0.02",store="redis"}"#,
    ] {
        assert!(metric(&text, bucket).is_some(), "no {bucket}\n{text}");
    }

    // A reload that fails leaves the last success behind the last attempt (the alert).
    let success = "tollgate_config_last_success_timestamp_seconds";
    let attempt = "tollgate_config_last_attempt_timestamp_seconds";
    let loaded = metric(&text, success).expect(success);
    assert_eq!(metric(&text, attempt), Some(loaded), "the startup load is the last attempt");
    std::fs::write(app.config_path().join("api.yaml"), "domain: api\ndescriptors: 7\n").expect("write");
    assert_eq!(app.admin("POST", "/reload").await.status, 422);
    let text = app.metrics().await;
    assert_eq!(metric(&text, success), Some(loaded));
    assert!(metric(&text, attempt).is_some_and(|t| t > loaded), "{text}");
}

/// Whether `exposition` has a sample of the series `name` (a line `name{...} v` or `name v`).
fn has_sample(exposition: &str, name: &str) -> bool {
    exposition.lines().any(|line| {
        line.strip_prefix(name).is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
    })
}

/// Every name the dashboard, the alerts and their tests use (series names) → where.
fn used_names() -> BTreeMap<String, &'static str> {
    let mut used: BTreeMap<String, &str> = BTreeMap::new();
    for query in dashboard_queries() {
        used.extend(metric_names(&query).into_iter().map(|n| (n, DASHBOARD)));
    }
    for expr in alert_rules().values() {
        used.extend(metric_names(expr).into_iter().map(|n| (n, ALERTS)));
    }
    for series in alert_test_series() {
        used.extend(metric_names(&series).into_iter().map(|n| (n, ALERT_TESTS)));
    }
    used
}

/// From the first scrape, before any request, every series name the dashboard and the
/// alerts use has a sample (0 where nothing happened yet): panels show 0, not "no data",
/// and `absent()` alerts hold. Production flags: Redis, no shadow mode, no event forced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_the_dashboard_and_alerts_use_has_a_series_from_startup() {
    let app = spawn_with(Options::new(StoreKind::Redis), &[("api.yaml", POLICY)]).await;
    let text = app.metrics().await;
    let used = used_names();
    assert!(used.len() >= 15, "{used:?}");
    let missing: Vec<_> = used.iter().filter(|(name, _)| !has_sample(&text, name)).collect();
    assert!(missing.is_empty(), "no series at startup (name, used in): {missing:?}\n{text}");
    for name in [
        r#"tollgate_failure_local_decisions_total{domain="api"} 0"#,
        r#"tollgate_metric_series_dropped_total{domain="api"} 0"#,
        r#"tollgate_shadow_overrides_total{domain="api"} 0"#,
    ] {
        assert!(text.lines().any(|l| l == name), "no `{name}`\n{text}");
    }
}

/// The Kubernetes side: the pod template's `prometheus.io/*` annotations and the
/// ServiceMonitor example both lead to `/metrics` on the admin port.
#[test]
fn the_manifests_point_prometheus_at_metrics_on_the_admin_port() {
    let manifests: Vec<Yaml> = serde_yaml::Deserializer::from_str(&read(MANIFESTS))
        .map(|doc| serde::Deserialize::deserialize(doc).expect("manifest YAML"))
        .collect();
    let of_kind = |kind: &str| {
        manifests.iter().find(|m| m["kind"] == kind && m["metadata"]["name"] == "tollgate").expect(kind)
    };
    let deployment = of_kind("Deployment");
    let service = of_kind("Service");
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    let admin_port = container["ports"]
        .as_sequence()
        .expect("container ports")
        .iter()
        .find(|p| p["name"] == "http-admin")
        .expect("a container port named http-admin")["containerPort"]
        .as_u64()
        .expect("port number");
    let annotations = &deployment["spec"]["template"]["metadata"]["annotations"];
    assert_eq!(annotations["prometheus.io/scrape"], "true");
    assert_eq!(annotations["prometheus.io/port"].as_str(), Some(admin_port.to_string().as_str()));
    assert_eq!(annotations["prometheus.io/path"], "/metrics");

    let monitor: Yaml = serde_yaml::from_str(&read(SERVICE_MONITOR)).expect("ServiceMonitor YAML");
    assert_eq!(monitor["kind"], "ServiceMonitor");
    let selector = monitor["spec"]["selector"]["matchLabels"].as_mapping().expect("matchLabels");
    for (key, value) in selector {
        assert_eq!(&service["metadata"]["labels"][key], value, "the Service carries {key:?}");
    }
    let namespaces = monitor["spec"]["namespaceSelector"]["matchNames"].as_sequence().expect("matchNames");
    assert!(namespaces.contains(&service["metadata"]["namespace"]), "{namespaces:?}");
    let endpoint = &monitor["spec"]["endpoints"][0];
    assert_eq!(endpoint["path"], "/metrics");
    let port = service["spec"]["ports"]
        .as_sequence()
        .expect("service ports")
        .iter()
        .find(|p| p["name"] == endpoint["port"])
        .unwrap_or_else(|| panic!("the Service has no port named {:?}", endpoint["port"]));
    assert_eq!(port["port"].as_u64(), Some(admin_port), "the ServiceMonitor scrapes the admin port");
}
