//! One table per domain: a row per rule with its limits, algorithm, rates and last-minute
//! chart.
//!
//! Part of `page`. Pure.

use std::fmt::Write as _;

use super::chart::sparkline;
use super::format::escape_html;
use crate::config::rule::PeriodView;
use crate::operate::status::{DomainStatus, RuleStatus};

pub(super) fn domain_table(out: &mut String, domain: &DomainStatus) {
    let name = escape_html(&domain.name);
    let _ = write!(
        out,
        "<section class=\"domain\" data-domain=\"{name}\"><h2>Domain <code>{name}</code></h2>\
         <p class=\"muted\">failure mode <b>{}</b>, charge <b>{}</b>, consistency <b>{}</b></p>\n\
         <table><thead><tr><th>Rule</th><th>Limit</th><th>Algorithm</th><th>OK/s</th>\
         <th>Over limit/s</th><th>Failure/s</th><th>Last minute</th></tr></thead><tbody>\n",
        domain.failure_mode, domain.charge, domain.consistency
    );
    for rule in &domain.rules {
        rule_row(out, rule);
    }
    if domain.rules.is_empty() {
        out.push_str("<tr><td colspan=\"7\" class=\"muted\">no rule</td></tr>\n");
    }
    out.push_str("</tbody></table></section>\n");
}

fn rule_row(out: &mut String, rule: &RuleStatus) {
    let label = escape_html(&rule.rule);
    let shadow = if rule.shadow_mode { " <span class=\"muted\">(shadow)</span>" } else { "" };
    let rates = rule.per_second;
    let _ = writeln!(
        out,
        "<tr data-rule=\"{label}\"><td class=\"rule\"><code>{label}</code>{shadow}</td><td>{}</td><td>{}</td>\
         <td class=\"n ok\">{:.2}</td><td class=\"n over\">{:.2}</td><td class=\"n fail\">{:.2}</td><td>{}</td></tr>",
        limit_text(rule),
        algorithm_text(rule),
        rates.ok,
        rates.over_limit,
        rates.failure,
        sparkline(&rule.minute)
    );
}

/// "100 per minute", "5 per 30 seconds"; every limit of a rule with several, with names.
fn limit_text(rule: &RuleStatus) -> String {
    if rule.unlimited {
        return "unlimited".to_string();
    }
    let one = |limit: u64, unit: &str, multiplier: u64, rollout: f64, penalty: u64| {
        let mut window = match multiplier {
            1 => format!("{limit} per {unit}"),
            n => format!("{limit} per {n} {unit}s"),
        };
        if rollout < 1.0 {
            // The share enforced: a staged rule, shown as such.
            let percent = (rollout * 1_000_000.0).round() / 10_000.0;
            window.push_str(&format!(" <span class=\"muted rollout\">(rollout {percent}%)</span>"));
        }
        if penalty > 0 {
            window.push_str(&format!(" <span class=\"muted penalty\">(penalty {penalty} s)</span>"));
        }
        window
    };
    if rule.limits.is_empty() {
        return match (rule.limit, rule.unit, rule.unit_multiplier) {
            (Some(limit), Some(unit), multiplier) => {
                let window = one(
                    limit,
                    unit,
                    multiplier.unwrap_or(1),
                    rule.rollout.unwrap_or(1.0),
                    rule.penalty_seconds.unwrap_or(0),
                );
                window + &calendar_text(rule.calendar.as_ref())
            }
            _ => String::new(),
        };
    }
    rule.limits
        .iter()
        .map(|l| {
            let name = l.name.as_deref().map(|n| format!("{}: ", escape_html(n))).unwrap_or_default();
            let window = one(l.limit, l.unit, l.unit_multiplier, l.rollout, l.penalty_seconds);
            format!("{name}{window}{}", calendar_text(l.calendar.as_ref()))
        })
        .collect::<Vec<_>>()
        .join("<br>")
}

/// A calendar limit's period and next reset, after its window (nothing for other limits).
fn calendar_text(view: Option<&PeriodView>) -> String {
    match view {
        Some(v) => format!(
            " <span class=\"muted calendar\">({}; next reset {})</span>",
            escape_html(&v.period),
            escape_html(&v.next_reset)
        ),
        None => String::new(),
    }
}

/// The algorithm of each limit, then — on a Redis store — the path its consumes take
/// (`lua` or `plain`, `--redis-windows`).
fn algorithm_text(rule: &RuleStatus) -> String {
    let algorithms = if rule.limits.is_empty() {
        rule.algorithm.unwrap_or("").to_string()
    } else {
        rule.limits.iter().map(|l| l.algorithm).collect::<Vec<_>>().join("<br>")
    };
    match rule.redis_path {
        Some(path) if !algorithms.is_empty() => format!("{algorithms} · {path}"),
        _ => algorithms,
    }
}
