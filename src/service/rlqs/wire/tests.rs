use std::collections::HashMap;

use envoy_rlqs::rate_limit_quota_usage_reports::BucketQuotaUsage as EnvoyUsage;
use prost::Message;

use super::*;

fn ttl(seconds: u32) -> Ttl {
    Ttl(NonZeroU32::new(seconds).expect("non-zero"))
}

fn envoy_id(pairs: &[(&str, &str)]) -> envoy_rlqs::BucketId {
    envoy_rlqs::BucketId { bucket: pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect() }
}

fn envoy_reports() -> envoy_rlqs::RateLimitQuotaUsageReports {
    envoy_rlqs::RateLimitQuotaUsageReports {
        domain: "api".into(),
        bucket_quota_usages: vec![
            EnvoyUsage {
                bucket_id: Some(envoy_id(&[("name", "user"), ("user", "alice")])),
                time_elapsed: Some(Duration { seconds: 5, nanos: 0 }),
                num_requests_allowed: 7,
                num_requests_denied: 3,
            },
            EnvoyUsage {
                bucket_id: Some(envoy_id(&[("user", "bob")])),
                time_elapsed: Some(Duration::default()),
                num_requests_allowed: 1,
                num_requests_denied: 0,
            },
        ],
    }
}

fn key(id: &BucketId) -> Result<BucketKey, InvalidBucketId> {
    BucketKey::new(Some(id), &Bounds::default())
}

#[test]
fn envoys_report_decodes_with_every_field() {
    let wire = envoy_reports().encode_to_vec();
    let ours = RateLimitQuotaUsageReports::decode(wire.as_slice()).expect("decodes");
    assert_eq!(ours.domain(), Some("api"));
    assert_eq!(ours.bucket_quota_usages.len(), 2);
    let alice = &ours.bucket_quota_usages[0];
    assert_eq!(alice.demand(), 10);
    assert!(!alice.is_immediate());
    let alice = key(alice.bucket_id.as_ref().expect("id")).expect("valid");
    assert_eq!(alice.entries().collect::<Vec<_>>(), [("name", "user"), ("user", "alice")]);
    let bob = &ours.bucket_quota_usages[1];
    assert!(bob.is_immediate(), "time_elapsed present and zero");
    // And back: our encoding decodes as Envoy's message, the same report.
    let back =
        envoy_rlqs::RateLimitQuotaUsageReports::decode(ours.encode_to_vec().as_slice()).expect("decodes");
    assert_eq!(back, envoy_reports());
}

#[test]
fn a_value_that_is_not_utf8_decodes_and_is_unanswerable() {
    let mut ours =
        RateLimitQuotaUsageReports::decode(envoy_reports().encode_to_vec().as_slice()).expect("decodes");
    ours.bucket_quota_usages[1].bucket_id = Some(BucketId { bucket: vec![Entry::new("user", b"\xff\xfe")] });
    let wire = ours.encode_to_vec();
    assert!(envoy_rlqs::RateLimitQuotaUsageReports::decode(wire.as_slice()).is_err(), "what this fixes");
    let decoded =
        RateLimitQuotaUsageReports::decode(wire.as_slice()).expect("the whole report still decodes");
    assert!(key(decoded.bucket_quota_usages[0].bucket_id.as_ref().expect("id")).is_ok(), "others go on");
    assert_eq!(
        key(decoded.bucket_quota_usages[1].bucket_id.as_ref().expect("id")),
        Err(InvalidBucketId::NotUtf8)
    );
    let id = BucketId { bucket: vec![Entry::new(b"\xc3", "v")] };
    assert_eq!(key(&id), Err(InvalidBucketId::NotUtf8));
    let domain = RateLimitQuotaUsageReports { domain: Bytes::from_static(b"\xff"), ..Default::default() };
    assert_eq!(domain.domain(), None);
}

#[test]
fn reordered_entries_are_one_canonical_id() {
    let a = BucketId { bucket: vec![Entry::new("user", "alice"), Entry::new("name", "user")] };
    let b = BucketId { bucket: vec![Entry::new("name", "user"), Entry::new("user", "alice")] };
    assert_eq!(key(&a), key(&b));
    // As Envoy would encode its HashMap in whatever order: always the same key.
    let envoy = envoy_id(&[("b", "2"), ("a", "1"), ("c", "3")]);
    let ours = BucketId::decode(envoy.encode_to_vec().as_slice()).expect("decodes");
    let canonical = key(&ours).expect("valid");
    assert_eq!(canonical.entries().collect::<Vec<_>>(), [("a", "1"), ("b", "2"), ("c", "3")]);
}

#[test]
fn a_repeated_key_keeps_the_last_value_as_protobuf_does() {
    let id = BucketId { bucket: vec![Entry::new("user", "alice"), Entry::new("user", "bob")] };
    let ours = key(&id).expect("valid");
    assert_eq!(ours.entries().collect::<Vec<_>>(), [("user", "bob")]);
    let envoy = envoy_rlqs::BucketId::decode(id.encode_to_vec().as_slice()).expect("decodes");
    assert_eq!(envoy.bucket.get("user").map(String::as_str), Some("bob"), "prost agrees");
}

#[test]
fn empty_ids_keys_and_values_are_refused() {
    assert_eq!(BucketKey::new(None, &Bounds::default()), Err(InvalidBucketId::Empty));
    assert_eq!(key(&BucketId::default()), Err(InvalidBucketId::Empty));
    assert_eq!(key(&BucketId { bucket: vec![Entry::new("", "v")] }), Err(InvalidBucketId::EmptyKey));
    assert_eq!(key(&BucketId { bucket: vec![Entry::new("k", "")] }), Err(InvalidBucketId::EmptyValue));
}

#[test]
fn the_bounds_are_enforced() {
    let bounds = Bounds { max_buckets: 2, max_entries: 2, max_value_bytes: 4 };
    let three = BucketId { bucket: vec![Entry::new("a", "1"), Entry::new("b", "2"), Entry::new("c", "3")] };
    assert_eq!(
        BucketKey::new(Some(&three), &bounds),
        Err(InvalidBucketId::TooManyEntries { count: 3, max: 2 })
    );
    let long = BucketId { bucket: vec![Entry::new("k", "12345")] };
    assert_eq!(BucketKey::new(Some(&long), &bounds), Err(InvalidBucketId::TooLong { bytes: 5, max: 4 }));
    let long_key = BucketId { bucket: vec![Entry::new("kkkkk", "1")] };
    assert_eq!(BucketKey::new(Some(&long_key), &bounds), Err(InvalidBucketId::TooLong { bytes: 5, max: 4 }));
    let at = BucketId { bucket: vec![Entry::new("kkkk", "1234"), Entry::new("b", "2")] };
    assert!(BucketKey::new(Some(&at), &bounds).is_ok(), "at the bounds is fine");
    let report = RateLimitQuotaUsageReports {
        domain: Bytes::from_static(b"api"),
        bucket_quota_usages: vec![BucketQuotaUsage::default(); 3],
    };
    assert_eq!(report.check(&bounds), Err(InvalidReport::TooManyBuckets { count: 3, max: 2 }));
    assert_eq!(report.check(&Bounds::default()), Ok(()));
}

fn strategy(action: &BucketAction) -> (Option<Strategy>, Option<Duration>) {
    match &action.bucket_action {
        Some(Action::QuotaAssignmentAction(a)) => {
            (a.rate_limit_strategy.as_ref().and_then(|s| s.strategy), a.assignment_time_to_live)
        }
        other => panic!("not an assignment: {other:?}"),
    }
}

/// Through the wire and back as Envoy's own message.
fn over_the_wire(action: BucketAction) -> BucketAction {
    let wire = response(vec![action]).encode_to_vec();
    let mut decoded = envoy_rlqs::RateLimitQuotaResponse::decode(wire.as_slice()).expect("decodes");
    decoded.bucket_action.pop().expect("one action")
}

fn alice() -> BucketKey {
    key(&BucketId { bucket: vec![Entry::new("user", "alice"), Entry::new("name", "user")] }).expect("valid")
}

#[test]
fn blanket_rules_are_on_the_wire_allow_all_included() {
    let allow = over_the_wire(blanket(&alice(), Blanket::AllowAll, ttl(300)));
    assert_eq!(strategy(&allow), (Some(Strategy::BlanketRule(0)), Some(Duration { seconds: 300, nanos: 0 })));
    let deny = over_the_wire(blanket(&alice(), Blanket::DenyAll, ttl(15)));
    assert_eq!(strategy(&deny), (Some(Strategy::BlanketRule(1)), Some(Duration { seconds: 15, nanos: 0 })));
}

#[test]
fn a_token_bucket_is_on_the_wire_in_whole_seconds() {
    let bucket = TokenBucket { max_tokens: 40, tokens_per_fill: 2, fill_interval_s: 3 };
    let action = over_the_wire(token_bucket(&alice(), bucket, ttl(15)));
    let expected = EnvoyTokenBucket {
        max_tokens: 40,
        tokens_per_fill: Some(UInt32Value { value: 2 }),
        fill_interval: Some(Duration { seconds: 3, nanos: 0 }),
    };
    assert_eq!(
        strategy(&action),
        (Some(Strategy::TokenBucket(expected)), Some(Duration { seconds: 15, nanos: 0 }))
    );
}

#[test]
fn every_action_echoes_the_id_exactly() {
    let expected: HashMap<String, String> =
        [("name", "user"), ("user", "alice")].iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    let bucket = TokenBucket { max_tokens: 1, tokens_per_fill: 1, fill_interval_s: 1 };
    for action in [
        token_bucket(&alice(), bucket, ttl(1)),
        blanket(&alice(), Blanket::DenyAll, ttl(1)),
        abandon(&alice()),
    ] {
        let action = over_the_wire(action);
        assert_eq!(action.bucket_id.expect("id").bucket, expected);
    }
    let abandoned = over_the_wire(abandon(&alice()));
    assert_eq!(abandoned.bucket_action, Some(Action::AbandonAction(AbandonAction {})));
}
