//! `respond` on plans of several limits per rule (`plan`'s test config): which limit a
//! status names, the failure policy per descriptor, and the headers of the true window.

use super::*;
use crate::algorithm::Algorithm;
use crate::algorithm::Decision;
use crate::config::{rule, FailureMode, Limit as ConfigLimit};
use crate::service::headers;
use crate::service::plan::plan;
use crate::service::plan::tests::{descriptor, snapshot};
use crate::service::respond::{self, reported};
use crate::store::{StoreError, NOT_EVALUATED};
use crate::telemetry::metrics::Outcome;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;

fn ok(remaining: u64) -> Result<Decision, StoreError> {
    Ok(Decision { allowed: true, remaining, reset_us: 1_000_000 })
}

fn denied() -> Result<Decision, StoreError> {
    Ok(Decision { allowed: false, remaining: 0, reset_us: 3_000_000 })
}

#[test]
fn the_status_names_the_denying_limit_else_the_most_constraining() {
    let snapshot = snapshot();
    let domain = snapshot.domain("d").expect("d");
    let (plans, _, _) = plan(domain, &[descriptor(&[("api_key", "k1")])], 0, "");
    // burst 10/20 left (50 %), daily 40,000/50,000 left (80 %): burst is tighter.
    let (response, verdicts) = respond::respond(&plans, &[ok(10), ok(40_000)], FailureMode::Open, 0.8);
    let status = &response.statuses[0];
    assert_eq!(status.code, Code::Ok as i32);
    assert_eq!(status.current_limit.as_ref().map(|l| l.name.as_str()), Some("burst"));
    assert_eq!(status.limit_remaining, 10);
    // burst 19/20 (95 %), daily 100/50,000 (0.2 %): daily is tighter.
    let (response, _) = respond::respond(&plans, &[ok(19), ok(100)], FailureMode::Open, 0.8);
    assert_eq!(response.statuses[0].current_limit.as_ref().map(|l| l.name.as_str()), Some("daily"));
    assert_eq!(verdicts[0].map(|v| v.limit), Some(0));
    // daily denies: OVER_LIMIT, named daily, with its reset.
    let (response, verdicts) = respond::respond(&plans, &[ok(19), denied()], FailureMode::Open, 0.8);
    assert_eq!(response.overall_code, Code::OverLimit as i32);
    let status = &response.statuses[0];
    assert_eq!(status.current_limit.as_ref().map(|l| l.name.as_str()), Some("daily"));
    assert_eq!(status.duration_until_reset.as_ref().map(|d| d.seconds), Some(3));
    assert_eq!(verdicts[0].map(|v| (v.outcome, v.limit)), Some((Outcome::OverLimit, 1)));
}

#[test]
fn a_descriptor_the_store_did_not_evaluate_is_ok_without_a_limit() {
    let snapshot = snapshot();
    let domain = snapshot.domain("d").expect("d");
    let (plans, _, _) = plan(domain, &[descriptor(&[("api_key", "k1")])], 0, "");
    let (response, _) =
        respond::respond(&plans, &[Ok(NOT_EVALUATED), Ok(NOT_EVALUATED)], FailureMode::Closed, 0.8);
    assert_eq!(response.statuses[0].code, Code::Ok as i32);
    assert!(response.statuses[0].current_limit.is_none());
}

#[test]
fn a_failed_store_call_applies_the_failure_policy_to_the_descriptor() {
    let snapshot = snapshot();
    let domain = snapshot.domain("d").expect("d");
    let (plans, _, _) = plan(domain, &[descriptor(&[("api_key", "k1")])], 0, "");
    let (response, verdicts) =
        respond::respond(&plans, &[ok(5), Err(StoreError::Timeout)], FailureMode::Closed, 0.8);
    assert_eq!(response.overall_code, Code::OverLimit as i32);
    assert_eq!(verdicts[0].map(|v| v.outcome), Some(Outcome::FailureClosed));
}

fn limit(count: u64, unit: Unit, multiplier: u64) -> ConfigLimit {
    ConfigLimit {
        name: None,
        params: rule::params_window(Algorithm::Gcra, count, unit, multiplier, None),
        unit,
        multiplier,
        rollout: rule::Rollout::FULL,
        response: None,
        overdraft: false,
        calendar: None,
    }
}

#[test]
fn current_limit_rescales_a_window_to_the_smallest_standard_unit_it_divides() {
    assert_eq!(reported(&limit(2, Unit::Second, 30)), (4, Unit::Minute));
    assert_eq!(reported(&limit(7, Unit::Minute, 5)), (84, Unit::Hour));
    assert_eq!(reported(&limit(7, Unit::Day, 7)), (7, Unit::Week));
    assert_eq!(reported(&limit(3, Unit::Day, 3)), (30, Unit::Month));
    assert_eq!(reported(&limit(9, Unit::Minute, 1)), (9, Unit::Minute));
    // 11 days divides no standard unit: the limit's own unit and count.
    assert_eq!(reported(&limit(5, Unit::Day, 11)), (5, Unit::Day));
    // The scaled count overflows u32: own unit and count.
    assert_eq!(reported(&limit(4_000_000_000, Unit::Second, 30)), (4_000_000_000, Unit::Second));
}

#[test]
fn response_headers_write_the_true_window() {
    let snapshot = snapshot();
    let domain = snapshot.domain("d").expect("d");
    let (plans, _, _) = plan(domain, &[descriptor(&[("api_key", "k1")])], 0, "");
    let (mut response, _) = respond::respond(&plans, &[ok(19), ok(10)], FailureMode::Open, 0.8);
    // daily decides (10 of 50,000 left): 50,000 per 7 days, reported per... its own unit.
    let daily = headers::Decided { count: 50_000, window: 7 * 86_400, ..Default::default() };
    headers::add_headers(&mut response, &[Some(daily)], 0.0);
    let limit =
        response.response_headers_to_add.iter().find(|h| h.key == "x-ratelimit-limit").expect("header");
    assert_eq!(limit.value, "50000, 50000;w=604800");
}
