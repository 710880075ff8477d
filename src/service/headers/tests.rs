//! Unit tests of the headers and denial bodies: which status they describe, the
//! draft standard's fields, the jitter, and the templated 429.

use std::sync::Arc;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    rate_limit::Unit as ProtoUnit, Code, DescriptorStatus, RateLimit,
};
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;

use envoy_types::pb::google::protobuf::Duration;

use super::*;
use crate::config::rule::{DenialResponse, Template};

fn status(
    code: Code,
    name: &str,
    limit: u32,
    unit: ProtoUnit,
    remaining: u32,
    reset: i64,
) -> DescriptorStatus {
    DescriptorStatus {
        code: code as i32,
        current_limit: Some(RateLimit { name: name.into(), requests_per_unit: limit, unit: unit as i32 }),
        limit_remaining: remaining,
        duration_until_reset: Some(Duration { seconds: reset, nanos: 0 }),
        quota: None,
    }
}

fn decided(count: u64, window: u64, policy: &str) -> Option<Decided> {
    Some(Decided { count, window, policy: policy.into(), response: None })
}

fn headers(response: &RateLimitResponse) -> Vec<(String, String)> {
    response.response_headers_to_add.iter().map(|h| (h.key.clone(), h.value.clone())).collect()
}

fn get<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

/// A minute limit that passed with nothing left (its reset the longer one) and a second
/// limit that denied: every header set describes the one that denied.
fn passed_empty_and_denied() -> (RateLimitResponse, Vec<Option<Decided>>) {
    let response = RateLimitResponse {
        overall_code: Code::OverLimit as i32,
        statuses: vec![
            status(Code::Ok, "per-minute", 5, ProtoUnit::Minute, 0, 60),
            status(Code::OverLimit, "per-second", 2, ProtoUnit::Second, 0, 1),
        ],
        ..Default::default()
    };
    (response, vec![decided(5, 60, "per-minute"), decided(2, 1, "per-second")])
}

#[test]
fn every_header_set_describes_the_limit_that_denied() {
    let (mut response, decided) = passed_empty_and_denied();
    add_headers(&mut response, &decided, 0.0);
    add_limit_headers(&mut response, &LimitHeaderNames::default());
    add_ietf_headers(&mut response, &decided);
    let h = headers(&response);
    assert_eq!(get(&h, "x-ratelimit-limit"), Some("2, 2;w=1"), "{h:?}");
    assert_eq!(get(&h, "x-ratelimit-reset"), Some("1"));
    assert_eq!(get(&h, "RateLimit-Limit"), Some("2"));
    assert_eq!(get(&h, "retry-after"), Some("1"));
    assert_eq!(get(&h, "ratelimit"), Some(r#""per-second";r=0;t=1"#));
    assert_eq!(get(&h, "ratelimit-policy"), Some(r#""per-minute";q=5;w=60, "per-second";q=2;w=1"#));
}

#[test]
fn without_a_denial_the_most_constraining_limit_is_described() {
    let mut response = RateLimitResponse {
        overall_code: Code::Ok as i32,
        statuses: vec![
            status(Code::Ok, "hourly", 100, ProtoUnit::Hour, 40, 900),
            status(Code::Ok, "burst", 10, ProtoUnit::Second, 3, 1),
            DescriptorStatus { code: Code::Ok as i32, ..Default::default() },
        ],
        ..Default::default()
    };
    let decided = vec![decided(100, 3600, "hourly"), decided(10, 1, "burst"), None];
    add_ietf_headers(&mut response, &decided);
    let h = headers(&response);
    assert_eq!(get(&h, "ratelimit"), Some(r#""burst";r=3;t=1"#));
    assert_eq!(get(&h, "ratelimit-policy"), Some(r#""hourly";q=100;w=3600, "burst";q=10;w=1"#));
    // Nothing has a limit: no fields.
    let mut bare = RateLimitResponse { statuses: vec![DescriptorStatus::default()], ..Default::default() };
    add_ietf_headers(&mut bare, &[None]);
    assert!(bare.response_headers_to_add.is_empty());
}

#[test]
fn policy_names_are_structured_field_strings() {
    assert_eq!(sf_string(r#"a "b" \c"#), r#""a \"b\" \\c""#);
    assert_eq!(sf_string("zoë\n"), r#""zo__""#);
}

#[test]
fn retry_after_jitter_adds_up_to_its_share_and_never_less() {
    assert_eq!(jittered(10, 0.0), 10);
    let drawn: std::collections::BTreeSet<i64> = (0..2_000).map(|_| jittered(10, 0.5)).collect();
    assert_eq!(drawn.first(), Some(&10), "never less than the wait");
    assert_eq!(drawn.last(), Some(&15), "at most the wait and half of it");
    assert_eq!(drawn.len(), 6, "every second in between is drawn: {drawn:?}");
    // A wait too short for the share to reach a second is left as it is.
    assert_eq!(jittered(1, 0.5), 1);
}

#[test]
fn the_denying_limits_response_fills_the_429() {
    let (mut response, mut decided) = passed_empty_and_denied();
    let denial = DenialResponse {
        body: Some(
            Template::parse(
                r#"{"error": "slow down", "limit": {limit}, "per": {window}, "retry_in": {reset}}"#,
            )
            .expect("body"),
        ),
        content_type: Some("application/json".into()),
        headers: vec![("x-quota".into(), Template::parse("{limit} per {window} s").expect("value"))],
    };
    // The passing limit's response is not used; the denying one's is.
    let other = DenialResponse {
        body: Some(Template::parse("wrong").expect("t")),
        content_type: None,
        headers: vec![],
    };
    decided[0].as_mut().expect("d").response = Some(Arc::new(other));
    decided[1].as_mut().expect("d").response = Some(Arc::new(denial));
    add_denial_response(&mut response, &decided);
    assert_eq!(
        String::from_utf8(response.raw_body.clone()).expect("utf-8"),
        r#"{"error": "slow down", "limit": 2, "per": 1, "retry_in": 1}"#
    );
    let h = headers(&response);
    assert_eq!(get(&h, "content-type"), Some("application/json"));
    assert_eq!(get(&h, "x-quota"), Some("2 per 1 s"));
    // An answer that is not OVER_LIMIT (shadow mode) gets none of it.
    let (mut shadowed, decided2) = passed_empty_and_denied();
    shadowed.overall_code = Code::Ok as i32;
    add_denial_response(&mut shadowed, &decided);
    assert!(shadowed.raw_body.is_empty() && shadowed.response_headers_to_add.is_empty());
    let _ = decided2;
}

#[test]
fn a_field_the_generated_headers_hold_keeps_their_one_value() {
    // The config refuses these names; `--limit-header-names` may still pick one a template
    // uses (here `X-Quota`): the field keeps the generated value alone.
    let (mut response, mut decided) = passed_empty_and_denied();
    let names = LimitHeaderNames { limit: "X-Quota".into(), ..LimitHeaderNames::default() };
    add_headers(&mut response, &decided, 0.0);
    add_limit_headers(&mut response, &names);
    let denial = DenialResponse {
        body: None,
        content_type: None,
        headers: vec![
            ("x-quota".into(), Template::parse("{limit} per {window} s").expect("value")),
            ("x-other".into(), Template::parse("{reset}").expect("value")),
        ],
    };
    decided[1].as_mut().expect("d").response = Some(Arc::new(denial));
    add_denial_response(&mut response, &decided);
    let h = headers(&response);
    let quota: Vec<&str> =
        h.iter().filter(|(k, _)| k.eq_ignore_ascii_case("x-quota")).map(|(_, v)| v.as_str()).collect();
    assert_eq!(quota, ["2"], "{h:?}");
    assert_eq!(get(&h, "x-other"), Some("1"));
    assert_eq!(h.iter().filter(|(k, _)| k == "retry-after").count(), 1, "{h:?}");
}
