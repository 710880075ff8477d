//! Which buckets a config change starts afresh: the rules whose bucket keys differ between
//! two snapshots ([`between`]), for `Live::reload` (a warning and
//! `tollgate_config_reload_fresh_rules_total`) and `tollgate check --against`.
//!
//! A bucket's key is its identity (`store::key`): the domain and its `hash_tag`, the
//! descriptor path (entry keys, and the pattern of `share_threshold` levels), and per limit
//! its name in `rate_limits`, algorithm, unit, `unit_multiplier` and calendar zone. Numbers
//! (`requests_per_unit`, `burst`) and `consistency` are not in it: changing them keeps the
//! counts. A change of a key part leaves the old buckets behind (they expire unread) and
//! charges new, full ones: the counts reset.
//!
//! Rules are paired across the two snapshots by descriptor path, else by `name`, else by
//! config path (`descriptors[0]`), so that reordering rules is no change and renaming an
//! entry key of a named rule is. Whether a pair's buckets change is decided by computing
//! both keys with `store::key` itself (on sample values that a request matching both rules
//! could carry), never by a second copy of the key format; the field comparison only words
//! what changed. Pure: no I/O, no clock.

use std::collections::HashMap;
use std::fmt;

use crate::config::matcher::is_wildcard;
use crate::config::{Domain, Level, Limit, Rule, Snapshot};
use crate::store::key;

/// One change that starts buckets afresh.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fresh {
    pub domain: String,
    /// The rule's label (its `name`, else its config path) in the new config; `None` when
    /// every bucket of the domain changes (`hash_tag`).
    pub rule: Option<String>,
    /// Rules of the old config whose buckets start afresh: 1 for a rule, every limited rule
    /// that stays for a domain-wide change.
    pub rules: usize,
    /// What changed, e.g. `hash_tag descriptor → domain`, `algorithm gcra → sliding_window`.
    pub changes: Vec<String>,
}

impl fmt::Display for Fresh {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let changes = self.changes.join("; ");
        match &self.rule {
            Some(rule) => write!(f, "domain {}, rule {rule}: {changes}", self.domain),
            None => write!(
                f,
                "domain {}: {changes}: every bucket of the domain ({} rules, and request `limit` overrides)",
                self.domain, self.rules
            ),
        }
    }
}

/// What moving from `old` to `new` starts afresh, by domain name, then rule order in `new`.
/// Domains and rules only in one of the two are not listed (a new rule has no counts to
/// lose; a removed one is no longer charged).
pub fn between(old: &Snapshot, new: &Snapshot) -> Vec<Fresh> {
    let mut names: Vec<&String> = new.domains.keys().collect();
    names.sort();
    names
        .into_iter()
        .filter_map(|name| Some((old.domain(name)?, new.domain(name)?)))
        .flat_map(|(old, new)| domain(old, new))
        .collect()
}

fn domain(old: &Domain, new: &Domain) -> Vec<Fresh> {
    let pairs = pair_rules(old, new);
    if old.hash_tag != new.hash_tag {
        let rules = pairs.iter().filter(|(o, _)| !o.limits().is_empty()).count();
        let change = format!("hash_tag {} → {}", old.hash_tag.as_str(), new.hash_tag.as_str());
        return vec![Fresh { domain: new.name.clone(), rule: None, rules, changes: vec![change] }];
    }
    pairs.into_iter().filter_map(|(o, n)| rule(old, o, new, n)).collect()
}

/// The changes of one rule pair, if any of its old limits gets another key.
fn rule(old_domain: &Domain, old: &Rule, new_domain: &Domain, new: &Rule) -> Option<Fresh> {
    let (old_entries, new_entries) = (samples(old, new), samples(new, old));
    let key_of = |domain: &Domain, rule: &Rule, limit: &Limit, entries: &[(String, String)]| {
        key::limit_key("", domain, rule, limit, entries.iter().map(|(k, v)| (k.as_str(), v.as_str())))
    };
    let limits: Vec<(&Limit, &Limit)> = pair_limits(old.limits(), new.limits())
        .into_iter()
        .filter(|(o, n)| key_of(old_domain, old, o, &old_entries) != key_of(new_domain, new, n, &new_entries))
        .collect();
    if limits.is_empty() {
        return None;
    }
    let mut changes = Vec::new();
    let (old_path, new_path) = (path_text(old), path_text(new));
    if old_path != new_path {
        changes.push(format!("descriptor path {old_path} → {new_path}"));
    }
    for (o, n) in old.levels.iter().zip(&new.levels) {
        if o.key == n.key && o.shared_pattern.is_some() != n.shared_pattern.is_some() {
            let shared = |level: &Level| match &level.shared_pattern {
                Some(pattern) => format!("shared ({pattern})"),
                None => "per value".to_string(),
            };
            changes.push(format!("share_threshold of {}: {} → {}", o.key, shared(o), shared(n)));
        }
    }
    for (o, n) in limits {
        changes.extend(limit_changes(o, n));
    }
    if changes.is_empty() {
        changes.push("bucket key".to_string());
    }
    Some(Fresh { domain: new_domain.name.clone(), rule: Some(new.label().to_string()), rules: 1, changes })
}

/// The key parts of a limit that differ, in words.
fn limit_changes(old: &Limit, new: &Limit) -> Vec<String> {
    let mut changes = Vec::new();
    let prefix = match (&old.name, &new.name) {
        (None, None) => String::new(),
        (Some(a), Some(b)) if a == b => format!("limit {a}: "),
        (Some(a), Some(b)) => {
            changes.push(format!("limit name {a} → {b}"));
            format!("limit {b}: ")
        }
        (None, Some(b)) => {
            changes.push(format!("rate_limit → rate_limits entry {b}"));
            format!("limit {b}: ")
        }
        (Some(a), None) => {
            changes.push(format!("rate_limits entry {a} → rate_limit"));
            String::new()
        }
    };
    if old.params.algorithm != new.params.algorithm {
        let (a, b) = (old.params.algorithm.as_str(), new.params.algorithm.as_str());
        changes.push(format!("{prefix}algorithm {a} → {b}"));
    }
    if old.unit != new.unit {
        changes.push(format!("{prefix}unit {} → {}", old.unit.as_str(), new.unit.as_str()));
    }
    if old.multiplier != new.multiplier {
        changes.push(format!("{prefix}unit_multiplier {} → {}", old.multiplier, new.multiplier));
    }
    // A calendar period's zone is in its key: another zone's periods are other windows.
    let zone = |limit: &Limit| limit.calendar.as_ref().map_or("none", |c| c.zone()).to_string();
    if zone(old) != zone(new) {
        changes.push(format!("{prefix}calendar time_zone {} → {}", zone(old), zone(new)));
    }
    changes
}

/// Old and new limits of one rule: by name first (`None` with `None`), then the rest in
/// order (a renamed limit, `rate_limit` ↔ `rate_limits`). An old limit left over is gone.
fn pair_limits<'a>(old: &'a [Limit], new: &'a [Limit]) -> Vec<(&'a Limit, &'a Limit)> {
    let mut taken = vec![false; new.len()];
    let mut pairs = Vec::with_capacity(old.len());
    let mut rest = Vec::new();
    for o in old {
        match new.iter().enumerate().position(|(i, n)| !taken[i] && n.name == o.name) {
            Some(i) => {
                taken[i] = true;
                pairs.push((o, &new[i]));
            }
            None => rest.push(o),
        }
    }
    let mut free = new.iter().enumerate().filter(|(i, _)| !taken[*i]).map(|(_, n)| n);
    pairs.extend(rest.into_iter().zip(&mut free));
    pairs
}

/// Each level's entry key and a value a request matching both rules could carry: an exact
/// value of either rule at that level (the same request then gives both), else a
/// placeholder (a wildcard or default level keys the request's value, or its shared pattern).
fn samples(rule: &Rule, other: &Rule) -> Vec<(String, String)> {
    let exact = |level: &Level| level.value.clone().filter(|v| !is_wildcard(v));
    rule.levels
        .iter()
        .enumerate()
        .map(|(i, level)| {
            let value = exact(level).or_else(|| other.levels.get(i).and_then(exact));
            (level.key.clone(), value.unwrap_or_else(|| "-".to_string()))
        })
        .collect()
}

/// `user=alice.path=/api/*` (a default level as its key alone), for messages.
fn path_text(rule: &Rule) -> String {
    let levels: Vec<String> = rule
        .levels
        .iter()
        .map(|l| match &l.value {
            Some(value) => format!("{}={value}", l.key),
            None => l.key.clone(),
        })
        .collect();
    levels.join(".")
}

/// What identifies a node in a domain's tree: its levels' keys and values as written.
fn path_id(rule: &Rule) -> Vec<(&str, Option<&str>)> {
    rule.levels.iter().map(|l| (l.key.as_str(), l.value.as_deref())).collect()
}

/// Old rules with their counterpart in `new`: the rule at the same descriptor path, else
/// the one of the same `name`, else the one at the same config path. In `new`'s order.
fn pair_rules<'a>(old: &'a Domain, new: &'a Domain) -> Vec<(&'a Rule, &'a Rule)> {
    let mut taken = vec![false; new.rules.len()];
    let mut pairs: Vec<(&Rule, usize)> = Vec::new();
    let mut rest: Vec<&Rule> = old.rules.iter().collect();
    let ways: [fn(&Rule) -> Option<String>; 3] =
        [|r| Some(format!("{:?}", path_id(r))), |r| r.name.clone(), |r| Some(r.path.clone())];
    for way in ways {
        let mut index: HashMap<String, Vec<usize>> = HashMap::new();
        for (i, rule) in new.rules.iter().enumerate().rev() {
            if let (false, Some(id)) = (taken[i], way(rule)) {
                index.entry(id).or_default().push(i);
            }
        }
        rest.retain(|o| {
            let found = way(o).and_then(|id| index.get_mut(&id)).and_then(Vec::pop);
            if let Some(i) = found {
                taken[i] = true;
                pairs.push((o, i));
            }
            found.is_none()
        });
    }
    pairs.sort_by_key(|(_, i)| *i);
    pairs.into_iter().map(|(o, i)| (o, &new.rules[i])).collect()
}

#[cfg(test)]
mod tests;
