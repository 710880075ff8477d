//! Size bounds on requests: what a hostile or broken client may not send.
//!
//! Oversized requests are not gRPC errors: Envoy fails open on an error, which would let
//! exactly the attacker through. They are answered by the domain's failure policy and
//! counted (the bound broken is a `metrics::Oversize`). Values below the bound are fine
//! whatever they hold (keys hash long values).

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{Code, DescriptorStatus};
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;

use super::wire::RateLimitRequest;
use crate::config::FailureMode;
use crate::telemetry::metrics::Oversize;

/// Limits on one request's shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    pub max_descriptors: usize,
    pub max_entries: usize,
    pub max_value_bytes: usize,
}

impl Default for Bounds {
    fn default() -> Self {
        Bounds { max_descriptors: 64, max_entries: 32, max_value_bytes: 4096 }
    }
}

impl Bounds {
    /// The first bound `request` breaks, if any. Keys count with values.
    pub fn check(&self, request: &RateLimitRequest) -> Option<Oversize> {
        if request.descriptors.len() > self.max_descriptors {
            return Some(Oversize::Descriptors);
        }
        for descriptor in &request.descriptors {
            if descriptor.entries.len() > self.max_entries {
                return Some(Oversize::Entries);
            }
            if descriptor.entries.iter().any(|e| e.key.len().max(e.value.len()) > self.max_value_bytes) {
                return Some(Oversize::ValueBytes);
            }
        }
        None
    }
}

/// The answer to an oversized request: every descriptor by the failure policy (`local`
/// denies: an oversized request cannot be charged, and it is hostile input).
pub fn answer(request: &RateLimitRequest, failure_mode: FailureMode) -> RateLimitResponse {
    let code = match failure_mode {
        FailureMode::Open => Code::Ok,
        FailureMode::Closed | FailureMode::Local => Code::OverLimit,
    };
    let status = DescriptorStatus { code: code as i32, ..Default::default() };
    RateLimitResponse {
        overall_code: code as i32,
        statuses: vec![status; request.descriptors.len()],
        ..Default::default()
    }
}
