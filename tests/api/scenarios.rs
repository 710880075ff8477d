//! One scenario suite, run against every store (`store_suite!` instantiates it twice).

use std::time::Duration;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use envoy_types::pb::google::protobuf::UInt64Value;
use tollgate::app::StoreKind;

use crate::support::*;

const POLICY: &str = r#"
domain: api
descriptors:
  - key: user
    rate_limit: { unit: minute, requests_per_unit: 10, name: per-user }
  - key: burst
    rate_limit: { unit: second, requests_per_unit: 2, burst: 4 }
  - key: sliding
    rate_limit: { unit: hour, requests_per_unit: 3, algorithm: sliding_window }
  - key: fixed
    rate_limit: { unit: hour, requests_per_unit: 3, algorithm: fixed_window }
  - key: blocked
    rate_limit: { unit: second, requests_per_unit: 0 }
  - key: free
    rate_limit: { unlimited: true }
  - key: allow
  - key: shadow
    shadow_mode: true
    rate_limit: { unit: hour, requests_per_unit: 1 }
  - key: path
    value: "/shared/*"
    share_threshold: true
    rate_limit: { unit: hour, requests_per_unit: 2 }
  - key: path
    value: "/own/*"
    rate_limit: { unit: hour, requests_per_unit: 2 }
  - key: tier
    value: gold
    rate_limit: { unit: hour, requests_per_unit: 100, name: gold, replaces: [{ name: per-user }] }
  - key: quota_a
    quota_mode: true
    rate_limit: { unit: hour, requests_per_unit: 1 }
  - key: quota_b
    quota_mode: true
    rate_limit: { unit: hour, requests_per_unit: 2 }
  - key: quota_shadow
    quota_mode: true
    shadow_mode: true
    rate_limit: { unit: hour, requests_per_unit: 1 }
"#;

async fn app(store: StoreKind) -> TestApp {
    spawn_app(store, &[("api.yaml", POLICY)]).await
}

pub async fn gcra_burst_is_exact_and_refills_one_per_emission(store: StoreKind) {
    let app = app(store).await;
    let req = request("api", &[&[("burst", "b1")]]);
    // 2/s with burst 4: 5 immediate requests, exactly 4 pass.
    assert_eq!(app.allowed_of(5, &req).await, 4);
    // One emission interval (0.5 s) later exactly one more; the second would need 1 s.
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(app.allowed_of(3, &req).await, 1);
}

pub async fn reports_limit_remaining_and_reset(store: StoreKind) {
    let app = app(store).await;
    let req = request("api", &[&[("user", "alice")]]);
    let first = app.check(req.clone()).await;
    let status = &first.statuses[0];
    assert!(is_ok(status));
    let limit = status.current_limit.as_ref().expect("current_limit");
    assert_eq!(
        (limit.requests_per_unit, limit.unit, limit.name.as_str()),
        (10, Unit::Minute as i32, "per-user")
    );
    assert_eq!(status.limit_remaining, 9);
    // Allowed: time until full again = one emission interval (6 s).
    assert_eq!(status.duration_until_reset.as_ref().map(|d| d.seconds), Some(6));
    for _ in 0..9 {
        assert!(!over(&app.check(req.clone()).await));
    }
    let denied = app.check(req.clone()).await;
    assert!(over(&denied));
    let status = &denied.statuses[0];
    assert_eq!(status.limit_remaining, 0);
    // Denied: until this request would pass, rounded up to whole seconds (never 0).
    let reset = status.duration_until_reset.as_ref().map(|d| d.seconds).unwrap_or(0);
    assert!((1..=6).contains(&reset), "reset {reset}");
    // Another user has their own bucket.
    assert!(!over(&app.check(request("api", &[&[("user", "bob")]])).await));
}

pub async fn window_algorithms_count_exactly(store: StoreKind) {
    let app = app(store).await;
    for key in ["sliding", "fixed"] {
        let req = request("api", &[&[(key, "x")]]);
        let mut remaining = vec![];
        for _ in 0..3 {
            let response = app.check(req.clone()).await;
            assert!(!over(&response), "{key}");
            remaining.push(response.statuses[0].limit_remaining);
        }
        assert_eq!(remaining, vec![2, 1, 0], "{key}");
        let denied = app.check(req.clone()).await;
        assert!(over(&denied), "{key}");
        let reset = denied.statuses[0].duration_until_reset.as_ref().map(|d| d.seconds).unwrap_or(0);
        assert!((1..=7200).contains(&reset), "{key} reset {reset}");
    }
}

pub async fn unmatched_unlimited_allow_and_unknown_domain(store: StoreKind) {
    let app = app(store).await;
    let response = app
        .check(request(
            "api",
            &[&[("nobody", "x")], &[("free", "x")], &[("allow", "x")], &[("user", "a"), ("deeper", "x")]],
        ))
        .await;
    assert!(!over(&response));
    let s = &response.statuses;
    assert_eq!(s.len(), 4);
    assert!(s.iter().all(is_ok));
    assert!(s[0].current_limit.is_none() && s[2].current_limit.is_none() && s[3].current_limit.is_none());
    assert!(s[1].current_limit.is_none());
    assert_eq!(s[1].limit_remaining, u32::MAX);
    let unknown = app.check(request("nope", &[&[("user", "a")], &[("x", "y")]])).await;
    assert!(!over(&unknown));
    assert_eq!(unknown.statuses.len(), 2);
    assert!(unknown.statuses.iter().all(|st| is_ok(st) && st.current_limit.is_none()));
}

pub async fn zero_limit_blocks_and_shadow_mode_only_reports(store: StoreKind) {
    let app = app(store).await;
    assert!(over(&app.check(request("api", &[&[("blocked", "x")]])).await));
    let req = request("api", &[&[("shadow", "x")]]);
    for _ in 0..3 {
        let response = app.check(req.clone()).await;
        assert!(!over(&response));
        assert!(is_ok(&response.statuses[0]));
        assert!(response.statuses[0].current_limit.is_some());
    }
}

pub async fn wildcards_share_only_with_share_threshold(store: StoreKind) {
    let app = app(store).await;
    let shared = |p: &'static str| request("api", &[&[("path", p)]]);
    assert!(!over(&app.check(shared("/shared/a")).await));
    assert!(!over(&app.check(shared("/shared/b")).await));
    assert!(over(&app.check(shared("/shared/c")).await), "one bucket for every /shared/* value");
    assert!(!over(&app.check(shared("/own/a")).await));
    assert!(!over(&app.check(shared("/own/a")).await));
    assert!(over(&app.check(shared("/own/a")).await));
    assert!(!over(&app.check(shared("/own/b")).await), "each /own/* value has its own bucket");
}

pub async fn replaces_drops_the_replaced_limit(store: StoreKind) {
    let app = app(store).await;
    for _ in 0..10 {
        app.check(request("api", &[&[("user", "carol")]])).await;
    }
    assert!(over(&app.check(request("api", &[&[("user", "carol")]])).await));
    // With the gold tier in the same request, per-user no longer applies.
    let response = app.check(request("api", &[&[("user", "carol")], &[("tier", "gold")]])).await;
    assert!(!over(&response));
    assert!(response.statuses[0].current_limit.is_none());
    assert_eq!(response.statuses[1].current_limit.as_ref().map(|l| l.name.as_str()), Some("gold"));
}

pub async fn hits_addend_peek_and_refund(store: StoreKind) {
    let app = app(store).await;
    let mut req = request("api", &[&[("user", "dave")]]);
    req.hits_addend = 4;
    assert_eq!(app.check(req.clone()).await.statuses[0].limit_remaining, 6);
    // A descriptor's explicit 0 is a peek: nothing consumed.
    let mut peek = request("api", &[&[("user", "dave")]]);
    peek.descriptors[0].hits_addend = Some(UInt64Value { value: 0 });
    for _ in 0..3 {
        let response = app.check(peek.clone()).await;
        assert!(!over(&response));
        assert_eq!(response.statuses[0].limit_remaining, 6);
    }
    // The descriptor's own addend wins over the request's.
    let mut own = req.clone();
    own.descriptors[0].hits_addend = Some(UInt64Value { value: 1 });
    assert_eq!(app.check(own).await.statuses[0].limit_remaining, 5);
    // Too many hits at once: denied, nothing consumed.
    let mut big = req.clone();
    big.hits_addend = 6;
    assert!(over(&app.check(big).await));
    // Negative hits give quota back, never past full.
    let mut refund = request("api", &[&[("user", "dave")]]);
    refund.descriptors[0].is_negative_hits = true;
    refund.descriptors[0].hits_addend = Some(UInt64Value { value: 3 });
    let response = app.check(refund.clone()).await;
    assert!(!over(&response));
    assert_eq!(response.statuses[0].limit_remaining, 8);
    refund.descriptors[0].hits_addend = Some(UInt64Value { value: 50 });
    assert_eq!(app.check(refund).await.statuses[0].limit_remaining, 10);
}

pub async fn denied_descriptors_consume_nothing_and_others_still_charge(store: StoreKind) {
    let app = app(store).await;
    let response = app.check(request("api", &[&[("blocked", "x")], &[("user", "erin")]])).await;
    assert!(over(&response));
    assert!(!is_ok(&response.statuses[0]));
    assert!(is_ok(&response.statuses[1]));
    assert_eq!(response.statuses[1].limit_remaining, 9, "the allowed descriptor is charged");
    let fixed = request("api", &[&[("fixed", "y")]]);
    let mut big = fixed.clone();
    big.hits_addend = 3;
    assert!(!over(&app.check(big.clone()).await));
    assert!(over(&app.check(big).await), "3 more do not fit");
    let mut refund = fixed.clone();
    refund.descriptors[0].is_negative_hits = true;
    refund.hits_addend = 1;
    assert_eq!(app.check(refund).await.statuses[0].limit_remaining, 1);
}

pub async fn request_limit_override_gets_its_own_bucket(store: StoreKind) {
    let app = app(store).await;
    let mut req = request("api", &[&[("user", "frank")]]);
    req.descriptors[0].limit = Some(RateLimitOverride { requests_per_unit: 2, unit: 2 /* minute */ });
    assert!(!over(&app.check(req.clone()).await));
    let second = app.check(req.clone()).await;
    assert!(!over(&second));
    assert_eq!(second.statuses[0].current_limit.as_ref().map(|l| l.requests_per_unit), Some(2));
    assert!(over(&app.check(req.clone()).await));
    // The configured per-user bucket was not touched.
    assert_eq!(app.check(request("api", &[&[("user", "frank")]])).await.statuses[0].limit_remaining, 9);
}

pub async fn quota_mode_is_over_only_when_every_quota_is_over(store: StoreKind) {
    let app = app(store).await;
    let req = request("api", &[&[("quota_a", "x")], &[("quota_b", "x")]]);
    assert!(!over(&app.check(req.clone()).await)); // a: 0 left, b: 1 left
    let second = app.check(req.clone()).await; // a over, b ok
    assert!(!over(&second));
    assert!(!is_ok(&second.statuses[0]));
    assert!(over(&app.check(req.clone()).await)); // both over
}

pub async fn a_quota_rule_in_shadow_mode_never_denies(store: StoreKind) {
    let app = app(store).await;
    let req = request("api", &[&[("quota_shadow", "x")]]);
    assert!(!over(&app.check(req.clone()).await));
    let second = app.check(req.clone()).await; // over its quota: shadow reports, never denies
    assert!(!over(&second), "a shadow rule made the overall code OVER_LIMIT");
    assert!(is_ok(&second.statuses[0]));
    assert_eq!(second.statuses[0].limit_remaining, 0);
}

/// Envoy sends a descriptor without entries when every action of a `rate_limits` entry is
/// `skip_if_absent` and none applied: it matches nothing, and the request's other
/// descriptors are still decided (refusing the request would make Envoy fail open for all).
pub async fn a_descriptor_without_entries_matches_nothing_and_the_others_are_decided(store: StoreKind) {
    let app = app(store).await;
    let req = request("api", &[&[], &[("fixed", "no-entries")]]);
    let mut remaining = Vec::new();
    for _ in 0..4 {
        let response = app.check(req.clone()).await;
        assert!(is_ok(&response.statuses[0]) && response.statuses[0].current_limit.is_none());
        remaining.push((over(&response), response.statuses[1].limit_remaining));
    }
    assert_eq!(remaining, [(false, 2), (false, 1), (false, 0), (true, 0)], "the other descriptor is limited");
}

pub async fn invalid_requests_are_invalid_argument(store: StoreKind) {
    let app = app(store).await;
    let cases = [request("", &[&[("user", "a")]]), request("api", &[]), request("api", &[&[("", "a")]])];
    for case in cases {
        let err = app.call(case).await.expect_err("invalid");
        assert_eq!(err.code(), tonic::Code::InvalidArgument);
        assert!(!err.message().is_empty());
    }
    // The server is still serving.
    assert!(!over(&app.check(request("api", &[&[("user", "ok")]])).await));
}

macro_rules! store_suite {
    ($store:ident, $kind:expr, [$($test:ident),* $(,)?]) => {
        mod $store {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $test() {
                    super::$test($kind).await
                }
            )*
        }
    };
}

macro_rules! all_stores {
    ($($test:ident),* $(,)?) => {
        store_suite!(memory, tollgate::app::StoreKind::Memory, [$($test),*]);
        store_suite!(redis, tollgate::app::StoreKind::Redis, [$($test),*]);
    };
}

all_stores!(
    gcra_burst_is_exact_and_refills_one_per_emission,
    reports_limit_remaining_and_reset,
    window_algorithms_count_exactly,
    unmatched_unlimited_allow_and_unknown_domain,
    zero_limit_blocks_and_shadow_mode_only_reports,
    wildcards_share_only_with_share_threshold,
    replaces_drops_the_replaced_limit,
    hits_addend_peek_and_refund,
    denied_descriptors_consume_nothing_and_others_still_charge,
    request_limit_override_gets_its_own_bucket,
    quota_mode_is_over_only_when_every_quota_is_over,
    a_quota_rule_in_shadow_mode_never_denies,
    a_descriptor_without_entries_matches_nothing_and_the_others_are_decided,
    invalid_requests_are_invalid_argument,
);
