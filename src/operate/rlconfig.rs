//! The `/rlconfig` view of the serving config: text for people, JSON for tools.
//!
//! Every limit shows its name (a `rate_limits` entry's), window and effective algorithm
//! (`--default-algorithm` already applied), and each domain its charge mode, hash tag,
//! consistency (`exact` or `approximate`), file (`file`, the first) and, merged or not, all
//! of them (`files`).

use std::fmt::Write as _;
use std::time::UNIX_EPOCH;

use serde_json::{json, Value};

use crate::algorithm::Algorithm;
use crate::config::{Limit, Rule, RuleLimit, Snapshot};
use crate::store::redis::CertInfo;

/// The store's state as shown to operators.
#[derive(Debug, Clone)]
pub struct StoreState {
    pub kind: &'static str,
    pub healthy: bool,
    /// Redacted URL (redis) or key count (memory).
    pub detail: String,
    /// A Redis store: the client certificate it presents (`Some(None)`: none). Memory: `None`.
    pub client_cert: Option<Option<CertInfo>>,
}

/// Whole days from `now` (Unix seconds) until `not_after` (negative once past).
pub fn days_left(not_after: i64, now: i64) -> i64 {
    not_after.saturating_sub(now).div_euclid(86_400)
}

fn now_s() -> i64 {
    std::time::SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(0))
}

/// `on (subject …, expires …, in N days)` or `off`.
fn describe_cert(cert: Option<&CertInfo>) -> String {
    match cert {
        Some(c) => {
            format!("on ({}, expires {}, in {} days)", c.subject, c.expires, days_left(c.not_after, now_s()))
        }
        None => "off".to_string(),
    }
}

fn loaded_at(snapshot: &Snapshot) -> u64 {
    snapshot.loaded_at.duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

fn sorted_domains(snapshot: &Snapshot) -> Vec<&crate::config::Domain> {
    let mut domains: Vec<_> = snapshot.domains.values().collect();
    domains.sort_by(|a, b| a.name.cmp(&b.name));
    domains
}

/// Every limit of the rule, `; `-separated: `[name: ]20 per second (gcra)`, with a window
/// of several units as `7 per 5 minutes`, and a gcra burst when it differs.
fn describe_limit(rule: &Rule) -> String {
    match &rule.limit {
        RuleLimit::Unlimited => "unlimited".to_string(),
        RuleLimit::Limited(limits) => limits.iter().map(describe_one).collect::<Vec<_>>().join("; "),
    }
}

fn describe_one(limit: &Limit) -> String {
    let params = limit.params;
    let mut s = String::new();
    if let Some(name) = &limit.name {
        let _ = write!(s, "{name}: ");
    }
    let _ = write!(s, "{} per {} ({})", params.limit, limit.period_text(), params.algorithm.as_str());
    if let Some(view) = limit.calendar_view(crate::store::memory::now_us()) {
        let _ = write!(s, " next reset {}", view.next_reset);
    }
    if params.algorithm == Algorithm::Gcra && params.burst != params.limit {
        let _ = write!(s, " burst {}", params.burst);
    }
    if limit.rollout.is_partial() {
        let _ = write!(s, " rollout {}", limit.rollout.share());
    }
    if let Some(penalty) = limit.penalty_text() {
        let _ = write!(s, " penalty {penalty}");
    }
    if limit.response.is_some() {
        s.push_str(" response");
    }
    if limit.overdraft {
        s.push_str(" overdraft");
    }
    s
}

fn flags(rule: &Rule) -> Vec<&'static str> {
    let mut flags = vec![];
    for (on, name) in [
        (rule.shadow_mode, "shadow_mode"),
        (rule.quota_mode, "quota_mode"),
        (rule.detailed_metric, "detailed_metric"),
        (rule.value_to_metric, "value_to_metric"),
        (rule.lease, "lease"),
    ] {
        if on {
            flags.push(name);
        }
    }
    flags
}

/// Human-readable listing.
pub fn text(snapshot: &Snapshot, store: &StoreState) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "version: {}", snapshot.version);
    let _ = writeln!(out, "loaded_at: {} (unix seconds)", loaded_at(snapshot));
    let _ = writeln!(out, "default_algorithm: {}", snapshot.default_algorithm.as_str());
    let health = if store.healthy { "up" } else { "down" };
    let _ = writeln!(out, "store: {} ({health}) {}", store.kind, store.detail);
    if let Some(cert) = &store.client_cert {
        let _ = writeln!(out, "redis_client_cert: {}", describe_cert(cert.as_ref()));
    }
    for domain in sorted_domains(snapshot) {
        let files: Vec<String> = domain.files.iter().map(|file| file.display().to_string()).collect();
        let _ = writeln!(
            out,
            "domain {} (failure_mode {}, charge {}, hash_tag {}, consistency {}, {})",
            domain.name,
            domain.failure_mode.as_str(),
            domain.charge.as_str(),
            domain.hash_tag.as_str(),
            domain.consistency.as_str(),
            files.join(", ")
        );
        for rule in &domain.rules {
            let path: Vec<String> = rule
                .levels
                .iter()
                .map(|l| match &l.shared_pattern {
                    Some(p) => format!("{}={} (shared)", l.key, p),
                    None => l.key.clone(),
                })
                .collect();
            let _ = write!(out, "  {} [{}]: {}", rule.label(), path.join(" > "), describe_limit(rule));
            let f = flags(rule);
            if !f.is_empty() {
                let _ = write!(out, " {}", f.join(" "));
            }
            if !rule.replaces.is_empty() {
                let _ = write!(out, " replaces {}", rule.replaces.join(","));
            }
            out.push('\n');
        }
    }
    out
}

/// Machine-readable listing.
pub fn json(snapshot: &Snapshot, store: &StoreState) -> Value {
    let domains: Vec<Value> = sorted_domains(snapshot)
        .into_iter()
        .map(|domain| {
            let rules: Vec<Value> = domain.rules.iter().map(rule_json).collect();
            json!({
                "domain": domain.name,
                "failure_mode": domain.failure_mode.as_str(),
                "charge": domain.charge.as_str(),
                "hash_tag": domain.hash_tag.as_str(),
                "consistency": domain.consistency.as_str(),
                "file": domain.file.display().to_string(),
                "files": domain.files.iter().map(|file| file.display().to_string()).collect::<Vec<_>>(),
                "rules": rules,
            })
        })
        .collect();
    json!({
        "version": snapshot.version,
        "loaded_at": loaded_at(snapshot),
        "default_algorithm": snapshot.default_algorithm.as_str(),
        "store": store_json(store),
        "domains": domains,
    })
}

fn store_json(store: &StoreState) -> Value {
    let mut out = json!({ "kind": store.kind, "healthy": store.healthy, "detail": store.detail });
    let Some(cert) = &store.client_cert else { return out };
    out["redis_client_cert"] = json!(if cert.is_some() { "on" } else { "off" });
    if let Some(cert) = cert {
        out["redis_client_cert_subject"] = json!(cert.subject);
        out["redis_client_cert_not_after"] = json!(cert.not_after);
        out["redis_client_cert_days_left"] = json!(days_left(cert.not_after, now_s()));
    }
    out
}

fn rule_json(rule: &Rule) -> Value {
    // The first limit's numbers at the top level (as before `rate_limits`), every limit in
    // `limits`.
    let (limit, unit, algorithm, burst) = match rule.limits().first() {
        None => (Value::Null, Value::Null, Value::Null, Value::Null),
        Some(first) => {
            let p = first.params;
            (json!(p.limit), json!(first.unit.as_str()), json!(p.algorithm.as_str()), json!(p.burst))
        }
    };
    let limits: Vec<Value> = rule
        .limits()
        .iter()
        .map(|l| {
            json!({
                "name": l.name,
                "requests_per_unit": l.params.limit,
                "unit": l.unit.as_str(),
                "unit_multiplier": l.multiplier,
                "window_seconds": l.window_seconds(),
                "algorithm": l.params.algorithm.as_str(),
                "burst": l.params.burst,
                "penalty_seconds": l.penalty_seconds(),
                "period": l.period_text(),
                "calendar": l.calendar_view(crate::store::memory::now_us()),
            })
        })
        .collect();
    json!({
        "name": rule.name,
        "path": rule.path,
        "levels": rule.levels.iter().map(|l| json!({"key": l.key, "shared_pattern": l.shared_pattern})).collect::<Vec<_>>(),
        "unlimited": matches!(rule.limit, RuleLimit::Unlimited),
        "requests_per_unit": limit,
        "unit": unit,
        "algorithm": algorithm,
        "burst": burst,
        "limits": limits,
        "flags": flags(rule),
        "replaces": rule.replaces,
        "metadata": rule.metadata.iter().map(|(k, v)| (k.clone(), json!(v))).collect::<serde_json::Map<_, _>>(),
    })
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::config::compile_sources;

    const POLICY: &str = r#"domain: api
charge: all_or_nothing
descriptors:
  - key: api_key
    rate_limits:
      - { name: burst, unit: second, requests_per_unit: 20 }
      - { name: five, unit: minute, unit_multiplier: 5, requests_per_unit: 7, algorithm: fixed_window }
  - key: user
    rate_limit: { name: per-user, unit: second, unit_multiplier: 30, requests_per_unit: 2, burst: 3 }
"#;

    fn snapshot() -> Snapshot {
        compile_sources(&[(PathBuf::from("api.yaml"), POLICY.to_owned())]).expect("valid policy")
    }

    fn store() -> StoreState {
        StoreState { kind: "memory", healthy: true, detail: String::new(), client_cert: None }
    }

    #[test]
    fn text_and_json_show_a_calendar_period_and_its_next_reset() {
        let policy = "domain: billing\ndescriptors:\n  - key: plan\n    rate_limit: {unit: week, requests_per_unit: 9, calendar: {}}\n";
        let snapshot =
            compile_sources(&[(PathBuf::from("b.yaml"), policy.to_owned())]).expect("valid policy");
        let text = text(&snapshot, &store());
        assert!(text.contains("9 per calendar week, UTC (fixed_window) next reset 20"), "{text}");
        let json = json(&snapshot, &store());
        let limit = &json["domains"][0]["rules"][0]["limits"][0];
        assert_eq!(
            (limit["unit"].as_str(), limit["period"].as_str()),
            (Some("week"), Some("calendar week, UTC"))
        );
        assert_eq!(limit["calendar"]["time_zone"], "UTC");
        assert!(limit["calendar"]["next_reset"].as_str().is_some_and(|t| t.ends_with("T00:00:00+00:00")));
    }

    #[test]
    fn text_shows_every_limit_its_window_and_the_domain_modes() {
        let text = text(&snapshot(), &store());
        for expected in [
            "domain api (failure_mode open, charge all_or_nothing, hash_tag descriptor, consistency exact, api.yaml)",
            "descriptors[0] [api_key]: burst: 20 per second (gcra); five: 7 per 5 minutes (fixed_window)",
            "per-user [user]: 2 per 30 seconds (gcra) burst 3",
        ] {
            assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
        }
    }

    #[test]
    fn json_adds_the_domain_modes_and_each_limit_keeping_the_old_fields() {
        let json = json(&snapshot(), &store());
        let domain = &json["domains"][0];
        assert_eq!(
            (domain["charge"].as_str(), domain["hash_tag"].as_str()),
            (Some("all_or_nothing"), Some("descriptor"))
        );
        assert_eq!(domain["failure_mode"], "open");
        assert_eq!(domain["consistency"], "exact");
        let several = &domain["rules"][0];
        assert_eq!(several["name"], Value::Null);
        assert_eq!(
            (several["requests_per_unit"].as_u64(), several["unit"].as_str()),
            (Some(20), Some("second"))
        );
        let five = &several["limits"][1];
        assert_eq!(five["name"], "five");
        assert_eq!(five["unit"], "minute");
        assert_eq!(five["unit_multiplier"], 5);
        assert_eq!(five["window_seconds"], 300);
        assert_eq!(five["algorithm"], "fixed_window");
        let single = &domain["rules"][1]["limits"][0];
        assert_eq!((single["name"].clone(), single["window_seconds"].as_u64()), (Value::Null, Some(30)));
    }

    #[test]
    fn text_and_json_show_an_approximate_domain() {
        let yaml = "domain: edge\nconsistency: approximate\ndescriptors:\n  - key: ip\n    rate_limit: { unit: minute, requests_per_unit: 1000, algorithm: sliding_window }\n";
        let snapshot =
            compile_sources(&[(PathBuf::from("edge.yaml"), yaml.to_owned())]).expect("valid policy");
        let text = text(&snapshot, &store());
        assert!(
            text.contains("domain edge (failure_mode open, charge per_descriptor, hash_tag descriptor, consistency approximate, edge.yaml)"),
            "{text}"
        );
        assert_eq!(json(&snapshot, &store())["domains"][0]["consistency"], "approximate");
    }
}
