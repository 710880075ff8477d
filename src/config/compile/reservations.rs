//! What a domain's `reservations` refuses, so that a reservation is exact wherever it is
//! served (`algorithm::reservation`): an approximate domain (its local estimates cannot hold
//! a reservation's record with its charge), `charge: all_or_nothing` (a reservation is one
//! descriptor's: it cannot stand or fall with the rest of a request), `lease: true` (a
//! lease spends hits unseen by the bucket and its records), `unlimited` rules (nothing to
//! hold), a node keyed by the reservation key (that entry is removed before matching:
//! the node could never match), and `calendar` limits (a reservation's window is an epoch
//! window). Each error names the field; pure.

use std::path::Path;

use super::super::error::ConfigError;
use super::super::model::{ChargeMode, Consistency, Reservations};
use super::super::raw::RawDescriptor;
use super::Builder;

/// The domain-level refusals of `reservations` (at `reservations`, in `file`).
pub(super) fn refuse_reservations(
    file: &Path,
    reservations: Option<&Reservations>,
    consistency: Consistency,
    charge: ChargeMode,
    errors: &mut Vec<ConfigError>,
) {
    if reservations.is_none() {
        return;
    }
    if consistency == Consistency::Approximate {
        errors.push(ConfigError::new(
            file,
            "reservations",
            "reservations in a domain with consistency: approximate: a reservation's record is \
             written with its charge in one store call, which approximate mode's local estimates \
             never make; remove reservations or set consistency: exact",
        ));
    }
    if charge == ChargeMode::AllOrNothing {
        errors.push(ConfigError::new(
            file,
            "reservations",
            "reservations in a domain with charge: all_or_nothing: a reservation is held and \
             settled by its own descriptor, it cannot stand or fall with the rest of a request; \
             remove one",
        ));
    }
}

impl Builder<'_> {
    /// Refuses, in a domain with reservations, a node keyed by the reservation key, a
    /// leased node and an unlimited one (`unlimited` at `unlimited_at`, when it is); true
    /// when refused.
    pub(super) fn refuse_with_reservations(
        &mut self,
        raw: &RawDescriptor,
        path: &str,
        unlimited_at: Option<&str>,
    ) -> bool {
        let Some(key) = self.reservation_key.clone() else {
            return false;
        };
        let before = self.errors.len();
        if raw.key.as_deref() == Some(key.as_str()) {
            self.error(
                format!("{path}.key"),
                format!(
                    "key {key:?} is the domain's reservations.key: that entry names a reservation \
                     and is removed before matching, so this node could never match; rename one"
                ),
            );
        }
        let calendar =
            raw.rate_limit.iter().chain(raw.rate_limits.iter().flatten()).any(|l| l.calendar.is_some());
        if calendar {
            self.error(
                format!("{path}.rate_limit.calendar"),
                "calendar in a domain with reservations: a reservation is settled against the \
                 window it was held in, reckoned in epoch windows, not calendar periods; remove one",
            );
        }
        if raw.lease {
            self.error(
                format!("{path}.lease"),
                "lease: true in a domain with reservations: a lease spends hits locally, unseen \
                 by the bucket and its reservations; remove lease or reservations",
            );
        }
        if let Some(at) = unlimited_at {
            self.error(
                format!("{at}.unlimited"),
                "unlimited in a domain with reservations: a reservation on an unlimited rule \
                 would hold nothing; give the rule a limit, or move it to a domain without \
                 reservations",
            );
        }
        self.errors.len() > before
    }
}
