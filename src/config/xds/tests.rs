use prost::Message;

use super::proto::{RateLimitConfig, RateLimitDescriptor, RateLimitPolicy, RateLimitReplace, RateLimitUnit};
use super::{Resources, TYPE_URL};
use crate::config::LoadOptions;

fn limit(unit: RateLimitUnit, requests: u32) -> Option<RateLimitPolicy> {
    Some(RateLimitPolicy { unit: unit as i32, requests_per_unit: requests, ..Default::default() })
}

fn config(name: &str, domain: &str, descriptors: Vec<RateLimitDescriptor>) -> RateLimitConfig {
    RateLimitConfig { name: name.into(), domain: domain.into(), descriptors }
}

fn node(key: &str, value: &str, rate_limit: Option<RateLimitPolicy>) -> RateLimitDescriptor {
    RateLimitDescriptor { key: key.into(), value: value.into(), rate_limit, ..Default::default() }
}

fn good(name: &str, domain: &str, requests: u32) -> RateLimitConfig {
    config(name, domain, vec![node("user", "", limit(RateLimitUnit::Minute, requests))])
}

fn bad_unit(name: &str, domain: &str) -> RateLimitConfig {
    config(name, domain, vec![node("user", "", limit(RateLimitUnit::Unknown, 5))])
}

fn apply(resources: &mut Resources, configs: &[RateLimitConfig]) -> super::Applied {
    let encoded: Vec<Vec<u8>> = configs.iter().map(Message::encode_to_vec).collect();
    resources.apply(encoded.iter().map(|bytes| (TYPE_URL, bytes.as_slice())), &LoadOptions::default())
}

fn requests(applied: &super::Applied, domain: &str) -> Option<u64> {
    let domain = applied.snapshot.domain(domain)?;
    domain.rules.first().and_then(|rule| rule.limits().first()).map(|limit| limit.params.limit)
}

#[test]
fn every_field_converts_and_compiles() {
    let mut metadata = prost_types::Struct::default();
    metadata.fields.insert("team".into(), prost_types::Value::from("payments".to_owned()));
    metadata.fields.insert("tier".into(), prost_types::Value::from(2.0));
    let deep = RateLimitDescriptor {
        key: "path".into(),
        value: "/a".into(),
        rate_limit: Some(RateLimitPolicy {
            unit: RateLimitUnit::Week as i32,
            requests_per_unit: 7,
            name: "weekly".into(),
            replaces: vec![RateLimitReplace { name: "monthly".into() }],
            ..Default::default()
        }),
        shadow_mode: true,
        detailed_metric: true,
        quota_mode: true,
        metadata: Some(metadata),
        ..Default::default()
    };
    let mut top = node("user", "", limit(RateLimitUnit::Month, 100));
    if let Some(policy) = &mut top.rate_limit {
        policy.name = "monthly".into();
    }
    top.descriptors =
        vec![deep, node("free", "", Some(RateLimitPolicy { unlimited: true, ..Default::default() }))];
    let year = node("ip", "", limit(RateLimitUnit::Year, 0));
    let resource = config("api", "api", vec![top, year]);
    let text = super::convert::to_yaml(&resource);
    for expected in [
        "unit: month",
        "unit: week",
        "unit: year",
        "shadow_mode: true",
        "detailed_metric: true",
        "quota_mode: true",
        "team: payments",
        "tier: 2",
        "unlimited: true",
        "requests_per_unit: 0",
    ] {
        assert!(text.contains(expected), "{expected:?} missing from:\n{text}");
    }
    let applied = apply(&mut Resources::default(), &[resource]);
    assert!(applied.rejected.is_empty(), "{:?}", applied.rejected);
    assert_eq!(applied.snapshot.domain("api").map(|d| d.rules.len()), Some(4));
}

#[test]
fn a_bad_resource_is_rejected_alone_and_keeps_its_last_good_version() {
    let mut resources = Resources::default();
    let first = apply(&mut resources, &[good("a", "a", 10), good("b", "b", 20)]);
    assert!(first.rejected.is_empty());
    let second = apply(&mut resources, &[bad_unit("a", "a"), good("b", "b", 30), bad_unit("c", "c")]);
    assert_eq!(requests(&second, "a"), Some(10), "a keeps its last good version");
    assert_eq!(requests(&second, "b"), Some(30), "b applies");
    assert!(second.snapshot.domain("c").is_none(), "c never had a good version");
    let names: Vec<(&str, bool)> =
        second.rejected.iter().map(|r| (r.name.as_str(), r.kept_previous)).collect();
    assert_eq!(names, [("a", true), ("c", false)]);
    let text = second.rejection_text().unwrap_or_default();
    assert!(text.contains("a: descriptors[0].rate_limit.unit: missing unit"), "{text}");
    assert!(text.contains("c: descriptors[0].rate_limit.unit"), "{text}");
}

#[test]
fn a_resource_left_out_is_removed_and_an_empty_response_is_an_empty_config() {
    let mut resources = Resources::default();
    apply(&mut resources, &[good("a", "a", 10), good("b", "b", 20)]);
    let next = apply(&mut resources, &[good("b", "b", 20)]);
    assert!(next.snapshot.domain("a").is_none());
    let empty = apply(&mut resources, &[]);
    assert!(empty.rejected.is_empty());
    assert!(empty.snapshot.domains.is_empty());
    assert_eq!(resources.names().count(), 0);
}

#[test]
fn a_domain_taken_by_another_resource_is_blamed_on_the_newcomer() {
    let mut resources = Resources::default();
    apply(&mut resources, &[good("z", "shared", 10)]);
    let next = apply(&mut resources, &[good("a", "shared", 99), good("z", "shared", 10)]);
    assert_eq!(requests(&next, "shared"), Some(10), "the resource that had the domain keeps it");
    assert_eq!(next.rejected.len(), 1);
    assert_eq!(next.rejected[0].name, "a");
    assert!(next.rejection_text().unwrap_or_default().contains("duplicate domain"));
}

#[test]
fn undecodable_and_foreign_resources_are_named_by_position() {
    let mut resources = Resources::default();
    let good = good("a", "a", 1).encode_to_vec();
    let applied = resources.apply(
        [(TYPE_URL, &b"\xff\xff"[..]), ("type.googleapis.com/other", &good[..]), (TYPE_URL, &good[..])],
        &LoadOptions::default(),
    );
    let names: Vec<&str> = applied.rejected.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["resources[0]", "resources[1]"]);
    assert!(applied.snapshot.domain("a").is_some());
}
