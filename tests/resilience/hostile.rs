//! Malformed and oversized requests: each gets the specified answer, and the server stays up.

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::google::protobuf::UInt64Value;
use tollgate::app::StoreKind;

use crate::support::*;

const POLICIES: [(&str, &str); 2] = [
    ("open.yaml", "domain: open_d\nfailure_mode: open\ndescriptors:\n  - key: k\n    rate_limit: { unit: hour, requests_per_unit: 1 }\n"),
    ("closed.yaml", "domain: closed_d\nfailure_mode: closed\ndescriptors:\n  - key: k\n    rate_limit: { unit: hour, requests_per_unit: 1 }\n    descriptors:\n      - key: j\n        rate_limit: { unit: hour, requests_per_unit: 1 }\n"),
];

fn many_descriptors(domain: &str, n: usize) -> RateLimitRequest {
    let one: &[(&str, &str)] = &[("k", "v")];
    request(domain, &vec![one; n])
}

fn many_entries(domain: &str, n: usize) -> RateLimitRequest {
    let entries: Vec<(&str, &str)> = vec![("k", "v"); n];
    request(domain, &[&entries])
}

async fn oversized_answers(store: StoreKind) {
    let app = spawn_app(store, &POLICIES).await;
    let long = "x".repeat(4097);
    let cases = [
        ("descriptors", many_descriptors("open_d", 65), many_descriptors("closed_d", 65)),
        ("entries", many_entries("open_d", 33), many_entries("closed_d", 33)),
        ("value_bytes", request("open_d", &[&[("k", &long)]]), request("closed_d", &[&[("k", &long)]])),
    ];
    for (reason, open, closed) in cases {
        let response = app.check(open.clone()).await;
        assert!(!over(&response), "{reason}: open domain lets it through");
        assert_eq!(response.statuses.len(), open.descriptors.len());
        assert!(over(&app.check(closed).await), "{reason}: closed domain denies");
        let series = format!("tollgate_oversized_requests_total{{reason=\"{reason}\"}}");
        assert_eq!(metric(&app.metrics().await, &series), Some(2.0), "{reason} counted");
    }
    // At the bounds: served normally (the first descriptor is charged, the other 63 of the
    // same bucket find it empty).
    let at_bounds = app.check(many_descriptors("open_d", 64)).await;
    assert_eq!(at_bounds.statuses.len(), 64);
    assert!(at_bounds.statuses[0].current_limit.is_some() && is_ok(&at_bounds.statuses[0]));
    assert!(!is_ok(&at_bounds.statuses[1]));
    let at_bound = "y".repeat(4096);
    let first = app.check(request("closed_d", &[&[("k", &at_bound)]])).await;
    assert!(!over(&first) && first.statuses[0].current_limit.is_some(), "4096 bytes: limited, not rejected");
    assert!(over(&app.check(request("closed_d", &[&[("k", &at_bound)]])).await), "its own bucket");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_requests_are_answered_by_the_failure_policy_memory() {
    oversized_answers(StoreKind::Memory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_requests_are_answered_by_the_failure_policy_redis() {
    oversized_answers(StoreKind::Redis).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_and_colliding_input_touches_no_other_bucket() {
    let mut app = spawn_app(StoreKind::Redis, &POLICIES).await;
    // Values crafted to collide with other buckets once joined: separators, length-prefix
    // look-alikes, Redis Cluster hash-tag braces, control characters, invalid-looking text.
    let crafted = ["a", "1:a", "a1:j1:b", "{a}", "{", "}", "a\u{0}b", "a\nb", "\u{7f}", "ä", "*", ""];
    for value in crafted {
        let response = app.check(request("closed_d", &[&[("k", value)]])).await;
        assert!(!over(&response), "{value:?} starts with a full bucket of its own");
    }
    // Nested: (k="a1:j", j="b") must not be (k="a", j="1:j...") or any other.
    assert!(!over(&app.check(request("closed_d", &[&[("k", "a"), ("j", "1:jb")]])).await));
    assert!(!over(&app.check(request("closed_d", &[&[("k", "a1:j"), ("j", "b")]])).await));
    let keys = app.redis().cli(&["DBSIZE"]);
    assert_eq!(keys, (crafted.len() + 2).to_string(), "one key per distinct bucket");
    assert!(!app.redis().cli(&["KEYS", "*"]).contains('{'), "no client braces reach Redis keys");

    // Structural errors: INVALID_ARGUMENT, not a failure-policy answer.
    for bad in [request("", &[&[("k", "v")]]), request("closed_d", &[]), request("closed_d", &[&[("", "v")]])]
    {
        assert_eq!(app.call(bad).await.expect_err("invalid").code(), tonic::Code::InvalidArgument);
    }
    // Absurd hits: denied, no overflow, no panic.
    let mut huge = request("closed_d", &[&[("k", "huge")]]);
    huge.hits_addend = u32::MAX;
    assert!(over(&app.check(huge).await));
    let mut huge = request("closed_d", &[&[("k", "huge64")]]);
    huge.descriptors[0].hits_addend = Some(UInt64Value { value: u64::MAX });
    assert!(over(&app.check(huge).await));
    // An override with an unknown unit falls back to the configured rule.
    let mut bad_unit = request("closed_d", &[&[("k", "override")]]);
    bad_unit.descriptors[0].limit = Some(RateLimitOverride { requests_per_unit: 100, unit: 99 });
    let response = app.check(bad_unit).await;
    assert_eq!(response.statuses[0].current_limit.as_ref().map(|l| l.requests_per_unit), Some(1));
    // A message larger than tonic's 4 MiB decode limit: an error from tonic, server alive.
    let big = "z".repeat(5 * 1024 * 1024);
    let status = app.call(request("closed_d", &[&[("k", &big)]])).await.expect_err("too large");
    assert_eq!(status.code(), tonic::Code::OutOfRange, "{status}");
    assert!(!over(&app.check(request("open_d", &[&[("k", "alive")]])).await), "still serving");
}

#[test]
fn memory_store_keeps_its_cap_under_a_flood_of_random_keys() {
    use tollgate::algorithm::{Algorithm, Hits, Params};
    use tollgate::store::{Charge, MemoryStore};
    // 1,000,000 distinct keys into a store capped at 100,000 (a tenth of the default, to
    // keep a debug build fast); half of the early buckets expire during the flood.
    let store = MemoryStore::new(100_000);
    let t0 = 1_700_000_000_000_000u64;
    let short = Params {
        algorithm: Algorithm::Gcra,
        limit: 10,
        unit_us: 1_000_000,
        burst: 10,
        penalty_us: 0,
        period: None,
    };
    let long = Params {
        algorithm: Algorithm::Gcra,
        limit: 10,
        unit_us: 3_600_000_000,
        burst: 10,
        penalty_us: 0,
        period: None,
    };
    for i in 0..1_000_000u64 {
        let params = if i % 2 == 0 { short } else { long };
        let charge = Charge { key: format!("flood:{i:x}"), params, hits: Hits::Consume(1) };
        store.charge_at(&charge, t0 + i * 10);
    }
    let stats = store.stats();
    assert!(stats.keys <= store.capacity(), "{stats:?}");
    assert!(stats.lossless_evictions > 0, "expired buckets were evicted first: {stats:?}");
}
