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
use crate::config::{ChargeMode, Consistency, Domain};
use crate::config::{Limit, Rule, RuleLimit, Snapshot};
use crate::store::redis::plain::serves;
use crate::store::redis::{CertInfo, Windows};

/// The store's state as shown to operators.
#[derive(Debug, Clone)]
pub struct StoreState {
    pub kind: &'static str,
    pub healthy: bool,
    /// Redacted URL (redis) or key count (memory).
    pub detail: String,
    /// A Redis store: the client certificate it presents (`Some(None)`: none). Memory: `None`.
    pub client_cert: Option<Option<CertInfo>>,
    /// A Redis store: which path decides window consumes (`--redis-windows`). Memory: `None`.
    pub windows: Option<Windows>,
}

/// Which path decides the consumes of `rule` of `domain` on a Redis store deciding window
/// consumes by `windows`: `plain` for a rule of one fixed (not calendar) or sliding window
/// without penalty or overdraft in an exact domain whose descriptors are charged each on
/// their own (`store::redis::plain`), else `lua`; `None` on the memory store. Its peeks and
/// refunds are scripts either way.
pub fn windows_path(domain: &Domain, rule: &Rule, windows: Option<Windows>) -> Option<&'static str> {
    let windows = windows?;
    let plain = windows == Windows::Plain
        && domain.consistency == Consistency::Exact
        && domain.charge == ChargeMode::PerDescriptor
        && matches!(rule.limits(), [one] if serves(&one.params) && one.calendar.is_none() && !one.overdraft);
    Some(if plain { Windows::Plain.as_str() } else { Windows::Lua.as_str() })
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
    if let Some(windows) = store.windows {
        let _ = writeln!(out, "redis_windows: {}", windows.as_str());
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
            if let Some(path) = windows_path(domain, rule, store.windows) {
                let _ = write!(out, " path {path}");
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
            let rules: Vec<Value> = domain
                .rules
                .iter()
                .map(|rule| {
                    let mut json = rule_json(rule);
                    json["redis_path"] = json!(windows_path(domain, rule, store.windows));
                    json
                })
                .collect();
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
    if let Some(windows) = store.windows {
        out["redis_windows"] = json!(windows.as_str());
    }
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
mod tests;
