//! The counting state of rules, below `Metrics` and every file that adds to it: one rule's
//! pre-resolved counters (`RuleCounters`), how a snapshot's rules are counted
//! (`SnapshotCounters`, `RuleSeries`), the bounds on series that carry request values
//! (`SeriesLimits`) and the record of the series created so far (`Installed`, kept by
//! `Metrics` and updated by `series`).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::{Mutex, RwLock};

use prometheus_client::metrics::counter::Counter;

use crate::config::{Level, Rule};

use super::label;
use super::outcome::{Outcome, OUTCOMES};

/// Pre-resolved counters of one rule: one per decision result, and its hits.
#[derive(Debug, Clone)]
pub struct RuleCounters {
    pub(super) decisions: [Counter; 8],
    pub(super) hits: Counter,
}

impl RuleCounters {
    /// Counts one descriptor decided by this rule.
    pub fn record(&self, outcome: Outcome, hits: u64) {
        self.decisions[outcome_index(outcome)].inc();
        // Saturates: `hits_addend` may be 2^64 - 1, and a wrapped counter would read as a reset.
        let _ = self
            .hits
            .inner()
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| Some(v.saturating_add(hits)));
    }
}

fn outcome_index(outcome: Outcome) -> usize {
    OUTCOMES.iter().position(|o| *o == outcome).unwrap_or(0)
}

/// Bounds on the series of rules that carry request values in their `rule` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeriesLimits {
    /// `--max-label-value-bytes`: longest part (key, value or pattern) of such a label.
    pub max_label_value_bytes: usize,
    /// `--max-detailed-series`: distinct value label sets per domain (each ≤ 9 series).
    pub max_detailed_series: usize,
}

/// Default of `--max-detailed-series`.
pub const DEFAULT_MAX_DETAILED_SERIES: usize = 1_000;

impl Default for SeriesLimits {
    fn default() -> Self {
        SeriesLimits {
            max_label_value_bytes: label::DEFAULT_MAX_LABEL_VALUE_BYTES,
            max_detailed_series: DEFAULT_MAX_DETAILED_SERIES,
        }
    }
}

/// How a rule of a snapshot is counted.
#[derive(Debug, Clone)]
pub enum RuleSeries {
    /// On handles resolved when the snapshot was built (the plain `<rule>` label), one per
    /// limit of the rule (`Rule::limit_label`; one for a `rate_limit` or `unlimited`).
    Fixed(Vec<RuleCounters>),
    /// Under a label composed from each request's values (`Metrics::record_per_value`).
    PerValue,
}

/// Per-domain, per-rule counting for one snapshot (`domains[domain][rule_id]`).
#[derive(Debug, Default)]
pub struct SnapshotCounters {
    pub domains: HashMap<String, Vec<RuleSeries>>,
    /// Counters for request `limit` overrides, per domain.
    pub overrides: HashMap<String, RuleCounters>,
}

/// The series Tollgate created and has not removed yet.
#[derive(Debug, Default)]
pub(super) struct Installed {
    /// (domain, rule) of the plain series of the serving snapshot.
    pub(super) plain: Mutex<HashSet<(String, String)>>,
    /// Per domain: the value label sets of the rules that carry values.
    pub(super) per_value: RwLock<HashMap<String, DomainSets>>,
    /// The configured domains whose per-domain series are exported (`install_domains`).
    pub(super) domains: Mutex<HashSet<String>>,
}

#[derive(Debug)]
pub(super) struct DomainSets {
    /// Value label sets created in this domain, `_other_` ones excluded: what the cap bounds.
    pub(super) count: usize,
    /// By rule label.
    pub(super) rules: HashMap<String, RuleSets>,
    /// `tollgate_metric_series_dropped_total{domain}`.
    pub(super) dropped: Counter,
}

#[derive(Debug)]
pub(super) struct RuleSets {
    pub(super) shape: Shape,
    /// By composed label.
    pub(super) sets: HashMap<String, RuleCounters>,
    /// `<rule>:_other_`, made when the domain first overflows.
    pub(super) other: Option<RuleCounters>,
}

/// What a rule's labels are composed from: a reload that changes it retires the sets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Shape {
    pub(super) detailed_metric: bool,
    pub(super) levels: Vec<Level>,
}

impl Shape {
    pub(super) fn of(rule: &Rule) -> Shape {
        Shape { detailed_metric: rule.detailed_metric, levels: rule.levels.clone() }
    }
}
