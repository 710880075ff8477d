//! From decisions to the `RateLimitResponse` Envoy reads.
//!
//! Pure: one `DescriptorStatus` per descriptor in request order, the overall code, and the
//! failure policy applied to store errors. Also says, per descriptor, which metric result
//! it counts as (`metrics::Outcome`).

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    rate_limit::Unit as ProtoUnit, Code, DescriptorStatus, RateLimit,
};
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use envoy_types::pb::google::protobuf::Duration;

use std::sync::Arc;

use crate::algorithm::Decision;
use crate::config::rule::DenialResponse;
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

/// Per descriptor, what the headers (and a denial's body) take from the limit that decided
/// it: its true count and window, `unit × unit_multiplier` in seconds (`current_limit` may
/// have rescaled them to a standard unit), and its name as a `RateLimit-Policy` names it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Decided {
    pub count: u64,
    pub window: u64,
    /// The limit's `name`, else its rule's, else its rule's config path; empty when no
    /// header needs it (`--ratelimit-headers ietf` off).
    pub policy: String,
    /// The limit's `response`, for the 429 when it denies.
    pub response: Option<Arc<DenialResponse>>,
}

/// A limit's `response` on an OVER_LIMIT answer: of the denied descriptors, in request
/// order, the first whose denying limit has one fills `raw_body` (Envoy's 429 body) and
/// adds its `content-type` and headers, templated with that limit's numbers — its
/// `requests_per_unit`, its window in seconds, and the seconds until the request would
/// pass (the descriptor's `duration_until_reset`). Nothing from the request enters them.
/// Called after the generated headers: a template header of a name they already hold
/// (only possible through `--limit-header-names`) is left out.
pub fn add_denial_response(response: &mut RateLimitResponse, decided: &[Option<Decided>]) {
    if response.overall_code != Code::OverLimit as i32 {
        return;
    }
    let found = response.statuses.iter().enumerate().find_map(|(i, status)| {
        let d = decided.get(i)?.as_ref()?;
        let denial = d.response.as_ref().filter(|_| status.code == Code::OverLimit as i32)?;
        Some((denial.clone(), d.count, d.window, reset_seconds(status).max(0) as u64))
    });
    let Some((denial, count, window, reset)) = found else { return };
    if let Some(body) = &denial.body {
        response.raw_body = body.render(count, window, reset).into_bytes();
    }
    if let Some(content_type) = &denial.content_type {
        response.response_headers_to_add.push(header("content-type", content_type.clone()));
    }
    for (name, value) in &denial.headers {
        // The config refuses the generated names; `--limit-header-names` may choose others,
        // and one field keeps one value: the generated one.
        let generated =
            |h: &envoy_types::pb::envoy::config::core::v3::HeaderValue| h.key.eq_ignore_ascii_case(name);
        if !response.response_headers_to_add.iter().any(generated) {
            response.response_headers_to_add.push(header(name, value.render(count, window, reset)));
        }
    }
}

/// `--response-headers`: `x-ratelimit-limit/remaining/reset` from the status that decides
/// the answer ([`tightest`]: a denied one first), and `retry-after` when the request is
/// over the limit (the longest wait among the denied descriptors: all must pass), plus up to
/// `jitter` × that wait at random (`--retry-after-jitter`; never less than the wait). For
/// setups that do not use the Envoy filter's own `enable_x_ratelimit_headers` — enabling
/// both duplicates them.
pub fn add_headers(response: &mut RateLimitResponse, decided: &[Option<Decided>], jitter: f64) {
    let mut headers = Vec::new();
    if let Some((index, status, limit)) = tightest(&response.statuses) {
        let (count, window) = true_window(decided, index, limit);
        headers.push(header("x-ratelimit-limit", format!("{count}, {count};w={window}")));
        headers.push(header("x-ratelimit-remaining", status.limit_remaining.to_string()));
        headers.push(header("x-ratelimit-reset", reset_seconds(status).to_string()));
    }
    if response.overall_code == Code::OverLimit as i32 {
        let denied = response.statuses.iter().filter(|s| s.code == Code::OverLimit as i32);
        if let Some(wait) = denied.map(reset_seconds).max() {
            headers.push(header("retry-after", jittered(wait.max(1), jitter).to_string()));
        }
    }
    response.response_headers_to_add.extend(headers);
}

/// `wait` seconds plus a uniformly drawn 0 to `jitter × wait` (rounded down), so that the
/// clients denied in one second do not all come back in the same one.
fn jittered(wait: i64, jitter: f64) -> i64 {
    if jitter <= 0.0 || wait <= 0 {
        return wait;
    }
    let most = (wait as f64 * jitter).floor().min(i64::MAX as f64 / 2.0) as i64;
    if most <= 0 {
        return wait;
    }
    wait.saturating_add(rand::random_range(0..=most))
}

/// The count and window in seconds of the limit of status `index`: the true ones when known,
/// else those `current_limit` reports.
fn true_window(decided: &[Option<Decided>], index: usize, limit: &RateLimit) -> (u64, u64) {
    match decided.get(index).and_then(Option::as_ref) {
        Some(d) => (d.count, d.window),
        None => (u64::from(limit.requests_per_unit), ProtoUnit::try_from(limit.unit).map_or(0, unit_seconds)),
    }
}

/// `--ratelimit-headers ietf`: the `RateLimit-Policy` and `RateLimit` fields of
/// draft-ietf-httpapi-ratelimit-headers-09. `RateLimit-Policy` lists the limit that decided
/// each descriptor with one (`"<name>";q=<count>;w=<window seconds>`, each policy once);
/// `RateLimit` describes the one the answer is about — the denying limit, else the most
/// constraining ([`tightest`]) — as `"<name>";r=<remaining>;t=<seconds to reset>`. Nothing
/// when no descriptor has a limit.
pub fn add_ietf_headers(response: &mut RateLimitResponse, decided: &[Option<Decided>]) {
    let Some((index, status, _)) = tightest(&response.statuses) else { return };
    let name = |i: usize| decided.get(i).and_then(Option::as_ref).map_or("", |d| d.policy.as_str());
    let mut policies: Vec<String> = Vec::new();
    for (i, s) in response.statuses.iter().enumerate() {
        let Some(limit) = s.current_limit.as_ref() else { continue };
        let (count, window) = true_window(decided, i, limit);
        let policy = format!("{};q={count};w={window}", sf_string(name(i)));
        if !policies.contains(&policy) {
            policies.push(policy);
        }
    }
    let current =
        format!("{};r={};t={}", sf_string(name(index)), status.limit_remaining, reset_seconds(status).max(0));
    response.response_headers_to_add.push(header("ratelimit-policy", policies.join(", ")));
    response.response_headers_to_add.push(header("ratelimit", current));
}

/// `name` as a Structured Field string (RFC 8941 §3.3.3): quoted, `"` and `\` escaped; a
/// byte outside printable ASCII (which an sf-string cannot hold) becomes `_`.
fn sf_string(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 2);
    out.push('"');
    for c in name.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            ' '..='~' => out.push(c),
            _ => out.push('_'),
        }
    }
    out.push('"');
    out
}

/// The names of envoyproxy/ratelimit's limit headers (its `LIMIT_LIMIT_HEADER`,
/// `LIMIT_REMAINING_HEADER`, `LIMIT_RESET_HEADER`); `Default` is its defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitHeaderNames {
    pub limit: String,
    pub remaining: String,
    pub reset: String,
}

impl Default for LimitHeaderNames {
    fn default() -> Self {
        LimitHeaderNames {
            limit: "RateLimit-Limit".into(),
            remaining: "RateLimit-Remaining".into(),
            reset: "RateLimit-Reset".into(),
        }
    }
}

/// `--limit-headers`: the peer's three headers, as plain integers, with the numbers of
/// `add_headers` (the same `tightest` status): its `requests_per_unit`, its remaining, and
/// its `duration_until_reset` in whole seconds rounded up (the peer sends the end of the
/// current fixed window instead). Nothing when no descriptor has a limit.
pub fn add_limit_headers(response: &mut RateLimitResponse, names: &LimitHeaderNames) {
    let Some((_, status, limit)) = tightest(&response.statuses) else { return };
    let headers = [
        header(&names.limit, limit.requests_per_unit.to_string()),
        header(&names.remaining, status.limit_remaining.to_string()),
        header(&names.reset, reset_seconds(status).to_string()),
    ];
    response.response_headers_to_add.extend(headers);
}

/// The status the limit headers describe: of those with a limit, a denied one first (the
/// headers of a 429 are about what denied it, not about a limit that passed with nothing
/// left), then the fewest remaining, then the longest reset.
fn tightest(statuses: &[DescriptorStatus]) -> Option<(usize, &DescriptorStatus, &RateLimit)> {
    statuses
        .iter()
        .enumerate()
        .filter_map(|(i, s)| s.current_limit.as_ref().map(|limit| (i, s, limit)))
        .min_by_key(|(_, s, _)| {
            (s.code != Code::OverLimit as i32, s.limit_remaining, std::cmp::Reverse(reset_seconds(s)))
        })
}

fn reset_seconds(status: &DescriptorStatus) -> i64 {
    status.duration_until_reset.as_ref().map_or(0, |d| d.seconds.max(0))
}

fn header(key: &str, value: String) -> envoy_types::pb::envoy::config::core::v3::HeaderValue {
    envoy_types::pb::envoy::config::core::v3::HeaderValue {
        key: key.to_string(),
        value,
        ..Default::default()
    }
}

fn unit_seconds(unit: ProtoUnit) -> u64 {
    match unit {
        ProtoUnit::Unknown => 0,
        ProtoUnit::Second => Unit::Second.seconds(),
        ProtoUnit::Minute => Unit::Minute.seconds(),
        ProtoUnit::Hour => Unit::Hour.seconds(),
        ProtoUnit::Day => Unit::Day.seconds(),
        ProtoUnit::Week => Unit::Week.seconds(),
        ProtoUnit::Month => Unit::Month.seconds(),
        ProtoUnit::Year => Unit::Year.seconds(),
    }
}

#[cfg(test)]
mod tests;
