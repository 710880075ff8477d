//! Counting requests: a rule's decision counters (`rule_counters`, resolved once per
//! snapshot by `series`), the gRPC call's duration, the requests answered without a rule's
//! decision (unknown domain, oversized, the local fallback, a shadow-mode override), and
//! the admin port's resets. Only configured domains reach a `domain` label here.

use super::counters::RuleCounters;
use super::outcome::OUTCOMES;
use super::{DecisionLabels, DomainLabel, Metrics, ReasonLabel, RuleLabels};

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

    /// One call naming a reservation in `domain` that did `phase`, finding `expired`
    /// reservations expired unsettled (`tollgate_reservations_total`,
    /// `tollgate_reservations_expired_total`).
    pub fn reservation(&self, domain: &str, phase: &'static str, expired: u64) {
        self.reservations.record(domain, phase, expired);
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
