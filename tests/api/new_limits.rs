//! Several limits per descriptor, `charge: all_or_nothing` and windows of several units,
//! over gRPC, on the memory store and on a real Redis (`new_limits_suite!`): the same
//! answers on both.

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use tollgate::app::StoreKind;

use crate::support::*;

const POLICY: &str = r#"
domain: api
descriptors:
  - key: api_key
    rate_limits:
      - { name: burst, unit: hour, requests_per_unit: 2 }
      - { name: daily, unit: day, requests_per_unit: 3, algorithm: fixed_window }
  - key: bypass
    rate_limit: { name: bypass, unit: hour, requests_per_unit: 1000, replaces: [{ name: burst }] }
  - key: window
    rate_limit: { name: half-minute, unit: second, unit_multiplier: 30, requests_per_unit: 2 }
"#;

fn joint(charge: &str) -> String {
    format!(
        r#"
domain: joint
charge: {charge}
descriptors:
  - key: api_key
    rate_limit: {{ name: per-key, unit: hour, requests_per_unit: 2 }}
  - key: client
    rate_limit: {{ name: per-client, unit: hour, requests_per_unit: 3 }}
  - key: same
    rate_limit: {{ name: same, unit: hour, requests_per_unit: 3 }}
  - key: shadow
    shadow_mode: true
    rate_limit: {{ name: shadow, unit: hour, requests_per_unit: 1 }}
"#
    )
}

fn named(response: &RateLimitResponse, i: usize) -> String {
    response.statuses[i].current_limit.as_ref().map(|l| l.name.clone()).unwrap_or_default()
}

pub async fn a_denial_by_one_limit_charges_none_of_the_others(store: StoreKind) {
    let app = spawn_app(store, &[("api.yaml", POLICY)]).await;
    let alice = request("api", &[&[("api_key", "alice")]]);
    let first = app.check(alice.clone()).await;
    assert!(!over(&first));
    // burst has 1 of 2 left (50 %), daily 2 of 3 (67 %): burst is the most constraining.
    assert_eq!((named(&first, 0), first.statuses[0].limit_remaining), ("burst".into(), 1));
    assert!(!over(&app.check(alice.clone()).await));
    let denied = app.check(alice.clone()).await;
    assert!(over(&denied));
    assert_eq!(named(&denied, 0), "burst", "the denying limit is reported");
    // daily was charged twice: with burst replaced, one more passes, then daily denies.
    let bypass = request("api", &[&[("api_key", "alice")], &[("bypass", "1")]]);
    let passed = app.check(bypass.clone()).await;
    assert!(!over(&passed), "{passed:?}");
    assert_eq!((named(&passed, 0), passed.statuses[0].limit_remaining), ("daily".into(), 0));
    let over_daily = app.check(bypass).await;
    assert!(over(&over_daily));
    assert_eq!(named(&over_daily, 0), "daily");
}

pub async fn a_window_of_several_units_is_reported_in_a_standard_unit(store: StoreKind) {
    let app = spawn_app(store, &[("api.yaml", POLICY)]).await;
    let req = request("api", &[&[("window", "w1")]]);
    let first = app.check(req.clone()).await;
    let limit = first.statuses[0].current_limit.clone().expect("a limit");
    assert_eq!((limit.requests_per_unit, limit.unit), (4, Unit::Minute as i32), "2 per 30 s = 4 per minute");
    assert!(!over(&app.check(req.clone()).await));
    let denied = app.check(req).await;
    assert!(over(&denied));
    // The bucket refills one request per 15 s: the wait is at most that, rounded up.
    let reset = denied.statuses[0].duration_until_reset.expect("reset").seconds;
    assert!((1..=15).contains(&reset), "{reset}");
}

/// Codes of: alice, alice, alice, bob, carol (one client for all).
async fn codes(store: StoreKind, charge: &str) -> Vec<bool> {
    let app = spawn_app(store, &[("joint.yaml", &joint(charge))]).await;
    let mut passed = Vec::new();
    for key in ["alice", "alice", "alice", "bob", "carol"] {
        let response = app.check(request("joint", &[&[("api_key", key)], &[("client", "c1")]])).await;
        passed.push(!over(&response));
    }
    passed
}

pub async fn all_or_nothing_charges_nothing_for_a_denied_request(store: StoreKind) {
    // Per descriptor: alice's third request still charges the client; bob is its fourth.
    assert_eq!(codes(store, "per_descriptor").await, [true, true, false, false, false]);
    // All or nothing: bob is the client's third request.
    assert_eq!(codes(store, "all_or_nothing").await, [true, true, false, true, false]);
}

pub async fn all_or_nothing_sees_a_key_twice_in_one_request(store: StoreKind) {
    let app = spawn_app(store, &[("joint.yaml", &joint("all_or_nothing"))]).await;
    let twice = request("joint", &[&[("same", "s")], &[("same", "s")]]);
    assert!(!over(&app.check(twice.clone()).await), "2 of 3");
    // The second member does not fit after the first: neither is charged.
    let denied = app.check(twice).await;
    assert!(over(&denied));
    assert!(is_ok(&denied.statuses[0]) && !is_ok(&denied.statuses[1]), "{denied:?}");
    assert!(!over(&app.check(request("joint", &[&[("same", "s")]])).await), "the third still fits");
}

pub async fn a_shadow_rule_neither_denies_nor_blocks_the_charge_of_an_all_or_nothing_request(
    store: StoreKind,
) {
    let app = spawn_app(store, &[("joint.yaml", &joint("all_or_nothing"))]).await;
    let req = request("joint", &[&[("shadow", "x")], &[("client", "c2")]]);
    for _ in 0..3 {
        assert!(!over(&app.check(req.clone()).await));
    }
    // The shadow rule was over from the second request on, yet the client was charged 3 times.
    assert!(over(&app.check(request("joint", &[&[("client", "c2")]])).await));
}

macro_rules! new_limits_suite {
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

macro_rules! on_both_stores {
    ($($test:ident),* $(,)?) => {
        new_limits_suite!(memory, tollgate::app::StoreKind::Memory, [$($test),*]);
        new_limits_suite!(redis, tollgate::app::StoreKind::Redis, [$($test),*]);
    };
}

on_both_stores!(
    a_denial_by_one_limit_charges_none_of_the_others,
    a_window_of_several_units_is_reported_in_a_standard_unit,
    all_or_nothing_charges_nothing_for_a_denied_request,
    all_or_nothing_sees_a_key_twice_in_one_request,
    a_shadow_rule_neither_denies_nor_blocks_the_charge_of_an_all_or_nothing_request,
);
