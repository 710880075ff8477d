//! Reservations (`reservations:` in a domain): `tollgate_reservations_total{domain,phase}`
//! (every call naming one, by what it did: reserved, refused, settled, plain) and
//! `tollgate_reservations_expired_total{domain}` (reservations found expired still held,
//! never settled: they stay charged). Bounded labels: configured domains and four phases.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PhaseLabels {
    domain: String,
    phase: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DomainLabel {
    domain: String,
}

/// The two families.
#[derive(Debug)]
pub struct Reservations {
    calls: Family<PhaseLabels, Counter>,
    expired: Family<DomainLabel, Counter>,
}

impl Reservations {
    /// Registers the families in `registry`.
    pub fn register(registry: &mut Registry) -> Reservations {
        let calls = Family::<PhaseLabels, Counter>::default();
        registry.register(
            "tollgate_reservations",
            "Descriptors naming a reservation, by phase: reserved (held), refused (did not fit, \
             nothing held), settled (the usage charged, the rest given back), plain (settled or \
             refused before, or never made with 0 hits)",
            calls.clone(),
        );
        let expired = Family::<DomainLabel, Counter>::default();
        registry.register(
            "tollgate_reservations_expired",
            "Reservations whose ttl passed before they were settled: they stay charged",
            expired.clone(),
        );
        Reservations { calls, expired }
    }

    /// One call of `domain` that did `phase`, and `expired` reservations it found expired.
    pub fn record(&self, domain: &str, phase: &'static str, expired: u64) {
        self.calls.get_or_create(&PhaseLabels { domain: domain.to_string(), phase }).inc();
        let expired_family = self.expired.get_or_create(&DomainLabel { domain: domain.to_string() });
        expired_family.inc_by(expired);
    }
}
