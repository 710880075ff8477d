//! Counting requests: a rule's decision counters (`RuleCounters`, resolved once per
//! snapshot by `series`), the gRPC call's duration, the requests answered without a rule's
//! decision (unknown domain, oversized, the local fallback, a shadow-mode override), and
//! the admin port's resets. Only configured domains reach a `domain` label here.

use std::sync::atomic::Ordering;

use prometheus_client::metrics::counter::Counter;

use super::outcome::{Outcome, OUTCOMES};
use super::{DecisionLabels, DomainLabel, Metrics, ReasonLabel, RuleLabels};

/// Pre-resolved counters of one rule: one per decision result, and its hits.
#[derive(Debug, Clone)]
pub struct RuleCounters {
    pub(super) decisions: [Counter; 7],
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

impl Metrics {
    /// Counters for one (domain, rule) label pair (created if new).
    pub(super) fn rule_counters(&self, domain: &str, rule: &str) -> RuleCounters {
        let decisions = OUTCOMES.map(|outcome| {
            self.decisions.get_or_create_owned(&DecisionLabels {
                domain: domain.to_string(),
                rule: rule.to_string(),
                result: outcome.as_str(),
            })
        });
        let hits =
            self.hits.get_or_create_owned(&RuleLabels { domain: domain.to_string(), rule: rule.to_string() });
        RuleCounters { decisions, hits }
    }

    pub fn observe_request(&self, seconds: f64) {
        self.request_duration.observe(seconds);
    }

    pub fn unknown_domain(&self) {
        self.unknown_domain.inc();
    }

    /// One request past the size bounds.
    pub fn oversized(&self, reason: &'static str) {
        self.oversized.get_or_create(&ReasonLabel { reason }).inc();
    }

    /// One descriptor decided locally because the store failed (`failure_mode: local`).
    pub fn local_decision(&self, domain: &str) {
        self.local_decisions.get_or_create(&DomainLabel { domain: domain.to_string() }).inc();
    }

    /// One answer whose OVER_LIMIT `--shadow-mode` turned into OK. Only configured domains
    /// are counted (an unknown domain is never OVER_LIMIT), so the label stays bounded.
    pub fn shadow_override(&self, domain: &str) {
        self.shadow_overrides.get_or_create(&DomainLabel { domain: domain.to_string() }).inc();
    }

    /// One reset through the admin port. Only configured domains are counted (an unknown
    /// one is refused), so the label stays bounded.
    pub fn admin_reset(&self, domain: &str) {
        self.admin_resets.get_or_create(&DomainLabel { domain: domain.to_string() }).inc();
    }
}
