use std::path::PathBuf;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{Code, DescriptorStatus};
use envoy_types::pb::google::protobuf::UInt64Value;
use envoy_types::pb::google::protobuf::{value::Kind, Struct, Value};
use serde_json::{json, Map, Value as Json};

use super::{build, passed};
use crate::config::Snapshot;
use crate::service::plan::plan;
use crate::service::wire::{RateLimitDescriptor, RateLimitOverride, RateLimitRequest};

fn snapshot(yaml: &str) -> Snapshot {
    crate::config::compile_sources(&[(PathBuf::from("t.yaml"), yaml.to_string())]).expect("valid config")
}

/// A protobuf `Value` back as JSON, to compare whole shapes at once.
fn to_json(value: &Value) -> Json {
    match &value.kind {
        Some(Kind::NullValue(_)) | None => Json::Null,
        Some(Kind::BoolValue(b)) => json!(b),
        Some(Kind::NumberValue(n)) => json!(n),
        Some(Kind::StringValue(s)) => json!(s),
        Some(Kind::ListValue(list)) => Json::Array(list.values.iter().map(to_json).collect()),
        Some(Kind::StructValue(s)) => struct_json(s),
    }
}

fn struct_json(s: &Struct) -> Json {
    Json::Object(s.fields.iter().map(|(k, v)| (k.clone(), to_json(v))).collect())
}

fn request(descriptors: Vec<RateLimitDescriptor>) -> RateLimitRequest {
    RateLimitRequest { domain: "d".into(), descriptors, hits_addend: 0 }
}

fn status(code: Code) -> DescriptorStatus {
    DescriptorStatus { code: code as i32, ..Default::default() }
}

const POLICY: &str = r#"
domain: d
descriptors:
  - key: a
    metadata: { team: payments, tier: 1, route: { owner: a, region: eu } }
    rate_limit: { unit: second, requests_per_unit: 5 }
  - key: b
    metadata: { team: search, extra: [1, "two"], route: { owner: b, cost: 2.5 } }
    rate_limit: { unit: second, requests_per_unit: 5 }
  - key: c
    metadata: { denied: true }
    rate_limit: { unit: second, requests_per_unit: 5 }
  - key: free
    metadata: { unlimited: yes }
    rate_limit: { unlimited: true }
  - key: old
    metadata: { replaced: yes }
    rate_limit: { name: old, unit: second, requests_per_unit: 5 }
  - key: new
    rate_limit: { replaces: [{ name: old }], unit: second, requests_per_unit: 5 }
"#;

/// Plans `descriptors` against POLICY and merges the metadata of those given OK.
fn merged(descriptors: &[RateLimitDescriptor], codes: &[Code]) -> Map<String, Json> {
    let snap = snapshot(POLICY);
    let domain = snap.domain("d").expect("domain");
    let (plans, _, _) = plan(domain, descriptors, 0, "");
    let statuses: Vec<DescriptorStatus> = codes.iter().map(|&c| status(c)).collect();
    passed(&plans, &statuses)
}

fn one(key: &str, value: &str) -> RateLimitDescriptor {
    RateLimitDescriptor::from_entries([(key, value)])
}

#[test]
fn passed_rules_merge_first_value_wins_and_maps_merge_key_by_key() {
    let got = merged(&[one("a", "1"), one("b", "1"), one("c", "1")], &[Code::Ok, Code::Ok, Code::OverLimit]);
    assert_eq!(
        Json::Object(got),
        json!({
            "team": "payments",
            "tier": 1,
            "extra": [1, "two"],
            "route": { "owner": "a", "region": "eu", "cost": 2.5 },
        }),
        "a's values win, b adds what a lacks, c is over its limit"
    );
    // Request order decides, not file order.
    let got = merged(&[one("b", "1"), one("a", "1")], &[Code::Ok, Code::Ok]);
    assert_eq!(got["team"], json!("search"));
    assert_eq!(got["route"], json!({ "owner": "b", "region": "eu", "cost": 2.5 }));
}

#[test]
fn unlimited_replaced_overridden_and_unmatched_descriptors_add_nothing() {
    let all_ok = [Code::Ok; 4];
    let mut overridden = one("a", "1");
    overridden.limit = Some(RateLimitOverride { requests_per_unit: 3, unit: 1 });
    let got = merged(&[one("free", "1"), one("old", "1"), one("new", "1"), overridden], &all_ok);
    assert!(got.is_empty(), "{got:?}");
    assert!(merged(&[one("nothing", "1")], &[Code::Ok]).is_empty());
}

#[test]
fn the_shape_is_the_peers() {
    let mut first = RateLimitDescriptor::from_entries([("remote_address", "10.0.0.1"), ("path", "/x")]);
    first.limit = Some(RateLimitOverride { requests_per_unit: 10, unit: 1 });
    first.hits_addend = Some(UInt64Value { value: 0 });
    let second = one("user", "alice");
    let mut req = request(vec![first, second]);
    req.hits_addend = 3;
    let mut metadata = Map::new();
    metadata.insert("team".into(), json!("payments"));
    metadata.insert("nested".into(), json!({ "n": 1, "list": [true, null] }));
    assert_eq!(
        struct_json(&build(&req, metadata)),
        json!({
            "domain": "d",
            "descriptors": [
                {
                    "entries": ["remote_address=10.0.0.1", "path=/x"],
                    "limit": "requests_per_unit:10 unit:SECOND",
                    "hitsAddend": 0.0,
                },
                { "entries": ["user=alice"] },
            ],
            "hitsAddend": 3.0,
            "metadata": { "team": "payments", "nested": { "n": 1.0, "list": [true, null] } },
        })
    );
}

#[test]
fn no_metadata_and_no_hits_leave_their_fields_out() {
    let got = struct_json(&build(&request(vec![one("k", "v")]), Map::new()));
    assert_eq!(got, json!({ "domain": "d", "descriptors": [{ "entries": ["k=v"] }] }));
}

#[test]
fn override_text_leaves_out_zero_fields_and_shows_unknown_units_as_numbers() {
    let text = |requests_per_unit, unit| super::override_text(&RateLimitOverride { requests_per_unit, unit });
    assert_eq!(text(5, 6), "requests_per_unit:5 unit:YEAR");
    assert_eq!(text(0, 2), "unit:MINUTE");
    assert_eq!(text(7, 0), "requests_per_unit:7");
    assert_eq!(text(7, 42), "requests_per_unit:7 unit:42");
}

#[test]
fn bytes_that_are_not_utf8_appear_escaped_and_text_as_sent() {
    let mut req = request(vec![RateLimitDescriptor::from_entries([
        (&b"user"[..], &b"\xff\xfe"[..]),
        (b"name", "zoë".as_bytes()),
        (b"raw", b"\\xff"),
    ])]);
    req.domain = "d\u{202e}".into();
    let got = struct_json(&build(&req, Map::new()));
    assert_eq!(got["domain"], json!("d\\u{202e}"), "a bidi override cannot reorder a log line");
    assert_eq!(got["descriptors"][0]["entries"], json!(["user=\\xff\\xfe", "name=zoë", "raw=\\\\xff"]));
}
