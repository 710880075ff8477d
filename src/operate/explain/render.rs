//! The text of `tollgate explain`: an `Explanation` rendered for people, one descriptor at a
//! time — each entry's choice, why the walk stopped, the rule with its numbers and flags,
//! `replaces` across the request, the bucket key, and in an approximate domain how its
//! buckets are decided. Formatting only: every decision was made by `explain`.

use std::fmt::{self, Write as _};

use crate::algorithm::Algorithm;
use crate::config::{ChargeMode, Consistency, HashTag, Rule, RuleLimit};
use crate::telemetry::escape::escape;

use super::{Applied, DescriptorReport, Explanation, How, Verdict};

impl fmt::Display for Explanation<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Some(domain) = self.domain else {
            writeln!(f, "domain {:?} is not configured (config version {})", self.domain_name, self.version)?;
            writeln!(f, "configured domains: {}", self.known_domains.join(", "))?;
            return writeln!(f, "→ every descriptor is answered OK and nothing is charged");
        };
        let files: Vec<String> = domain.files.iter().map(|file| file.display().to_string()).collect();
        // The defaults go unsaid: only a domain that changes them says so.
        let mut modes = String::new();
        if domain.charge != ChargeMode::PerDescriptor {
            modes.push_str(&format!(", charge {}", domain.charge.as_str()));
        }
        if domain.hash_tag != HashTag::Descriptor {
            modes.push_str(&format!(", hash_tag {}", domain.hash_tag.as_str()));
        }
        if domain.consistency != Consistency::Exact {
            modes.push_str(&format!(", consistency {}", domain.consistency.as_str()));
        }
        writeln!(
            f,
            "domain {}: failure_mode {}{modes}, {} {}, config version {}",
            domain.name,
            domain.failure_mode.as_str(),
            if files.len() > 1 { "files (merged)" } else { "file" },
            files.join(", "),
            self.version
        )?;
        for (index, report) in self.descriptors.iter().enumerate() {
            writeln!(f)?;
            f.write_str(&render_descriptor(index, report, &self.descriptors, domain.consistency))?;
        }
        Ok(())
    }
}

fn render_descriptor(
    index: usize,
    report: &DescriptorReport<'_>,
    all: &[DescriptorReport<'_>],
    consistency: Consistency,
) -> String {
    let mut out = String::new();
    let entries: Vec<String> =
        report.entries.iter().map(|(k, v)| format!("{}={}", escape(k), escape(v))).collect();
    let _ = writeln!(out, "descriptor {}: {}", index + 1, entries.join(", "));
    for (depth, step) in report.walk.iter().enumerate() {
        let _ = writeln!(
            out,
            "  {}. {}={}: {}",
            depth + 1,
            escape(&step.key),
            escape(&step.value),
            describe_how(&escape(&step.key), &step.how)
        );
        if let Some(rule) = step.passed_rule {
            let _ = writeln!(
                out,
                "     (this node's own limit {} does not apply: the descriptor goes deeper, and only the node of the last entry decides)",
                rule.label()
            );
        }
    }
    let _ = match report.verdict {
        Verdict::Missed => writeln!(out, "  → no match: OK, no limit, nothing charged"),
        Verdict::DeeperThanTree { matched } => writeln!(
            out,
            "  → no match: entry {matched} reached a node without nested descriptors, and the descriptor goes deeper than the tree: OK, nothing charged"
        ),
        Verdict::InnerNode => writeln!(
            out,
            "  → no match: the last entry reached a node with nested descriptors but no rate_limit: OK, nothing charged"
        ),
        Verdict::Allow => writeln!(
            out,
            "  → explicit allow: the last entry reached a node with neither a rate_limit nor nested descriptors: OK, nothing charged"
        ),
        Verdict::Rule(rule) => writeln!(out, "{}", describe_rule(rule, &report.applied, all)),
    };
    if let (Applied::Charged { .. }, Some(how)) = (&report.applied, describe_decision(consistency)) {
        let _ = writeln!(out, "    {how}");
    }
    out
}

/// How the buckets of a charged descriptor are decided, when not by one atomic store call
/// (the default says nothing). `explain` runs offline and knows the policy only: a bucket's
/// pressure tier is a running server's, shown by `tollgate usage` (`GET /v1/usage`).
fn describe_decision(consistency: Consistency) -> Option<&'static str> {
    match consistency {
        Consistency::Exact => None,
        Consistency::Approximate => Some(
            "decided locally (consistency approximate): from this instance's estimate of the \
             bucket, synced with Redis every --sync-interval-ms in the background (see \
             docs/scaling.md, Approximate mode); a running server shows the bucket's tier: tollgate usage",
        ),
    }
}

fn describe_how(key: &str, how: &How) -> String {
    match how {
        How::Exact => "exact value".to_string(),
        How::Wildcard { pattern, position, wildcards } => format!(
            "wildcard {pattern:?} (the first that matches, in file order: #{position} of the \
             {wildcards} wildcard values of key {key:?})"
        ),
        How::Default { exact, wildcards } => {
            format!("default node of key {key:?} (the node without a value){}", misses(*exact, wildcards))
        }
        How::NoKey { keys } if keys.is_empty() => "no node at this level → stop".to_string(),
        How::NoKey { keys } => {
            format!("no node with key {key:?} at this level (keys here: {}) → stop", keys.join(", "))
        }
        How::NoValue { exact, wildcards } => format!(
            "key {key:?} is here, but no node takes this value{}, and there is no default node → stop",
            misses(*exact, wildcards)
        ),
    }
}

/// Why the exact values and wildcards of a key did not take a value (empty when it has none).
fn misses(exact: usize, wildcards: &[String]) -> String {
    let mut why = Vec::new();
    if exact > 0 {
        why.push(format!("not one of its {exact} exact values"));
    }
    if !wildcards.is_empty() {
        why.push(format!("no match among its wildcards {wildcards:?}"));
    }
    if why.is_empty() {
        String::new()
    } else {
        format!(": {}", why.join(", "))
    }
}

fn describe_rule(rule: &Rule, applied: &Applied<'_>, all: &[DescriptorReport<'_>]) -> String {
    let mut out = format!("  → rule {} (path {}", rule.label(), rule.path);
    let several = rule.limits().iter().any(|limit| limit.name.is_some());
    if several {
        let _ = write!(out, ", rate_limits: metrics use {}/<name>", rule.path);
    } else if rule.name.is_none() {
        out.push_str(", unnamed: metrics use the path");
    }
    out.push(')');
    if several {
        out.push_str("\n    limits (a bucket each; the descriptor passes only if every one passes):");
        for limit in rule.limits() {
            let _ = write!(out, "\n      {}", describe_one(limit));
        }
    } else {
        let _ = write!(out, "\n    limit: {}", describe_limit(rule));
    }
    let _ = write!(out, "\n    flags: {}", describe_flags(rule));
    for name in &rule.replaces {
        let dropped: Vec<String> = all
            .iter()
            .enumerate()
            .filter(|(_, r)| matches!(r.verdict, Verdict::Rule(other) if other.name.as_deref() == Some(name.as_str())))
            .map(|(i, _)| format!("descriptor {}", i + 1))
            .collect();
        let effect = if dropped.is_empty() {
            "no given descriptor matched it".to_string()
        } else {
            dropped.join(", ")
        };
        let _ = write!(out, "\n    replaces {name:?}: {effect}");
    }
    let _ = write!(
        out,
        "\n    {}",
        match applied {
            Applied::Charged { key, others } if others.is_empty() => format!("bucket key: {key}"),
            Applied::Charged { others, .. } => {
                let all: Vec<String> = others.iter().map(|(name, key)| format!("{name} {key}")).collect();
                format!("bucket keys: {}", all.join(", "))
            }
            Applied::Unlimited => "unlimited: OK with remaining 4294967295, nothing charged".to_string(),
            Applied::ReplacedBy { rule: by, descriptor } => format!(
                "not applied: replaced by rule {} of descriptor {} (its replaces names {:?}): OK, nothing charged",
                by.label(),
                descriptor + 1,
                rule.label()
            ),
            Applied::Nothing => "not applied: OK, nothing charged".to_string(),
        }
    );
    out
}

fn describe_limit(rule: &Rule) -> String {
    match &rule.limit {
        RuleLimit::Unlimited => "unlimited".to_string(),
        RuleLimit::Limited(limits) => limits.iter().map(describe_one).collect::<Vec<_>>().join("; "),
    }
}

fn describe_one(limit: &crate::config::Limit) -> String {
    let params = limit.params;
    let mut s = String::new();
    if let Some(name) = &limit.name {
        let _ = write!(s, "{name}: ");
    }
    let _ = write!(
        s,
        "requests_per_unit {} per {} ({})",
        params.limit,
        limit.period_text(),
        params.algorithm.as_str()
    );
    if let Some(view) = limit.calendar_view(crate::store::memory::now_us()) {
        let _ = write!(
            s,
            ", this period {} to {} (the count starts over at the next reset, {})",
            view.start, view.next_reset, view.next_reset
        );
    }
    if params.algorithm == Algorithm::Gcra {
        let _ = write!(s, ", burst {}", params.burst);
    }
    if limit.rollout.is_partial() {
        let _ = write!(
            s,
            ", rollout {} (that share of its buckets enforced, the rest counted as shadow_rollout)",
            limit.rollout.share()
        );
    }
    if let Some(penalty) = limit.penalty_text() {
        let _ =
            write!(s, ", penalty {penalty} (a bucket that denies a request denies everything for that long)");
    }
    if params.limit == 0 {
        s.push_str(": blocks everything");
    }
    s
}

fn describe_flags(rule: &Rule) -> String {
    let flags: Vec<&str> = [
        (rule.shadow_mode, "shadow_mode (counted and reported, never denies)"),
        (rule.quota_mode, "quota_mode (over only when all quota-mode descriptors of the request are over)"),
        (rule.detailed_metric, "detailed_metric (metrics carry the descriptor values)"),
        (rule.value_to_metric, "value_to_metric"),
    ]
    .into_iter()
    .filter_map(|(on, name)| on.then_some(name))
    .collect();
    if flags.is_empty() {
        "none".to_string()
    } else {
        flags.join(", ")
    }
}
