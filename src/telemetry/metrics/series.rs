//! Which rule series exist, so that their number stays bounded whatever the traffic.
//!
//! Plain series (one label set per rule of the serving snapshot, plus `request_override`
//! per domain) are created when a snapshot is built, and those of rules a reload drops are
//! removed from `/metrics` then. Rules that carry request values in their label
//! (`label::carries_values`) get one label set per distinct composed label, created on
//! first use, up to `--max-detailed-series` per domain; past it their decisions count
//! under `<rule>:_other_` and `tollgate_metric_series_dropped_total{domain}` counts them.
//! A reload that drops such a rule, or changes what its label is composed of, removes its
//! sets and gives their room back.

use std::collections::{HashMap, HashSet};
use std::sync::PoisonError;

use crate::config::{Rule, Snapshot};

use super::counters::{DomainSets, RuleSeries, RuleSets, Shape, SnapshotCounters};
use super::outcome::{Outcome, OUTCOMES};
use super::{label, DecisionLabels, DomainLabel, Metrics, RuleLabels};

/// The `rule` label of request `limit` overrides.
const OVERRIDE: &str = "request_override";

/// The base label of each limit of `rule` (one for `rate_limit` and `unlimited`).
fn limit_labels(rule: &Rule) -> Vec<String> {
    match rule.limits() {
        [] | [_] => vec![rule.label().to_string()],
        limits => limits.iter().map(|limit| rule.limit_label(limit)).collect(),
    }
}

impl Metrics {
    /// Counting for every rule of a snapshot about to serve. Series of rules that are not
    /// in it (a reload removed or changed them) are removed from `/metrics`: requests still
    /// in flight on the previous snapshot count on handles no longer exported.
    pub fn counters_for(&self, snapshot: &Snapshot) -> SnapshotCounters {
        let mut counters = SnapshotCounters::default();
        let mut plain = HashSet::new();
        let mut per_value: HashMap<&str, HashMap<String, Shape>> = HashMap::new();
        for (name, domain) in &snapshot.domains {
            let mut rules = Vec::with_capacity(domain.rules.len());
            for rule in &domain.rules {
                let labels = limit_labels(rule);
                if label::carries_values(rule) {
                    let shapes = per_value.entry(name).or_default();
                    for label in labels {
                        shapes.entry(label).or_insert_with(|| Shape::of(rule));
                    }
                    rules.push(RuleSeries::PerValue);
                } else {
                    let mut counters = Vec::with_capacity(labels.len());
                    for label in labels {
                        counters.push(self.rule_counters(name, &label));
                        plain.insert((name.clone(), label));
                    }
                    rules.push(RuleSeries::Fixed(counters));
                }
            }
            counters.domains.insert(name.clone(), rules);
            plain.insert((name.clone(), OVERRIDE.to_string()));
            counters.overrides.insert(name.clone(), self.rule_counters(name, OVERRIDE));
        }
        self.retire_plain(plain);
        self.install_per_value(per_value);
        self.install_domains(snapshot.domains.keys().map(String::as_str).collect());
        counters
    }

    /// Counts one decision of a rule that carries values: `values` are the descriptor's
    /// entry values, in order. A rule the serving snapshot no longer has (a request still
    /// in flight across a reload) is not counted.
    pub fn record_per_value<'v>(
        &self,
        domain: &str,
        rule: &Rule,
        values: impl IntoIterator<Item = &'v [u8]>,
        outcome: Outcome,
        hits: u64,
    ) {
        self.record_per_value_as(domain, rule, rule.label(), values, outcome, hits)
    }

    /// [`Metrics::record_per_value`] for one limit of the rule, labelled `base`
    /// (`Rule::limit_label`).
    pub fn record_per_value_as<'v>(
        &self,
        domain: &str,
        rule: &Rule,
        base: &str,
        values: impl IntoIterator<Item = &'v [u8]>,
        outcome: Outcome,
        hits: u64,
    ) {
        let composed = label::compose_as(rule, base, values, self.limits.max_label_value_bytes);
        {
            let domains = self.installed.per_value.read().unwrap_or_else(PoisonError::into_inner);
            let Some(sets) = domains.get(domain) else { return };
            let Some(rule_sets) = sets.rules.get(base) else { return };
            if let Some(counters) = rule_sets.sets.get(&composed) {
                return counters.record(outcome, hits);
            }
            if let (true, Some(other)) = (sets.count >= self.limits.max_detailed_series, &rule_sets.other) {
                sets.dropped.inc();
                return other.record(outcome, hits);
            }
        }
        // First sight of this label, or the first overflow of this rule.
        let mut domains = self.installed.per_value.write().unwrap_or_else(PoisonError::into_inner);
        let Some(sets) = domains.get_mut(domain) else { return };
        let full = sets.count >= self.limits.max_detailed_series;
        let Some(rule_sets) = sets.rules.get_mut(base) else { return };
        if let Some(counters) = rule_sets.sets.get(&composed) {
            return counters.record(outcome, hits);
        }
        if full {
            sets.dropped.inc();
            let other =
                rule_sets.other.get_or_insert_with(|| self.rule_counters(domain, &label::other(base)));
            return other.record(outcome, hits);
        }
        let counters = self.rule_counters(domain, &composed);
        counters.record(outcome, hits);
        rule_sets.sets.insert(composed, counters);
        sets.count += 1;
    }

    /// Removes the plain series of the previous snapshot that `current` does not have.
    fn retire_plain(&self, current: HashSet<(String, String)>) {
        let mut plain = self.installed.plain.lock().unwrap_or_else(PoisonError::into_inner);
        for (domain, rule) in plain.difference(&current) {
            self.remove_series(domain, rule);
        }
        *plain = current;
    }

    /// Keeps the value label sets of rules whose shape is unchanged, removes the others,
    /// and makes room for the new rules.
    fn install_per_value(&self, current: HashMap<&str, HashMap<String, Shape>>) {
        let mut domains = self.installed.per_value.write().unwrap_or_else(PoisonError::into_inner);
        domains.retain(|domain, sets| {
            let keep = current.get(domain.as_str());
            sets.rules.retain(|rule, rule_sets| {
                if keep.and_then(|rules| rules.get(rule.as_str())) == Some(&rule_sets.shape) {
                    return true;
                }
                sets.count -= rule_sets.sets.len();
                self.remove_rule_sets(domain, rule, rule_sets);
                false
            });
            // `tollgate_metric_series_dropped_total{domain}` stays: it is exported for every
            // configured domain (`export_domain`), value rules or not.
            keep.is_some()
        });
        for (domain, rules) in current {
            let sets = domains.entry(domain.to_string()).or_insert_with(|| DomainSets {
                count: 0,
                rules: HashMap::new(),
                dropped: self.series_dropped.get_or_create_owned(&DomainLabel { domain: domain.to_string() }),
            });
            for (rule, shape) in rules {
                sets.rules.entry(rule.to_string()).or_insert_with(|| RuleSets {
                    shape,
                    sets: HashMap::new(),
                    other: None,
                });
            }
        }
    }

    fn remove_rule_sets(&self, domain: &str, rule: &str, rule_sets: &RuleSets) {
        for composed in rule_sets.sets.keys() {
            self.remove_series(domain, composed);
        }
        if rule_sets.other.is_some() {
            self.remove_series(domain, &label::other(rule));
        }
    }

    /// Removes the decision and hits series of one (domain, rule) label pair.
    fn remove_series(&self, domain: &str, rule: &str) {
        for outcome in OUTCOMES {
            self.decisions.remove(&DecisionLabels {
                domain: domain.to_string(),
                rule: rule.to_string(),
                result: outcome.as_str(),
            });
        }
        self.hits.remove(&RuleLabels { domain: domain.to_string(), rule: rule.to_string() });
    }
}

#[cfg(test)]
mod tests;
