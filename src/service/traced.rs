//! What the spans of a traced request say (`crate::telemetry::trace` makes and exports them).
//! The names are contracts, listed in docs/observability.md ("Tracing").
//!
//! The server span: the RPC (`rpc.*`), the domain, the number of descriptors, the answer
//! (`ratelimit.overall_code`), the config version, and per descriptor — the first
//! [`MAX_TRACED_DESCRIPTORS`], each text cut to [`MAX_TEXT_BYTES`] — the rule it matched,
//! its code, limit, remaining, and who decided it (`decided_by`). Descriptor values only
//! with `--tracing-descriptor-values`, escaped and cut as in metric labels. The store
//! span: topology, charges, calls, outcome, the breaker's state when it decided.

use std::time::SystemTime;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{Code, RateLimit};
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use opentelemetry::trace::SpanKind;
use opentelemetry::KeyValue;

use crate::algorithm::Decision;
use crate::store::probe::{Answered, Seen};
use crate::store::StoreError;
use crate::telemetry::metrics::label::{escape_into, DEFAULT_MAX_LABEL_VALUE_BYTES};
use crate::telemetry::trace::{RequestSpan, STORE_SPAN};

use super::plan::Plan;
use super::respond::Verdict;
use super::wire::{RateLimitRequest, SERVICE_NAME};

/// Descriptors described in a span, at most; `ratelimit.descriptors` still counts all.
pub const MAX_TRACED_DESCRIPTORS: usize = 16;
/// Bytes of one text attribute (a domain, a key, a value), at most, after escaping.
pub const MAX_TEXT_BYTES: usize = DEFAULT_MAX_LABEL_VALUE_BYTES;

/// Who decided a descriptor: the values of `ratelimit.descriptor.<i>.decided_by`.
pub mod decided_by {
    /// A store call (Redis, or the memory store's lock).
    pub const STORE: &str = "store";
    /// The over-limit cache: Redis had just denied the bucket.
    pub const OVER_LIMIT_CACHE: &str = "over_limit_cache";
    /// A lease this instance holds.
    pub const LEASE: &str = "lease";
    /// An approximate domain's local estimate.
    pub const APPROXIMATE: &str = "approximate";
    /// The domain's failure policy (`open`, `closed`): the store failed or the request
    /// was past the size bounds.
    pub const FAILURE_POLICY: &str = "failure_policy";
    /// `failure_mode: local`: this instance's memory, while the store fails.
    pub const LOCAL: &str = "failure_policy_local";
    /// `unlimited: true`.
    pub const UNLIMITED: &str = "unlimited";
    /// No rule matched (or the rule was replaced): OK without a limit.
    pub const NO_RULE: &str = "no_rule";
    /// The domain is not configured: OK.
    pub const UNKNOWN_DOMAIN: &str = "unknown_domain";
    /// An incident override in `open` mode (`POST /v1/override`): OK without the store.
    pub const OVERRIDE_OPEN: &str = "override_open";
}

/// What deciding one traced request saw, beyond its response.
#[derive(Debug, Default)]
pub struct Observed {
    pub config_version: String,
    /// Per descriptor (the first [`MAX_TRACED_DESCRIPTORS`]).
    pub descriptors: Vec<Described>,
    /// Why the request was answered by policy without charging, if it was.
    pub oversized: Option<&'static str>,
    /// Global shadow mode turned a denial into OK.
    pub shadowed: bool,
    /// The mode of the incident override in force for the domain, if one is.
    pub incident: Option<&'static str>,
    pub store: Option<StoreCall>,
}

/// One descriptor, as the span tells it.
#[derive(Debug)]
pub struct Described {
    pub rule: Option<String>,
    /// The metric `result` of its decision.
    pub result: Option<&'static str>,
    pub decided_by: &'static str,
}

/// The store call of one request.
#[derive(Debug)]
pub struct StoreCall {
    pub topology: &'static str,
    pub charges: usize,
    pub times: (SystemTime, SystemTime),
    pub seen: Seen,
    /// The first error, if a charge failed.
    pub error: Option<StoreError>,
}

/// Fills `observed.descriptors` from the decision: `approximate` when the local
/// estimates decided, `local` flags the charges `failure_mode: local` decided.
pub fn describe(
    observed: &mut Observed,
    plans: &[Plan<'_>],
    results: &[Result<Decision, StoreError>],
    verdicts: &[Option<Verdict>],
    local: &[bool],
    approximate: bool,
    charges: &[crate::store::Charge],
) {
    let seen = observed.store.as_ref().map(|call| &call.seen);
    observed.descriptors = plans
        .iter()
        .zip(verdicts)
        .take(MAX_TRACED_DESCRIPTORS)
        .map(|(plan, verdict)| {
            let result = verdict.map(|v| v.outcome.as_str());
            match plan {
                Plan::Pass => Described { rule: None, result, decided_by: decided_by::NO_RULE },
                Plan::Unlimited(rule) => Described {
                    rule: Some(rule.label().to_string()),
                    result,
                    decided_by: decided_by::UNLIMITED,
                },
                Plan::Limited(limit) => {
                    let range = limit.charges.clone();
                    let by = if approximate {
                        decided_by::APPROXIMATE
                    } else if local.get(range.clone()).is_some_and(|l| l.contains(&true)) {
                        decided_by::LOCAL
                    } else if results.get(range.clone()).is_some_and(|r| r.iter().any(Result::is_err)) {
                        decided_by::FAILURE_POLICY
                    } else {
                        let keys = charges.get(range).unwrap_or_default();
                        let by =
                            |who| seen.is_some_and(|s| keys.iter().any(|c| s.answered(&c.key) == Some(who)));
                        if by(Answered::OverLimitCache) {
                            decided_by::OVER_LIMIT_CACHE
                        } else if by(Answered::Lease) {
                            decided_by::LEASE
                        } else {
                            decided_by::STORE
                        }
                    };
                    let rule = match (limit.rule, verdict) {
                        (Some(rule), Some(v)) => Some(match limit.limits().nth(v.limit) {
                            Some(one) if rule.limits().len() > 1 => rule.limit_label(one),
                            _ => rule.label().to_string(),
                        }),
                        (Some(rule), None) => Some(rule.label().to_string()),
                        (None, _) => Some("(request limit)".to_string()),
                    };
                    Described { rule, result, decided_by: by }
                }
            }
        })
        .collect();
}

/// Every descriptor decided alike (an unknown domain, a request past the size bounds).
pub fn describe_all(observed: &mut Observed, n: usize, by: &'static str) {
    observed.descriptors = (0..n.min(MAX_TRACED_DESCRIPTORS))
        .map(|_| Described { rule: None, result: None, decided_by: by })
        .collect();
}

/// The server span's attributes for a request answered `response` (beside
/// [`request_attributes`]).
pub fn server_attributes(
    request: &RateLimitRequest,
    response: &RateLimitResponse,
    observed: &Observed,
    values: bool,
) -> Vec<KeyValue> {
    let mut attributes = Vec::with_capacity(4 + 9 * observed.descriptors.len());
    attributes.push(KeyValue::new("ratelimit.overall_code", code(response.overall_code)));
    attributes.push(KeyValue::new("ratelimit.config_version", observed.config_version.clone()));
    if observed.shadowed {
        attributes.push(KeyValue::new("ratelimit.shadow_mode", true));
    }
    if let Some(mode) = observed.incident {
        attributes.push(KeyValue::new("ratelimit.override", mode));
    }
    if let Some(reason) = observed.oversized {
        attributes.push(KeyValue::new("ratelimit.oversized", reason));
    }
    for (i, described) in observed.descriptors.iter().enumerate() {
        let key = |field: &str| format!("ratelimit.descriptor.{i}.{field}");
        let status = response.statuses.get(i);
        if let Some(rule) = &described.rule {
            attributes.push(KeyValue::new(key("rule"), cut(rule)));
        }
        if let Some(status) = status {
            attributes.push(KeyValue::new(key("code"), code(status.code)));
            if let Some(RateLimit { requests_per_unit, unit, .. }) = &status.current_limit {
                attributes.push(KeyValue::new(key("limit"), i64::from(*requests_per_unit)));
                attributes.push(KeyValue::new(key("unit"), unit_name(*unit)));
                attributes.push(KeyValue::new(key("remaining"), i64::from(status.limit_remaining)));
            }
        }
        if let Some(result) = described.result {
            attributes.push(KeyValue::new(key("result"), result));
        }
        attributes.push(KeyValue::new(key("decided_by"), described.decided_by));
        if let Some(descriptor) = request.descriptors.get(i) {
            let keys = joined(descriptor.entries.iter().map(|e| e.key.as_ref()));
            attributes.push(KeyValue::new(key("keys"), keys));
            if values {
                let values = joined(descriptor.entries.iter().map(|e| e.value.as_ref()));
                attributes.push(KeyValue::new(key("values"), values));
            }
        }
    }
    attributes
}

/// What the request says, set on the server span before it is decided (so that a request
/// cancelled on the way still names its domain).
pub fn request_attributes(request: &RateLimitRequest) -> Vec<KeyValue> {
    let mut attributes = rpc().to_vec();
    attributes.push(KeyValue::new("ratelimit.domain", text(&request.domain)));
    attributes.push(KeyValue::new("ratelimit.descriptors", request.descriptors.len() as i64));
    attributes.push(KeyValue::new("ratelimit.hits_addend", i64::from(request.hits_addend)));
    attributes
}

/// The attribute of a request refused as invalid (beside [`request_attributes`]).
pub fn invalid_attributes() -> Vec<KeyValue> {
    vec![KeyValue::new("rpc.grpc.status_code", tonic::Code::InvalidArgument as i64)]
}

/// The store span, a child of the server span (Redis topologies: the memory store has no
/// round trip).
pub fn store_span(span: &RequestSpan, call: StoreCall) {
    let StoreCall { topology, charges, times, seen, error } = call;
    let mut attributes = vec![
        KeyValue::new("ratelimit.store.topology", topology),
        KeyValue::new("ratelimit.store.charges", charges as i64),
        KeyValue::new("ratelimit.store.calls", i64::from(seen.calls)),
        KeyValue::new("ratelimit.store.shared", seen.shared),
        KeyValue::new("ratelimit.store.outcome", error.as_ref().map_or("ok", StoreError::kind)),
    ];
    attributes.push(KeyValue::new("db.system.name", "redis"));
    if let Some(state) = seen.breaker {
        attributes.push(KeyValue::new("ratelimit.store.breaker", state));
    }
    let kind = if seen.calls > 0 { SpanKind::Client } else { SpanKind::Internal };
    span.child(STORE_SPAN, kind, times, attributes, error.map(|e| e.to_string()));
}

fn rpc() -> [KeyValue; 3] {
    [
        KeyValue::new("rpc.system", "grpc"),
        KeyValue::new("rpc.service", SERVICE_NAME),
        KeyValue::new("rpc.method", "ShouldRateLimit"),
    ]
}

fn code(code: i32) -> &'static str {
    Code::try_from(code).map_or("UNKNOWN", |c| c.as_str_name())
}

fn unit_name(unit: i32) -> String {
    use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
    Unit::try_from(unit).map_or("unknown", |u| u.as_str_name()).to_ascii_lowercase()
}

/// Bytes as text, escaped and cut.
fn text(bytes: &[u8]) -> String {
    let mut out = String::new();
    escape_into(&mut out, bytes, MAX_TEXT_BYTES);
    out
}

/// Config text cut to a bound (rule labels come from the config, not from requests).
fn cut(label: &str) -> String {
    text(label.as_bytes())
}

/// Parts escaped and cut each, joined by `,` (the first [`MAX_TRACED_DESCRIPTORS`]).
fn joined<'a>(parts: impl Iterator<Item = &'a [u8]>) -> String {
    let mut out = String::new();
    for (i, part) in parts.take(MAX_TRACED_DESCRIPTORS).enumerate() {
        if i > 0 {
            out.push(',');
        }
        escape_into(&mut out, part, MAX_TEXT_BYTES);
    }
    out
}
