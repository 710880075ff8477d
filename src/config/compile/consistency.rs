//! What a domain's `consistency` refuses: an approximate domain serves only limits whose
//! algorithm its local estimates can decay (`sliding_window`, `fixed_window`), and no
//! leases (an exact-mode device).
//!
//! Part of `compile`: it sees each limit's *resolved* algorithm (`--default-algorithm` and
//! a `burst` that means gcra already applied), so that `check` refuses what `serve` could
//! not serve. A request's own `limit` override is not in the files and is not checked
//! here. Pure.

use crate::algorithm::Algorithm;

use super::super::model::Consistency;
use super::super::raw::{RawDescriptor, RawRateLimit};
use super::Builder;

impl Builder<'_> {
    /// Refuses a limit at `at` (`descriptors[0].rate_limit`, `….rate_limits[1]`) whose
    /// resolved `algorithm` the domain's consistency cannot serve, naming where that
    /// algorithm came from: the `algorithm` field, a `burst` without one, or the default.
    pub(super) fn refuse_unserved(&mut self, raw: &RawRateLimit, at: &str, algorithm: Algorithm) {
        if self.consistency.serves(algorithm) {
            return;
        }
        let name = algorithm.as_str();
        let (field, why, fix) = match (&raw.algorithm, raw.burst) {
            (Some(_), _) => ("algorithm", String::new(), "set algorithm: sliding_window"),
            (None, Some(_)) => (
                "burst",
                " (a burst without an algorithm means gcra)".to_owned(),
                "remove burst and set algorithm: sliding_window",
            ),
            (None, None) => (
                "algorithm",
                format!(" (the default algorithm, --default-algorithm {name})"),
                "set algorithm: sliding_window",
            ),
        };
        self.error(
            format!("{at}.{field}"),
            format!(
                "consistency: {} serves sliding_window and fixed_window, not {name}{why}; {fix}",
                self.consistency.as_str()
            ),
        );
    }

    /// Refuses `lease: true` on the node at `path` in an approximate domain; true when
    /// refused.
    pub(super) fn refuse_lease(&mut self, raw: &RawDescriptor, path: &str) -> bool {
        if !raw.lease || self.consistency == Consistency::Exact {
            return false;
        }
        self.error(
            format!("{path}.lease"),
            "lease: true in a domain with consistency: approximate: leases are an exact-mode \
             device (approximate mode already decides every request locally, with no Redis \
             call on the request path to save); remove lease or set consistency: exact",
        );
        true
    }
}
