use std::path::PathBuf;
use std::time::Duration;

use envoy_types::pb::google::protobuf::UInt64Value;

use super::super::plan::{hits, plan, Plan};
use super::super::wire::{self, Entry, RateLimitDescriptor};
use super::*;
use crate::algorithm::Hits;
use crate::config::Snapshot;

fn descriptor(entries: &[(&str, &str)]) -> RateLimitDescriptor {
    RateLimitDescriptor::from_entries(entries.iter().copied())
}

fn snapshot(yaml: &str) -> Snapshot {
    crate::config::compile_sources(&[(PathBuf::from("t.yaml"), yaml.to_string())]).expect("valid config")
}

#[test]
fn validation_names_the_problem() {
    let ok =
        RateLimitRequest { domain: "d".into(), descriptors: vec![descriptor(&[("k", "v")])], hits_addend: 0 };
    assert!(validate(&ok).is_ok());
    let mut r = ok.clone();
    r.domain.clear();
    assert!(validate(&r).unwrap_err().contains("domain"));
    let mut r = ok.clone();
    r.descriptors.clear();
    assert!(validate(&r).unwrap_err().contains("descriptor"));
    let mut r = ok.clone();
    r.descriptors.push(descriptor(&[]));
    assert!(validate(&r).is_ok(), "a descriptor without entries is Envoy's skip_if_absent, not an error");
    let mut r = ok;
    r.descriptors[0].entries.push(Entry::new("", "x"));
    assert_eq!(validate(&r).unwrap_err(), "descriptors[0].entries[1] has an empty key");
}

#[test]
fn grpc_timeout_units() {
    let mut m = MetadataMap::new();
    assert_eq!(grpc_timeout(&m), None);
    for (raw, want) in [
        ("20m", Duration::from_millis(20)),
        ("3S", Duration::from_secs(3)),
        ("1M", Duration::from_secs(60)),
        ("1H", Duration::from_secs(3600)),
        ("500u", Duration::from_micros(500)),
        ("7n", Duration::from_nanos(7)),
    ] {
        m.insert("grpc-timeout", raw.parse().expect("ascii"));
        assert_eq!(grpc_timeout(&m), Some(want), "{raw}");
    }
    m.insert("grpc-timeout", "x".parse().expect("ascii"));
    assert_eq!(grpc_timeout(&m), None);
}

#[test]
fn hits_follow_descriptor_then_request() {
    let mut d = descriptor(&[("k", "v")]);
    assert_eq!(hits(&d, 0), Hits::Consume(1));
    assert_eq!(hits(&d, 5), Hits::Consume(5));
    d.hits_addend = Some(UInt64Value { value: 0 });
    assert_eq!(hits(&d, 5), Hits::Peek);
    d.hits_addend = Some(UInt64Value { value: 2 });
    assert_eq!(hits(&d, 5), Hits::Consume(2));
    d.is_negative_hits = true;
    assert_eq!(hits(&d, 5), Hits::Refund(2));
}

#[test]
fn plan_charges_only_limited_descriptors_in_order() {
    let snap = snapshot(
        "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n  - key: b\n    rate_limit: {unlimited: true}\n",
    );
    let domain = snap.domain("d").expect("domain");
    let descriptors = [
        descriptor(&[("x", "1")]),
        descriptor(&[("a", "1")]),
        descriptor(&[("b", "1")]),
        descriptor(&[("a", "2")]),
    ];
    let (plans, charges, _) = plan(domain, &descriptors, 0, "p:");
    assert!(matches!(plans[0], Plan::Pass));
    assert!(matches!(&plans[1], Plan::Limited(l) if l.charges == (0..1)));
    assert!(matches!(plans[2], Plan::Unlimited(_)));
    assert!(matches!(&plans[3], Plan::Limited(l) if l.charges == (1..2)));
    assert_eq!(charges.len(), 2);
    assert!(charges.iter().all(|c| c.key.starts_with("p:tg:")));
    assert_ne!(charges[0].key, charges[1].key);
}

#[test]
fn a_limit_override_follows_the_default_algorithm_in_its_own_buckets() {
    use crate::algorithm::Algorithm;
    use crate::config::LoadOptions;
    let yaml = "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n";
    let mut overridden = descriptor(&[("a", "1")]);
    overridden.limit = Some(wire::RateLimitOverride { requests_per_unit: 7, unit: 2 });
    let charge_with = |algorithm| {
        let options = LoadOptions { default_algorithm: algorithm, ..LoadOptions::default() };
        let snap =
            crate::config::compile_sources_with(&[(PathBuf::from("t.yaml"), yaml.to_string())], &options)
                .expect("valid config");
        let domain = snap.domain("d").expect("domain");
        let (_, charges, _) = plan(domain, std::slice::from_ref(&overridden), 0, "");
        let [charge] = &charges[..] else { panic!("one charge: {charges:?}") };
        (charge.params.algorithm, charge.params.limit, charge.key.clone())
    };
    let (algorithm, limit, gcra_key) = charge_with(Algorithm::Gcra);
    assert_eq!((algorithm, limit), (Algorithm::Gcra, 7));
    let (algorithm, limit, fixed_key) = charge_with(Algorithm::FixedWindow);
    assert_eq!((algorithm, limit), (Algorithm::FixedWindow, 7));
    assert!(gcra_key.starts_with("tg:o2m:") && fixed_key.starts_with("tg:ofm:"), "{gcra_key} {fixed_key}");
    assert_eq!(charge_with(Algorithm::SlidingWindow).0, Algorithm::SlidingWindow);
}

#[test]
fn headers_come_from_the_tightest_status_and_retry_after_from_the_longest_denial() {
    use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
        rate_limit::Unit as ProtoUnit, Code, DescriptorStatus, RateLimit,
    };
    use envoy_types::pb::google::protobuf::Duration as PbDuration;
    let status = |code: Code, rpu: u32, remaining: u32, reset: i64| DescriptorStatus {
        code: code as i32,
        current_limit: Some(RateLimit {
            name: String::new(),
            requests_per_unit: rpu,
            unit: ProtoUnit::Minute as i32,
        }),
        limit_remaining: remaining,
        duration_until_reset: Some(PbDuration { seconds: reset, nanos: 0 }),
        quota: None,
    };
    let mut response = RateLimitResponse {
        overall_code: Code::OverLimit as i32,
        statuses: vec![
            status(Code::Ok, 100, 40, 10),
            status(Code::OverLimit, 10, 0, 7),
            DescriptorStatus { code: Code::Ok as i32, ..Default::default() },
            status(Code::OverLimit, 5, 0, 30),
        ],
        ..Default::default()
    };
    headers::add_headers(&mut response, &[], 0.0);
    let headers: Vec<(String, String)> =
        response.response_headers_to_add.iter().map(|h| (h.key.clone(), h.value.clone())).collect();
    let get = |k: &str| headers.iter().find(|(key, _)| key == k).map(|(_, v)| v.as_str());
    // Ties on remaining go to the longer reset.
    assert_eq!(get("x-ratelimit-limit"), Some("5, 5;w=60"));
    assert_eq!(get("x-ratelimit-remaining"), Some("0"));
    assert_eq!(get("x-ratelimit-reset"), Some("30"));
    assert_eq!(get("retry-after"), Some("30"));

    let mut ok = RateLimitResponse {
        overall_code: Code::Ok as i32,
        statuses: vec![status(Code::Ok, 100, 40, 10)],
        ..Default::default()
    };
    headers::add_headers(&mut ok, &[], 0.0);
    assert_eq!(ok.response_headers_to_add.len(), 3, "no retry-after when allowed");

    // The peer's names, on the same status, after the x-ratelimit ones (both flags on).
    headers::add_limit_headers(&mut response, &headers::LimitHeaderNames::default());
    let pairs: Vec<(&str, &str)> =
        response.response_headers_to_add.iter().map(|h| (h.key.as_str(), h.value.as_str())).collect();
    assert_eq!(
        &pairs[4..],
        [("RateLimit-Limit", "5"), ("RateLimit-Remaining", "0"), ("RateLimit-Reset", "30")]
    );
    let names = headers::LimitHeaderNames { limit: "L".into(), remaining: "R".into(), reset: "T".into() };
    let mut alone = RateLimitResponse { statuses: vec![status(Code::Ok, 100, 40, 10)], ..Default::default() };
    headers::add_limit_headers(&mut alone, &names);
    let pairs: Vec<(&str, &str)> =
        alone.response_headers_to_add.iter().map(|h| (h.key.as_str(), h.value.as_str())).collect();
    assert_eq!(pairs, [("L", "100"), ("R", "40"), ("T", "10")]);
    let mut unlimited =
        RateLimitResponse { statuses: vec![DescriptorStatus::default()], ..Default::default() };
    headers::add_limit_headers(&mut unlimited, &names);
    assert!(unlimited.response_headers_to_add.is_empty(), "no limit, no headers");
}

#[test]
fn the_store_budget_leaves_the_caller_time_to_get_the_answer() {
    let ms = Duration::from_millis;
    assert_eq!(store_budget(ms(10), None), ms(10));
    // Envoy's default 20 ms: the 10 ms store timeout fits.
    assert_eq!(store_budget(ms(10), Some(ms(20))), ms(10));
    assert_eq!(store_budget(ms(5000), Some(ms(100))), ms(90));
    assert_eq!(store_budget(ms(10), Some(ms(10))), ms(9));
    assert_eq!(store_budget(ms(10), Some(ms(5))), ms(4));
    assert_eq!(store_budget(ms(10), Some(ms(1))), Duration::ZERO);
}
