//! The Rate Limit Quota Service's metrics (`crate::service::rlqs`): streams open, bucket
//! usages received, assignments sent by action, buckets held, usages that could not be
//! answered by reason, and answers a domain's failure policy made. Every label set is
//! closed (no bucket, domain or Envoy name is a label) and exported at 0 from startup.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// The `action` label values of `tollgate_rlqs_assignments_total`.
pub const ACTIONS: [&str; 4] = ["token_bucket", "allow_all", "deny_all", "abandon"];

/// The `reason` label values of `tollgate_rlqs_invalid_total`.
pub const INVALID: [&str; 7] = [
    "empty_id",
    "bad_entry",
    "too_many_entries",
    "too_long",
    "not_utf8",
    "too_many_buckets",
    "too_many_reports",
];

/// The `reason` label values of `tollgate_rlqs_unlimited_total`.
pub const UNLIMITED: [&str; 3] = ["unknown_domain", "no_rule", "unlimited"];

/// The `mode` label values of `tollgate_rlqs_failure_answers_total`.
pub const FAILURE_MODES: [&str; 3] = ["open", "closed", "local"];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ActionLabel {
    action: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabel {
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ModeLabel {
    mode: &'static str,
}

/// The families of the RLQS service.
#[derive(Debug)]
pub struct RlqsMetrics {
    streams: Gauge,
    streams_refused: Counter,
    reports: Counter,
    assignments: Family<ActionLabel, Counter>,
    buckets: Gauge,
    invalid: Family<ReasonLabel, Counter>,
    unlimited: Family<ReasonLabel, Counter>,
    failures: Family<ModeLabel, Counter>,
}

impl RlqsMetrics {
    /// Registers the families, every closed label value at 0.
    pub fn register(registry: &mut Registry) -> RlqsMetrics {
        let metrics = RlqsMetrics {
            streams: Gauge::default(),
            streams_refused: Counter::default(),
            reports: Counter::default(),
            assignments: Family::default(),
            buckets: Gauge::default(),
            invalid: Family::default(),
            unlimited: Family::default(),
            failures: Family::default(),
        };
        registry.register(
            "tollgate_rlqs_streams",
            "RLQS streams (StreamRateLimitQuotas) open on this instance: one per Envoy and filter domain",
            metrics.streams.clone(),
        );
        registry.register(
            "tollgate_rlqs_streams_refused",
            "RLQS streams refused with RESOURCE_EXHAUSTED: the instance already held its maximum",
            metrics.streams_refused.clone(),
        );
        registry.register(
            "tollgate_rlqs_reports",
            "Bucket usages received in RLQS usage reports (one per bucket per report)",
            metrics.reports.clone(),
        );
        registry.register(
            "tollgate_rlqs_assignments",
            "Bucket actions sent to Envoys, by action (token_bucket, allow_all, deny_all, abandon)",
            metrics.assignments.clone(),
        );
        registry.register(
            "tollgate_rlqs_buckets",
            "RLQS buckets held by the streams of this instance (a bucket held by two streams counts twice)",
            metrics.buckets.clone(),
        );
        registry.register(
            "tollgate_rlqs_invalid",
            "Bucket usages not answered, by reason: the other buckets of the report and the stream go on",
            metrics.invalid.clone(),
        );
        registry.register(
            "tollgate_rlqs_unlimited",
            "Bucket usages answered ALLOW_ALL because no limit applies, by reason (unknown_domain, \
             no_rule, unlimited)",
            metrics.unlimited.clone(),
        );
        registry.register(
            "tollgate_rlqs_failure_answers",
            "RLQS buckets answered by the domain's failure policy because the store failed, by mode",
            metrics.failures.clone(),
        );
        for action in ACTIONS {
            metrics.assignments.get_or_create(&ActionLabel { action }).inc_by(0);
        }
        for reason in INVALID {
            metrics.invalid.get_or_create(&ReasonLabel { reason }).inc_by(0);
        }
        for reason in UNLIMITED {
            metrics.unlimited.get_or_create(&ReasonLabel { reason }).inc_by(0);
        }
        for mode in FAILURE_MODES {
            metrics.failures.get_or_create(&ModeLabel { mode }).inc_by(0);
        }
        metrics
    }

    /// A stream opened (`+1`) or ended (`-1`).
    pub fn stream(&self, delta: i64) {
        self.streams.inc_by(delta);
    }

    /// A stream refused at the instance's maximum.
    pub fn stream_refused(&self) {
        self.streams_refused.inc();
    }

    /// `count` bucket usages received.
    pub fn reports(&self, count: u64) {
        self.reports.inc_by(count);
    }

    /// One bucket action sent; `action` is one of [`ACTIONS`].
    pub fn assignment(&self, action: &'static str) {
        self.assignments.get_or_create(&ActionLabel { action }).inc();
    }

    /// Buckets held by this instance's streams went up or down by `delta`.
    pub fn buckets(&self, delta: i64) {
        self.buckets.inc_by(delta);
    }

    /// One bucket usage not answered; `reason` is one of [`INVALID`].
    pub fn invalid(&self, reason: &'static str) {
        self.invalid.get_or_create(&ReasonLabel { reason }).inc();
    }

    /// `count` bucket usages not answered; `reason` is one of [`INVALID`].
    pub fn invalid_by(&self, reason: &'static str, count: u64) {
        self.invalid.get_or_create(&ReasonLabel { reason }).inc_by(count);
    }

    /// One bucket answered ALLOW_ALL with no limit; `reason` is one of [`UNLIMITED`].
    pub fn unlimited(&self, reason: &'static str) {
        self.unlimited.get_or_create(&ReasonLabel { reason }).inc();
    }

    /// One bucket answered by the failure policy `mode` (one of [`FAILURE_MODES`]).
    pub fn failure_answer(&self, mode: &'static str) {
        self.failures.get_or_create(&ModeLabel { mode }).inc();
    }

    /// Open streams now (for the status page).
    pub fn streams_open(&self) -> i64 {
        self.streams.get()
    }

    /// Buckets held now (for the status page).
    pub fn buckets_held(&self) -> i64 {
        self.buckets.get()
    }
}
