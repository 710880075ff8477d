//! What the request path reports, as closed sets of label values: how a descriptor was
//! decided (`Outcome`, the `result` of `tollgate_decisions_total`) and which size bound a
//! request broke (`Oversize`, the `reason` of `tollgate_oversized_requests_total`).
//!
//! The service decides them (`service::respond`, `service::bounds`); the families count
//! them and the one-minute history classes them. Imports nothing of the crate.

/// How a descriptor was decided: the `result` label of `tollgate_decisions_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    WithinLimit,
    NearLimit,
    OverLimit,
    ShadowMode,
    /// Denied in a bucket its limit's `rollout` leaves out: counted, answered OK.
    ShadowRollout,
    Unlimited,
    FailureOpen,
    FailureClosed,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::WithinLimit => "within_limit",
            Outcome::NearLimit => "near_limit",
            Outcome::OverLimit => "over_limit",
            Outcome::ShadowMode => "shadow_mode",
            Outcome::ShadowRollout => "shadow_rollout",
            Outcome::Unlimited => "unlimited",
            Outcome::FailureOpen => "failure_open",
            Outcome::FailureClosed => "failure_closed",
        }
    }
}

/// Every outcome, in the order of a rule's decision counters.
pub(super) const OUTCOMES: [Outcome; 8] = [
    Outcome::WithinLimit,
    Outcome::NearLimit,
    Outcome::OverLimit,
    Outcome::ShadowMode,
    Outcome::ShadowRollout,
    Outcome::Unlimited,
    Outcome::FailureOpen,
    Outcome::FailureClosed,
];

/// Which bound a request broke: the `reason` label of `tollgate_oversized_requests_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Oversize {
    Descriptors,
    Entries,
    ValueBytes,
}

impl Oversize {
    pub fn as_str(self) -> &'static str {
        match self {
            Oversize::Descriptors => "descriptors",
            Oversize::Entries => "entries",
            Oversize::ValueBytes => "value_bytes",
        }
    }
}
