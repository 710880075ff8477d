use std::sync::Arc;

use serde_json::json;

use super::page::{escape_html, render, utc};
use super::*;
use crate::store::MemoryStore;
use crate::telemetry::metrics::history::Class;

const API: &str = r#"
domain: api
failure_mode: closed
descriptors:
  - key: user
    rate_limit: { name: per-user, unit: minute, requests_per_unit: 100 }
  - key: plan
    rate_limit: { unit: second, requests_per_unit: 10, algorithm: fixed_window }
  - key: health
    rate_limit: { unlimited: true }
"#;

// A domain and a rule name that must come out escaped on the page.
const ODD: &str = r#"
domain: "<b>odd&"
descriptors:
  - key: k
    rate_limit: { name: "<script>x</script>", unit: hour, requests_per_unit: 1 }
"#;

struct Fixture {
    live: Live,
    store: Store,
    metrics: Arc<Metrics>,
    _dir: tempfile::TempDir,
}

fn fixture(files: &[(&str, &str)]) -> Fixture {
    let dir = tempfile::tempdir().expect("tempdir");
    for (name, yaml) in files {
        std::fs::write(dir.path().join(name), yaml).expect("write policy");
    }
    let metrics = Arc::new(Metrics::new());
    let live = Live::load_initial(dir.path(), metrics.clone()).expect("valid config");
    Fixture { live, store: Store::Memory(MemoryStore::new(100)), metrics, _dir: dir }
}

impl Fixture {
    /// Records `n` decisions of `class` on rule `index` of `domain`, in the current second.
    fn record(&self, domain: &str, index: usize, class: Class, n: usize) {
        let active = self.live.load();
        let ring = &active.history.domain(domain).expect("domain")[index];
        for _ in 0..n {
            ring.record(self.metrics.history().now(), class);
        }
    }

    /// The view one second on, so that the current second is complete.
    fn status(&self) -> Status {
        Status::gather_at(
            &self.live,
            &self.store,
            &self.metrics,
            self.metrics.history().now() + 1,
            HotBuckets::Shown,
        )
    }
}

#[test]
fn the_json_has_the_contract_fields() {
    let fixture = fixture(&[("api.yaml", API)]);
    fixture.record("api", 0, Class::Ok, 120);
    fixture.record("api", 0, Class::OverLimit, 6);
    fixture.record("api", 1, Class::Failure, 3);
    fixture.metrics.observe_store("memory", "ok", 0.000_100);
    let value = serde_json::to_value(fixture.status()).expect("serialises");

    assert_eq!(value["version"], env!("CARGO_PKG_VERSION"));
    let config = &value["config"];
    assert_eq!(config["version"], json!(fixture.live.load().snapshot.version));
    assert!(config["loaded_at"].as_u64().is_some_and(|t| t > 1_600_000_000), "{config}");
    assert_eq!(config["last_error"], json!(null));
    let store = &value["store"];
    assert_eq!(store["kind"], "memory");
    assert_eq!(store["healthy"], true);
    assert_eq!(store["breaker"], json!(null));
    assert_eq!(store["p99_ms"], json!(0.112));

    let domain = &value["domains"][0];
    assert_eq!(domain["name"], "api");
    assert_eq!(domain["failure_mode"], "closed");
    assert_eq!(domain["consistency"], "exact");
    let rules = domain["rules"].as_array().expect("rules");
    assert_eq!(rules.len(), 3);
    let user = &rules[0];
    assert_eq!(user["rule"], "per-user");
    assert_eq!(user["limit"], 100);
    assert_eq!(user["unit"], "minute");
    assert_eq!(user["algorithm"], "gcra");
    assert_eq!(user["per_second"], json!({"ok": 2.0, "over_limit": 0.1, "failure": 0.0}));
    assert!(user.get("limits").is_none(), "one limit: no `limits` array");

    let plan = &rules[1];
    assert_eq!(plan["rule"], "descriptors[1]", "an unnamed rule shows its path");
    assert_eq!((plan["limit"].clone(), plan["unit"].clone()), (json!(10), json!("second")));
    assert_eq!(plan["algorithm"], "fixed_window");
    assert_eq!(plan["per_second"]["failure"], 0.05);

    let health = &rules[2];
    assert_eq!((health["unlimited"].clone(), health["limit"].clone()), (json!(true), json!(null)));
    assert_eq!(health["per_second"], json!({"ok": 0.0, "over_limit": 0.0, "failure": 0.0}));
    assert_eq!(value["hot_keys_hidden"], false);
}

#[test]
fn a_view_without_hot_buckets_says_so() {
    let fixture = fixture(&[("api.yaml", API)]);
    let now = fixture.metrics.history().now() + 1;
    let hidden = Status::gather_at(&fixture.live, &fixture.store, &fixture.metrics, now, HotBuckets::Hidden);
    assert!(hidden.hot_keys_hidden && hidden.domains.iter().all(|d| d.hot_keys.is_empty()));
    assert_eq!(hidden.domains[0].rules.len(), 3, "the rules still show");
    let page = render(&hidden);
    assert!(page.contains("<h2>Hot keys</h2>") && page.contains("need the admin token"), "{page}");
    assert!(!render(&fixture.status()).contains("need the admin token"));
}

#[test]
fn a_failed_reload_shows_until_one_succeeds() {
    let fixture = fixture(&[("api.yaml", API)]);
    let path = fixture.live.path().join("api.yaml");
    std::fs::write(&path, "domain: api\ndescriptors: [ {key: user, rate_limit: {unit: fortnight}} ]\n")
        .expect("write");
    assert!(fixture.live.reload().is_err());
    let status = fixture.status();
    let error = status.config.last_error.expect("the reload error");
    assert!(error.contains("fortnight"), "{error}");
    assert!(status.config.last_error_at.is_some());
    assert!(render(&fixture.status()).contains("fortnight"));

    std::fs::write(&path, API).expect("write");
    fixture.live.reload().expect("valid again");
    assert_eq!(fixture.status().config.last_error, None);
}

#[test]
fn the_page_escapes_config_strings_and_shows_rules_and_rates() {
    let fixture = fixture(&[("api.yaml", API), ("odd.yaml", ODD)]);
    fixture.record("api", 0, Class::Ok, 60);
    fixture.record("<b>odd&", 0, Class::OverLimit, 60);
    let html = render(&fixture.status());
    assert!(html.starts_with("<!DOCTYPE html>"));
    assert!(!html.contains("<script"), "no script, and no injected one");
    assert!(html.contains("&lt;script&gt;x&lt;/script&gt;"));
    assert!(html.contains("&lt;b&gt;odd&amp;") && !html.contains("<b>odd"));
    assert!(html.contains("<tr data-rule=\"per-user\">"));
    assert!(html.contains("<td class=\"n ok\">1.00</td>"), "{html}");
    assert!(html.contains("<td class=\"n over\">1.00</td>"), "{html}");
    assert!(html.contains("<td>100 per minute</td><td>gcra</td>"), "{html}");
    assert!(html.contains("<svg") && html.contains("<polyline"), "a chart per rule with traffic");
    assert!(!html.contains("http://") && !html.contains("https://"), "no external asset");
}

#[test]
fn html_escaping_covers_every_special_character() {
    assert_eq!(
        escape_html(r#"<a href="x">'&'</a>"#),
        "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;"
    );
    assert_eq!(escape_html("plain"), "plain");
}

#[test]
fn unix_times_print_as_utc_dates() {
    assert_eq!(utc(0), "1970-01-01 00:00:00 UTC");
    assert_eq!(utc(951_782_400), "2000-02-29 00:00:00 UTC");
    assert_eq!(utc(1_709_251_199), "2024-02-29 23:59:59 UTC");
    assert_eq!(utc(4_102_444_800), "2100-01-01 00:00:00 UTC");
}

#[test]
fn a_rule_with_several_limits_shows_the_first_and_lists_all() {
    let fixture = fixture(&[("api.yaml", API)]);
    let mut rule = fixture.live.load().snapshot.domain("api").expect("api").rules[1].clone();
    let RuleLimit::Limited(limits) = &rule.limit else { panic!("limited") };
    let burst = Limit { name: Some("burst".into()), ..limits[0].clone() };
    let daily = Limit {
        name: Some("daily".into()),
        params: crate::config::model::params(
            crate::algorithm::Algorithm::Gcra,
            5000,
            crate::config::Unit::Day,
            None,
        ),
        unit: crate::config::Unit::Day,
        multiplier: 2,
        rollout: crate::config::rule::Rollout::FULL,
        response: None,
        overdraft: false,
        calendar: None,
    };
    rule.limit = RuleLimit::Limited(vec![burst, daily]);
    let status = rule_status(&rule, Minute::empty());
    let value = serde_json::to_value(&status).expect("serialises");
    assert_eq!((value["limit"].clone(), value["unit"].clone()), (json!(10), json!("second")));
    assert_eq!(value["algorithm"], "fixed_window");
    assert_eq!(value["limits"][0]["label"], "descriptors[1]/burst");
    assert_eq!(value["limits"][1]["label"], "descriptors[1]/daily");
    assert_eq!(value["limits"][1]["limit"], 5000);
    assert_eq!(value["limits"][1]["unit_multiplier"], 2);
    let mut page_status = fixture.status();
    page_status.domains[0].rules[1] = status;
    let html = render(&page_status);
    assert!(html.contains("burst: 10 per second<br>daily: 5000 per 2 days"), "{html}");
    assert!(html.contains("<td>fixed_window<br>gcra</td>"), "{html}");
}

#[test]
fn each_domain_shows_its_consistency() {
    let edge = "domain: edge\nconsistency: approximate\ndescriptors:\n  - key: ip\n    rate_limit: { unit: minute, requests_per_unit: 1000, algorithm: sliding_window }\n";
    let fixture = fixture(&[("api.yaml", API), ("edge.yaml", edge)]);
    let status = fixture.status();
    let modes: Vec<_> = status.domains.iter().map(|d| (d.name.as_str(), d.consistency)).collect();
    assert_eq!(modes, [("api", "exact"), ("edge", "approximate")]);
    let value = serde_json::to_value(&status).expect("serialises");
    assert_eq!(value["domains"][1]["consistency"], "approximate");
    let html = render(&status);
    assert!(html.contains("charge <b>per_descriptor</b>, consistency <b>approximate</b>"), "{html}");
    assert!(
        html.contains("failure mode <b>closed</b>, charge <b>per_descriptor</b>, consistency <b>exact</b>"),
        "{html}"
    );
}

#[test]
fn a_calendar_limit_shows_its_period_and_next_reset_in_json_and_page() {
    let billing = "domain: billing\ndescriptors:\n  - key: plan\n    rate_limit:\n      unit: month\n      requests_per_unit: 1000\n      calendar: {time_zone: Europe/Berlin}\n";
    let fixture = fixture(&[("billing.yaml", billing)]);
    let status = fixture.status();
    let json = serde_json::to_value(&status).expect("json");
    let rule = &json["domains"][0]["rules"][0];
    assert_eq!((rule["unit"].as_str(), rule["algorithm"].as_str()), (Some("month"), Some("fixed_window")));
    assert_eq!(rule["calendar"]["period"], "calendar month, Europe/Berlin");
    assert!(rule["calendar"]["next_reset"].as_str().is_some_and(|t| t.contains("-01T00:00:00+0")), "{rule}");
    let html = render(&status);
    assert!(
        html.contains(
            "1000 per month <span class=\"muted calendar\">(calendar month, Europe/Berlin; next reset "
        ),
        "{html}"
    );
}
