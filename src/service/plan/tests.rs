//! Several limits per rule, `replaces` per limit name, and `all_or_nothing` groups.

use std::path::PathBuf;

use super::*;
use crate::algorithm::Algorithm;
use crate::config::{rule, HashTag, Limit as ConfigLimit, Snapshot};
use crate::store::cluster::key_slot;

const YAML: &str = "
domain: d
descriptors:
  - key: api_key
    rate_limit: { unit: second, requests_per_unit: 20 }
  - key: ip
    rate_limit: { unit: minute, requests_per_unit: 5, name: per_ip }
  - key: shadow
    shadow_mode: true
    rate_limit: { unit: minute, requests_per_unit: 5 }
  - key: path
    rate_limit: { unit: minute, requests_per_unit: 5, replaces: [{ name: burst }] }
";

pub(crate) fn snapshot() -> Snapshot {
    let mut snapshot =
        crate::config::compile_sources(&[(PathBuf::from("t.yaml"), YAML.to_string())]).expect("valid config");
    // `rate_limits` on api_key: burst (20/s) and daily (50000 per day, fixed window).
    let domain = snapshot.domains.get_mut("d").expect("domain d");
    domain.rules[0].limit = RuleLimit::Limited(vec![
        ConfigLimit {
            name: Some("burst".into()),
            params: rule::params(Algorithm::Gcra, 20, Unit::Second, None),
            unit: Unit::Second,
            multiplier: 1,
            rollout: rule::Rollout::FULL,
            response: None,
            overdraft: false,
            calendar: None,
        },
        ConfigLimit {
            name: Some("daily".into()),
            params: rule::params_window(Algorithm::FixedWindow, 50_000, Unit::Day, 7, None),
            unit: Unit::Day,
            multiplier: 7,
            rollout: rule::Rollout::FULL,
            response: None,
            overdraft: false,
            calendar: None,
        },
    ]);
    snapshot
}

pub(crate) fn descriptor(entries: &[(&str, &str)]) -> RateLimitDescriptor {
    RateLimitDescriptor::from_entries(entries.iter().copied())
}

#[test]
fn each_limit_is_a_bucket_and_a_descriptor_is_one_group() {
    let snapshot = snapshot();
    let domain = snapshot.domain("d").expect("d");
    let request = [descriptor(&[("api_key", "k1")]), descriptor(&[("ip", "1.2.3.4")])];
    let (plans, charges, groups) = plan(domain, &request, 0, "");
    assert_eq!(charges.len(), 3);
    assert!(matches!(&plans[0], Plan::Limited(l) if l.charges == (0..2)));
    assert!(matches!(&plans[1], Plan::Limited(l) if l.charges == (2..3)));
    assert_eq!(groups.ranges(3).collect::<Vec<_>>(), [0..2, 2..3]);
    // Each limit has its own key, named; both on one Redis Cluster slot.
    assert_ne!(charges[0].key, charges[1].key);
    assert!(charges[0].key.ends_with("5:burst") && charges[1].key.ends_with("5:daily"), "{charges:?}");
    assert!(charges[1].key.contains("fd7:"), "the window of 7 days is in the key: {}", charges[1].key);
    assert_eq!(key_slot(charges[0].key.as_bytes()), key_slot(charges[1].key.as_bytes()));
    assert_eq!(charges[1].params.unit_us, 7 * 86_400_000_000);
    // A group of one before a larger group is written out too.
    let request =
        [descriptor(&[("ip", "1.2.3.4")]), descriptor(&[("api_key", "k1")]), descriptor(&[("ip", "5")])];
    let (_, _, groups) = plan(domain, &request, 0, "");
    assert_eq!(groups.ranges(4).collect::<Vec<_>>(), [0..1, 1..3, 3..4]);
    let singles = [descriptor(&[("ip", "1.2.3.4")]), descriptor(&[("ip", "5")])];
    assert!(plan(domain, &singles, 0, "").2.is_each(), "groups of one only: nothing allocated");
    // Another descriptor value: other buckets.
    let (_, other, _) = plan(domain, &[descriptor(&[("api_key", "k2")])], 0, "");
    assert_ne!(other[0].key, charges[0].key);
}

#[test]
fn replaces_drops_a_limit_by_its_name() {
    let snapshot = snapshot();
    let domain = snapshot.domain("d").expect("d");
    let request = [descriptor(&[("api_key", "k1")]), descriptor(&[("path", "/")])];
    let (plans, charges, _) = plan(domain, &request, 0, "");
    let Plan::Limited(limit) = &plans[0] else { panic!("{plans:?}") };
    let names: Vec<_> = limit.limits().map(|l| l.name.as_deref()).collect();
    assert_eq!(names, [Some("daily")], "burst is replaced, daily is still charged");
    assert_eq!(limit.charges, 0..1);
    assert!(charges[0].key.ends_with("5:daily"));
    assert_eq!(charges.len(), 2);
}

#[test]
fn all_or_nothing_puts_the_request_in_one_group_but_shadow_rules_apart() {
    let mut snapshot = snapshot();
    snapshot.domains.get_mut("d").expect("d").charge = ChargeMode::AllOrNothing;
    let domain = snapshot.domain("d").expect("d");
    let request = [
        descriptor(&[("shadow", "x")]),
        descriptor(&[("api_key", "k1")]),
        descriptor(&[("nothing", "x")]),
        descriptor(&[("ip", "1.2.3.4")]),
    ];
    let (plans, charges, groups) = plan(domain, &request, 0, "");
    assert_eq!(charges.len(), 4);
    // The joint descriptors come first, the shadow one after, alone.
    assert!(matches!(&plans[1], Plan::Limited(l) if l.charges == (0..2)));
    assert!(matches!(&plans[3], Plan::Limited(l) if l.charges == (2..3)));
    assert!(matches!(&plans[0], Plan::Limited(l) if l.charges == (3..4)));
    assert_eq!(groups.ranges(4).collect::<Vec<_>>(), [0..3, 3..4]);
}

#[test]
fn hash_tag_domain_puts_every_key_of_the_domain_on_one_slot() {
    let mut snapshot = snapshot();
    snapshot.domains.get_mut("d").expect("d").hash_tag = HashTag::Domain;
    let domain = snapshot.domain("d").expect("d");
    let request = [
        descriptor(&[("api_key", "k1")]),
        descriptor(&[("ip", "1.2.3.4")]),
        descriptor(&[("ip", "5.6.7.8")]),
    ];
    let (_, charges, _) = plan(domain, &request, 0, "pfx:");
    let slot = key_slot(charges[0].key.as_bytes());
    for charge in &charges {
        assert!(charge.key.starts_with("pfx:tg:{1:d}"), "{}", charge.key);
        assert_eq!(key_slot(charge.key.as_bytes()), slot);
    }
}

#[test]
fn a_single_limit_keeps_its_key_and_a_multiplier_makes_a_new_one() {
    let mut snapshot = snapshot();
    let domain = snapshot.domain("d").expect("d");
    let request = [descriptor(&[("ip", "1.2.3.4")])];
    let (_, charges, _) = plan(domain, &request, 0, "");
    assert_eq!(charges[0].key, "tg:g2m:1:d2:ip7:1.2.3.4", "today's keys are kept");
    let rule = &mut snapshot.domains.get_mut("d").expect("d").rules[1];
    rule.limit = RuleLimit::Limited(vec![ConfigLimit {
        name: None,
        params: rule::params_window(Algorithm::Gcra, 5, Unit::Minute, 5, None),
        unit: Unit::Minute,
        multiplier: 5,
        rollout: rule::Rollout::FULL,
        response: None,
        overdraft: false,
        calendar: None,
    }]);
    let domain = snapshot.domain("d").expect("d");
    let (_, charges, _) = plan(domain, &request, 0, "");
    assert_eq!(charges[0].key, "tg:g2m5:1:d2:ip7:1.2.3.4");
}
