//! `--response-dynamic-metadata`: the request and the `metadata` of the rules it passed, as
//! the response's `dynamic_metadata` (Envoy's filter stores it under its namespace,
//! `envoy.filters.http.ratelimit` by default, for access logs and later filters).
//!
//! The shape is envoyproxy/ratelimit's (`RESPONSE_DYNAMIC_METADATA=true`), so access-log
//! formats and Lua filters written for it keep working:
//!
//! ```text
//! { "domain": "edge",
//!   "descriptors": [ { "entries": ["key=value", …],
//!                      "limit": "requests_per_unit:10 unit:SECOND",   (a request override)
//!                      "hitsAddend": 2 },                             (its own hits_addend)
//!                    … ],                                             (request order)
//!   "hitsAddend": 3,                  (the request's, when not 0)
//!   "metadata": { … } }               (merged; absent when empty)
//! ```
//!
//! `metadata` merges the `metadata` of the rule matched by every descriptor whose status is
//! OK (within its limit, a per-rule shadow answer, a failure-open answer), in request order:
//! the first value of a key wins, two maps under one key merge key by key. Descriptors over
//! their limit contribute nothing — neither do `unlimited` rules, replaced rules or a
//! request's own `limit` override, as with the peer.
//!
//! Text: descriptor keys, values and the domain are bytes on the wire, while `Struct`
//! strings must be UTF-8. They appear in `crate::telemetry::escape`'s text form: printable text exactly
//! as sent, a byte that is not UTF-8 or a control character as `\xNN`, a hidden character
//! as `\u{NNNN}`, a backslash doubled — one form for logs, `explain`, metric labels and
//! this, never two requests' values shown alike. Pure: no I/O.

use envoy_types::pb::envoy::r#type::v3::RateLimitUnit;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{Code, DescriptorStatus};
use envoy_types::pb::google::protobuf::{value::Kind, ListValue, Struct, Value};
use serde_json::{Map, Value as Json};

use super::plan::Plan;
use super::wire::{RateLimitDescriptor, RateLimitOverride, RateLimitRequest};
use crate::telemetry::escape::escape;

/// The merged `metadata` of the rules whose descriptors passed (see the module doc).
/// `plans` and `statuses` are in request order, one per descriptor.
pub fn passed(plans: &[Plan<'_>], statuses: &[DescriptorStatus]) -> Map<String, Json> {
    let mut merged = Map::new();
    for (plan, status) in plans.iter().zip(statuses) {
        let Plan::Limited(limit) = plan else { continue };
        let Some(rule) = limit.rule else { continue };
        if status.code == Code::Ok as i32 {
            for (key, value) in &rule.metadata {
                merge_value(&mut merged, key, value);
            }
        }
    }
    merged
}

/// Adds `key: value` to `into` unless the key is there: then two maps merge key by key and
/// anything else keeps the first value.
fn merge_value(into: &mut Map<String, Json>, key: &str, value: &Json) {
    match (into.get_mut(key), value) {
        (None, _) => {
            into.insert(key.to_owned(), value.clone());
        }
        (Some(Json::Object(first)), Json::Object(later)) => {
            for (key, value) in later {
                merge_value(first, key, value);
            }
        }
        (Some(_), _) => {}
    }
}

/// The `dynamic_metadata` of a response to `request`, with `metadata` the merged metadata
/// of the rules it passed (left out when empty).
pub fn build(request: &RateLimitRequest, metadata: Map<String, Json>) -> Struct {
    let mut fields = Struct::default().fields;
    fields.insert("domain".into(), string(escape(&request.domain).into_owned()));
    let descriptors = request.descriptors.iter().map(|d| structure(descriptor(d))).collect();
    fields.insert("descriptors".into(), list(descriptors));
    if request.hits_addend != 0 {
        fields.insert("hitsAddend".into(), number(f64::from(request.hits_addend)));
    }
    if !metadata.is_empty() {
        fields.insert("metadata".into(), structure(from_json_map(metadata)));
    }
    Struct { fields }
}

fn descriptor(descriptor: &RateLimitDescriptor) -> Struct {
    let mut fields = Struct::default().fields;
    let entries =
        descriptor.pairs().map(|(key, value)| string(format!("{}={}", escape(key), escape(value)))).collect();
    fields.insert("entries".into(), list(entries));
    if let Some(limit) = &descriptor.limit {
        fields.insert("limit".into(), string(override_text(limit)));
    }
    if let Some(hits) = &descriptor.hits_addend {
        // A double, as in any `Struct`: exact up to 2^53.
        fields.insert("hitsAddend".into(), number(hits.value as f64));
    }
    Struct { fields }
}

/// A request's `limit` override in protobuf text form, as the peer prints it
/// (`requests_per_unit:10 unit:SECOND`; zero fields left out, an unknown unit as its number).
fn override_text(limit: &RateLimitOverride) -> String {
    let mut parts = Vec::with_capacity(2);
    if limit.requests_per_unit != 0 {
        parts.push(format!("requests_per_unit:{}", limit.requests_per_unit));
    }
    if limit.unit != 0 {
        match RateLimitUnit::try_from(limit.unit) {
            Ok(unit) => parts.push(format!("unit:{}", unit.as_str_name())),
            Err(_) => parts.push(format!("unit:{}", limit.unit)),
        }
    }
    parts.join(" ")
}

/// A JSON value as a protobuf `Value` (numbers become doubles, as `Struct` holds them).
fn from_json(value: Json) -> Value {
    match value {
        Json::Null => Value { kind: Some(Kind::NullValue(0)) },
        Json::Bool(b) => Value { kind: Some(Kind::BoolValue(b)) },
        Json::Number(n) => number(n.as_f64().unwrap_or(0.0)),
        Json::String(text) => string(text),
        Json::Array(items) => list(items.into_iter().map(from_json).collect()),
        Json::Object(map) => structure(from_json_map(map)),
    }
}

fn from_json_map(map: Map<String, Json>) -> Struct {
    Struct { fields: map.into_iter().map(|(k, v)| (k, from_json(v))).collect() }
}

fn string(text: String) -> Value {
    Value { kind: Some(Kind::StringValue(text)) }
}

fn number(n: f64) -> Value {
    Value { kind: Some(Kind::NumberValue(n)) }
}

fn list(values: Vec<Value>) -> Value {
    Value { kind: Some(Kind::ListValue(ListValue { values })) }
}

fn structure(s: Struct) -> Value {
    Value { kind: Some(Kind::StructValue(s)) }
}

#[cfg(test)]
mod tests;
