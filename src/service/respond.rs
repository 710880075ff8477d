//! From decisions to the `RateLimitResponse` Envoy reads.
//!
//! Pure: one `DescriptorStatus` per descriptor in request order, the overall code, and the
//! failure policy applied to store errors. Also says, per descriptor, which metric result
//! it counts as (`metrics::Outcome`). The headers and the denial body added to it are
//! `headers`'.

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    rate_limit::Unit as ProtoUnit, Code, DescriptorStatus, RateLimit,
};
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use envoy_types::pb::google::protobuf::Duration;

use crate::algorithm::Decision;
use crate::config::{FailureMode, Unit};
use crate::store::{StoreError, NOT_EVALUATED};
use crate::telemetry::metrics::Outcome;

use super::plan::{Limit, Plan};

/// How a charged descriptor was decided: its outcome and which of its limits decided it
/// (an index into `Limit::limits()`: the denying one, else the most constraining).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verdict {
    pub outcome: Outcome,
    pub limit: usize,
}

/// Builds the response. `results` holds the store's answer for each charge.
/// Returns the response and, per descriptor, its verdict (None for unmatched/replaced).
pub fn respond(
    plans: &[Plan<'_>],
    results: &[Result<Decision, StoreError>],
    failure_mode: FailureMode,
    near_limit_ratio: f64,
) -> (RateLimitResponse, Vec<Option<Verdict>>) {
    let mut statuses = Vec::with_capacity(plans.len());
    let mut verdicts = Vec::with_capacity(plans.len());
    let mut over = false;
    let (mut quota_seen, mut quota_all_over) = (false, true);
    for plan in plans {
        let (status, verdict) = match plan {
            Plan::Pass => (ok_status(None, 0), None),
            Plan::Unlimited(_) => {
                (ok_status(None, u32::MAX), Some(Verdict { outcome: Outcome::Unlimited, limit: 0 }))
            }
            Plan::Limited(limit) => {
                let (status, verdict, denied) =
                    limited(limit, &results[limit.charges.clone()], failure_mode, near_limit_ratio);
                // A shadow rule never denies, quota or not.
                if limit.shadow() {
                } else if limit.quota() {
                    quota_seen = true;
                    quota_all_over &= denied;
                } else if denied {
                    over = true;
                }
                (status, Some(verdict))
            }
        };
        statuses.push(status);
        verdicts.push(verdict);
    }
    if quota_seen && quota_all_over {
        over = true;
    }
    let overall = if over { Code::OverLimit } else { Code::Ok };
    let response = RateLimitResponse { overall_code: overall as i32, statuses, ..Default::default() };
    (response, verdicts)
}

/// Which limit of a descriptor decides it: the first that failed in the store, else the
/// first denied, else the most constraining (the lowest remaining relative to its
/// capacity; limits the store did not evaluate are skipped). `None`: none was evaluated.
fn deciding(limit: &Limit<'_>, results: &[Result<Decision, StoreError>]) -> Option<usize> {
    if let Some(i) = results.iter().position(Result::is_err) {
        return Some(i);
    }
    // An enforced denial decides before a staged one (`rollout`).
    let denied = |i: &usize| matches!(&results[*i], Ok(d) if !d.allowed);
    if let Some(i) = (0..results.len()).filter(denied).min_by_key(|i| limit.is_staged(*i)) {
        return Some(i);
    }
    limit
        .limits()
        .zip(results)
        .enumerate()
        .filter_map(|(i, (one, result))| match result {
            Ok(d) if *d != NOT_EVALUATED => Some((i, one.capacity(), d.remaining)),
            _ => None,
        })
        // remaining / capacity, compared exactly: a / b < c / d  ⇔  a·d < c·b.
        .min_by(|(_, cap_a, rem_a), (_, cap_b, rem_b)| {
            (u128::from(*rem_a) * u128::from(*cap_b)).cmp(&(u128::from(*rem_b) * u128::from(*cap_a)))
        })
        .map(|(i, _, _)| i)
}

/// The status of a charged descriptor, its verdict, and whether it was denied (before
/// shadow mode turns the code into OK).
fn limited(
    limit: &Limit<'_>,
    results: &[Result<Decision, StoreError>],
    failure_mode: FailureMode,
    near_limit_ratio: f64,
) -> (DescriptorStatus, Verdict, bool) {
    let Some(index) = deciding(limit, results) else {
        // Another descriptor of its all-or-nothing group was denied by the over-limit cache:
        // this one was neither charged nor looked at.
        return (ok_status(None, 0), Verdict { outcome: Outcome::WithinLimit, limit: 0 }, false);
    };
    let Some(one) = limit.limits().nth(index) else {
        return (ok_status(None, 0), Verdict { outcome: Outcome::WithinLimit, limit: 0 }, false);
    };
    let current = Some(current_limit(limit.name_of(one), one));
    let verdict = |outcome| Verdict { outcome, limit: index };
    let staged = limit.is_staged(index);
    match &results[index] {
        Ok(decision) => {
            let spared = limit.shadow() || staged;
            let code = if decision.allowed || spared { Code::Ok } else { Code::OverLimit };
            let outcome = if !decision.allowed {
                if limit.shadow() {
                    Outcome::ShadowMode
                } else if staged {
                    Outcome::ShadowRollout
                } else {
                    Outcome::OverLimit
                }
            } else if near(decision, one, near_limit_ratio) {
                Outcome::NearLimit
            } else {
                Outcome::WithinLimit
            };
            let status = DescriptorStatus {
                code: code as i32,
                current_limit: current,
                limit_remaining: clamp_u32(decision.remaining),
                duration_until_reset: Some(duration(decision.reset_us)),
                quota: None,
            };
            (status, verdict(outcome), !decision.allowed && !staged)
        }
        // `local` domains were charged in memory before this; an error left means even
        // that was impossible, so let the request through. A staged bucket never denies.
        Err(_) if limit.shadow() || staged || failure_mode != FailureMode::Closed => {
            (ok_status(None, 0), verdict(Outcome::FailureOpen), false)
        }
        Err(_) => {
            let status = DescriptorStatus {
                code: Code::OverLimit as i32,
                current_limit: current,
                limit_remaining: 0,
                // Clients honouring Retry-After come back in a second, not at once.
                duration_until_reset: Some(duration(1_000_000)),
                quota: None,
            };
            (status, verdict(Outcome::FailureClosed), true)
        }
    }
}

/// Above `ratio` of the limit consumed after this charge.
fn near(decision: &Decision, limit: &crate::config::Limit, ratio: f64) -> bool {
    let cap = limit.capacity();
    cap > 0 && (cap.saturating_sub(decision.remaining) as f64) > ratio * cap as f64
}

fn ok_status(current_limit: Option<RateLimit>, remaining: u32) -> DescriptorStatus {
    DescriptorStatus {
        code: Code::Ok as i32,
        current_limit,
        limit_remaining: remaining,
        duration_until_reset: None,
        quota: None,
    }
}

/// `current_limit` of a limit. Envoy's `RateLimit` names one standard unit: a window of N
/// units is reported in the smallest standard unit the window divides, with the count
/// scaled (2 per 30 s → 4 per minute; 7 per 5 minutes → 84 per hour); if there is none, or
/// the count overflows, in the limit's own unit with its own count (the multiplier cannot
/// be expressed). `--response-headers` write the true window (`w=`) either way.
fn current_limit(name: &str, limit: &crate::config::Limit) -> RateLimit {
    let (count, unit) = reported(limit);
    RateLimit { name: name.to_string(), requests_per_unit: count, unit: proto_unit(unit) as i32 }
}

/// The count and standard unit `current_limit` reports for `limit` (see `current_limit`).
pub fn reported(limit: &crate::config::Limit) -> (u32, Unit) {
    let own = (clamp_u32(limit.params.limit), limit.unit);
    if limit.multiplier == 1 {
        return own;
    }
    let window = limit.window_seconds();
    const STANDARD: [Unit; 7] =
        [Unit::Second, Unit::Minute, Unit::Hour, Unit::Day, Unit::Week, Unit::Month, Unit::Year];
    STANDARD
        .into_iter()
        .filter(|unit| window > 0 && unit.seconds() >= window && unit.seconds() % window == 0)
        .find_map(|unit| {
            let scaled = limit.params.limit.checked_mul(unit.seconds() / window)?;
            Some((u32::try_from(scaled).ok()?, unit))
        })
        .unwrap_or(own)
}

/// Whole seconds, rounded up: Envoy drops nanos, and a 0 reset on a denial would tell
/// clients to retry at once.
pub fn duration(us: u64) -> Duration {
    Duration { seconds: us.div_ceil(1_000_000).min(i64::MAX as u64) as i64, nanos: 0 }
}

fn clamp_u32(n: u64) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

pub fn proto_unit(unit: Unit) -> ProtoUnit {
    match unit {
        Unit::Second => ProtoUnit::Second,
        Unit::Minute => ProtoUnit::Minute,
        Unit::Hour => ProtoUnit::Hour,
        Unit::Day => ProtoUnit::Day,
        Unit::Week => ProtoUnit::Week,
        Unit::Month => ProtoUnit::Month,
        Unit::Year => ProtoUnit::Year,
    }
}

/// Global shadow mode: the overall code — the only one Envoy decides on — becomes OK; each
/// descriptor keeps its code and numbers, so access logs and metadata show what would have
/// been limited. Returns whether an OVER_LIMIT was overridden.
pub fn shadow(response: &mut RateLimitResponse) -> bool {
    let overridden = response.overall_code == Code::OverLimit as i32;
    response.overall_code = Code::Ok as i32;
    overridden
}

#[cfg(test)]
mod tests;
