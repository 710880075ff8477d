use prost::Message;

use super::proto::{RateLimitConfig, RateLimitDescriptor, RateLimitPolicy, RateLimitReplace, RateLimitUnit};
use super::{decode, Resources, TYPE_URL};
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

/// `configs` through the wire and applied on top of `resources`, which then holds the next state.
fn apply(resources: &mut Resources, configs: &[RateLimitConfig]) -> super::Applied {
    let encoded: Vec<Vec<u8>> = configs.iter().map(Message::encode_to_vec).collect();
    let decoded = decode(encoded.iter().map(|bytes| (TYPE_URL, bytes.as_slice()))).expect("decodes");
    let mut applied = resources.apply(decoded, &LoadOptions::default());
    *resources = std::mem::take(&mut applied.resources);
    applied
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
fn undecodable_and_foreign_resources_reject_the_whole_response_naming_each_slot() {
    let good = good("a", "a", 1).encode_to_vec();
    let other = "type.googleapis.com/other";
    let error = decode([(TYPE_URL, &b"\xff\xff"[..]), (other, &good[..]), (TYPE_URL, &good[..])])
        .expect_err("rejected whole");
    let slots: Vec<(usize, &str)> = error.slots.iter().map(|s| (s.index, s.type_url.as_str())).collect();
    assert_eq!(slots, [(0, TYPE_URL), (1, other)]);
    let text = error.to_string();
    assert!(text.starts_with("response rejected as a whole"), "{text}");
    assert!(
        text.contains(&format!("\nresources[0] ({TYPE_URL}): cannot decode RateLimitConfig: ")),
        "{text}"
    );
    assert!(
        text.contains(&format!("\nresources[1] ({other}): unexpected resource type (expected {TYPE_URL})"))
    );
    assert!(matches!(decode([(TYPE_URL, &good[..])]).as_deref(), Ok([config]) if config.domain == "a"));
    let empty = decode([]).map(|configs| configs.len());
    assert_eq!(empty, Ok(0), "an empty response decodes: a valid empty config");
}

#[test]
fn applying_leaves_the_last_good_versions_as_they_were() {
    let mut resources = Resources::default();
    apply(&mut resources, &[good("a", "a", 10)]);
    let before: Vec<String> = resources.names().map(str::to_owned).collect();
    let configs = decode([(TYPE_URL, &good("b", "b", 1).encode_to_vec()[..])]).expect("decodes");
    let applied = resources.apply(configs, &LoadOptions::default());
    assert_eq!(applied.resources.names().collect::<Vec<_>>(), ["b"]);
    assert_eq!(resources.names().collect::<Vec<_>>(), before, "the current state is untouched");
}
