//! `tollgate_config_reload_fresh_rules_total{domain}`: rules whose buckets a reload started
//! afresh (`crate::sources::key_changes`). Bounded labels: configured domains only, never a rule or value.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DomainLabel {
    domain: String,
}

/// The counter family.
#[derive(Debug)]
pub struct FreshRules(Family<DomainLabel, Counter>);

impl FreshRules {
    /// Registers the family in `registry`.
    pub fn register(registry: &mut Registry) -> FreshRules {
        let family = Family::<DomainLabel, Counter>::default();
        registry.register(
            "tollgate_config_reload_fresh_rules",
            "Rules whose bucket keys a reload changed (hash_tag, descriptor path, share_threshold, \
             a limit's name, algorithm, unit or unit_multiplier): their buckets start afresh",
            family.clone(),
        );
        FreshRules(family)
    }

    /// Exports `domain`'s count (at 0 until a reload starts one of its rules afresh), so that
    /// the first increase is a step `increase()` sees rather than a series born at 1.
    pub fn export(&self, domain: &str) {
        self.0.get_or_create(&DomainLabel { domain: domain.to_string() }).inc_by(0);
    }

    /// `rules` rules of `domain` start afresh.
    pub fn add(&self, domain: &str, rules: usize) {
        self.0.get_or_create(&DomainLabel { domain: domain.to_string() }).inc_by(rules as u64);
    }
}
