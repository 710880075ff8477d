//! `overdraft: true` × a huge report (issue 37, hole 4), through the whole service on the
//! memory store and on a real redis-server: a stream-end charge of 10^12 tokens on a budget
//! of 1,000 an hour leaves it full again within its stated bound (GCRA: tolerance + one
//! unit = 2 h with the default burst; a fixed window at its end; a sliding window at the
//! end of the next one), and a peek's `duration_until_reset` says so. No sleep: the bound
//! is read from the answers, which are exact.

use envoy_types::pb::google::protobuf::UInt64Value;
use tollgate::app::StoreKind;

use crate::support::*;

const POLICY: &str = r#"
domain: ai
descriptors:
  - key: gcra
    rate_limit: { unit: hour, requests_per_unit: 1000, overdraft: true }
  - key: fixed
    rate_limit: { unit: hour, requests_per_unit: 1000, algorithm: fixed_window, overdraft: true }
  - key: sliding
    rate_limit: { unit: hour, requests_per_unit: 1000, algorithm: sliding_window, overdraft: true }
"#;

const HOUR_S: i64 = 3_600;
/// One emission of 1,000 an hour, in whole seconds rounded up (3.6 s).
const EMISSION_S: i64 = 4;

/// A one-descriptor request charging `hits` (0: a peek), as Envoy's stream-end call sends
/// a reported usage (the descriptor's own `hits_addend`, 64 bits wide).
fn charge(key: &str, hits: u64) -> envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest {
    let mut req = request("ai", &[&[(key, "alice")]]);
    req.descriptors[0].hits_addend = Some(UInt64Value { value: hits });
    req
}

/// `(over, duration_until_reset in s)` of the request's only descriptor.
async fn answer(app: &TestApp, key: &str, hits: u64) -> (bool, i64) {
    let response = app.check(charge(key, hits)).await;
    let reset = response.statuses[0].duration_until_reset.as_ref().map(|d| d.seconds);
    (over(&response), reset.expect("a limited descriptor reports its reset"))
}

/// Each algorithm: (key, the bound on being full again, the bound on one hit fitting).
const CASES: [(&str, i64, i64); 3] = [
    ("gcra", 2 * HOUR_S, HOUR_S + EMISSION_S),
    ("fixed", HOUR_S, HOUR_S),
    ("sliding", 2 * HOUR_S, HOUR_S + EMISSION_S),
];

async fn a_huge_report_leaves_the_budget_full_within_its_bound(store: StoreKind) {
    let app = spawn_app(store, &[("ai.yaml", POLICY)]).await;
    for (key, full_within, fits_within) in CASES {
        // The report: recorded (overdraft), answered over the limit.
        let (denied, fits) = answer(&app, key, 1_000_000_000_000).await;
        assert!(denied, "{key}: 10^12 tokens are past the budget");
        assert!(fits <= fits_within, "{key}: one token fits again in {fits} s, bound {fits_within} s");
        // The request-time peek: denied, and full again within the bound.
        let (denied, full) = answer(&app, key, 0).await;
        assert!(denied, "{key}: the budget is spent");
        assert!(full <= full_within, "{key}: full again in {full} s, bound {full_within} s");
        // A second report moves nothing past the bound either.
        answer(&app, key, u64::MAX).await;
        let (_, full) = answer(&app, key, 0).await;
        assert!(full <= full_within, "{key}: after u64::MAX, full again in {full} s");
    }
    // GCRA's bound is exact: the debt is one unit, the TAT tolerance + unit ahead.
    let (_, full) = answer(&app, "gcra", 0).await;
    assert!(full > 2 * HOUR_S - 60, "the debt is not forgotten either: {full} s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_a_huge_report_leaves_the_budget_full_within_its_bound() {
    a_huge_report_leaves_the_budget_full_within_its_bound(StoreKind::Memory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_a_huge_report_leaves_the_budget_full_within_its_bound() {
    a_huge_report_leaves_the_budget_full_within_its_bound(StoreKind::Redis).await;
}
