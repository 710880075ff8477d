//! What is settled about a request before it is decided: whether it is meaningful at all
//! (`validate`), how long the store may take for it (`store_budget`, from the caller's
//! `grpc-timeout`), and the answer that decides nothing (`all_ok`). Pure: no store, no
//! config.

use std::time::Duration;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{Code, DescriptorStatus};
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use tonic::metadata::MetadataMap;

use super::super::wire::RateLimitRequest;

/// Structural checks: what makes a request meaningless, not merely unusual.
///
/// A descriptor without entries is not one of them: Envoy sends it when every action of a
/// `rate_limits` entry is `skip_if_absent` and none applied (a header the client left out).
/// Refusing the request would let Envoy's `failure_mode_deny` (allow, by default) decide for
/// every descriptor of it — per-client limits included, bypassed by omitting a header. It
/// matches no rule: OK without a limit, and the request's other descriptors are decided.
pub fn validate(request: &RateLimitRequest) -> Result<(), String> {
    if request.domain.is_empty() {
        return Err("domain must not be empty".into());
    }
    if request.descriptors.is_empty() {
        return Err("at least one descriptor is required".into());
    }
    for (i, descriptor) in request.descriptors.iter().enumerate() {
        if let Some(j) = descriptor.entries.iter().position(|e| e.key.is_empty()) {
            return Err(format!("descriptors[{i}].entries[{j}] has an empty key"));
        }
    }
    Ok(())
}

/// Every descriptor OK, nothing charged: the answer for a domain with no policy and for an
/// incident override in `open` mode.
pub(super) fn all_ok(request: &RateLimitRequest) -> RateLimitResponse {
    let ok = DescriptorStatus { code: Code::Ok as i32, ..Default::default() };
    RateLimitResponse {
        overall_code: Code::Ok as i32,
        statuses: vec![ok; request.descriptors.len()],
        ..Default::default()
    }
}

/// How long the store may take: the store timeout, but never past what the caller allows
/// less a margin to answer in. The gRPC server enforces the caller's `grpc-timeout` itself
/// (its clock starts before ours) by dropping the handler: a store call still pending then
/// would end as a gRPC error, not as the domain's failure policy, and the breaker would
/// never hear of the failure. The margin is a tenth of the caller's timeout, at least 1 ms.
pub fn store_budget(store_timeout: Duration, caller: Option<Duration>) -> Duration {
    match caller {
        Some(caller) => {
            let margin = (caller / 10).max(Duration::from_millis(1));
            store_timeout.min(caller.saturating_sub(margin))
        }
        None => store_timeout,
    }
}

/// The caller's `grpc-timeout` header (e.g. `20m` = 20 ms), if present and well formed.
pub fn grpc_timeout(metadata: &MetadataMap) -> Option<Duration> {
    let raw = metadata.get("grpc-timeout")?.to_str().ok()?;
    let (digits, unit) = raw.split_at(raw.len().checked_sub(1)?);
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n.saturating_mul(3600)),
        "M" => Duration::from_secs(n.saturating_mul(60)),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}
