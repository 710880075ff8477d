//! The response headers and the denial body: what Envoy adds to the answer it sends back,
//! from the `RateLimitResponse` `respond` built and, per descriptor, the limit that decided
//! it ([`Decided`]). Three header dialects, each behind its own flag: `x-ratelimit-*` and
//! `retry-after` (`--response-headers`), the IETF draft's `RateLimit`/`RateLimit-Policy`
//! (`--ratelimit-headers ietf`), and the peer's names (`--limit-header-names`); and a
//! limit's templated 429 (`response`). Pure.

use std::sync::Arc;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    rate_limit::Unit as ProtoUnit, Code, DescriptorStatus, RateLimit,
};
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;

use crate::config::rule::DenialResponse;
use crate::config::Unit;

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
