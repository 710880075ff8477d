//! One decoded `RateLimitConfig` → the YAML text of one policy file, so that a resource is
//! validated and compiled by exactly the compiler files go through (`compile_sources_with`).
//!
//! Field for field as envoyproxy/ratelimit maps the proto to its YAML
//! (`ConfigXdsProtoToYaml`): defaults (`false`, `""`, empty lists) are left out, `unit` is
//! the enum's name (`UNKNOWN` left out, an unknown number written as its number, which the
//! compiler refuses), `requests_per_unit` always present on a limit that is not unlimited
//! (0 blocks everything), `metadata` as a mapping. Pure: no validation of its own.

use serde_yaml::{Mapping, Value};

use super::proto::{RateLimitConfig, RateLimitDescriptor, RateLimitPolicy, RateLimitUnit};

/// The YAML text of `config` as one policy file.
pub fn to_yaml(config: &RateLimitConfig) -> String {
    let mut root = Mapping::new();
    root.insert("domain".into(), config.domain.clone().into());
    if !config.descriptors.is_empty() {
        root.insert("descriptors".into(), descriptors(&config.descriptors));
    }
    // Serialising a Value tree cannot fail: no map has non-string keys we did not make.
    serde_yaml::to_string(&Value::Mapping(root)).unwrap_or_default()
}

fn descriptors(nodes: &[RateLimitDescriptor]) -> Value {
    Value::Sequence(nodes.iter().map(descriptor).collect())
}

fn descriptor(node: &RateLimitDescriptor) -> Value {
    let mut map = Mapping::new();
    // Always written, so an empty key is reported as empty, not as missing.
    map.insert("key".into(), node.key.clone().into());
    if !node.value.is_empty() {
        map.insert("value".into(), node.value.clone().into());
    }
    if let Some(policy) = &node.rate_limit {
        map.insert("rate_limit".into(), rate_limit(policy));
    }
    if !node.descriptors.is_empty() {
        map.insert("descriptors".into(), descriptors(&node.descriptors));
    }
    for (field, set) in [
        ("shadow_mode", node.shadow_mode),
        ("detailed_metric", node.detailed_metric),
        ("quota_mode", node.quota_mode),
    ] {
        if set {
            map.insert(field.into(), true.into());
        }
    }
    if let Some(metadata) = node.metadata.as_ref().filter(|m| !m.fields.is_empty()) {
        map.insert("metadata".into(), structure(metadata));
    }
    Value::Mapping(map)
}

fn rate_limit(policy: &RateLimitPolicy) -> Value {
    let mut map = Mapping::new();
    match RateLimitUnit::try_from(policy.unit) {
        Ok(unit) => {
            if let Some(name) = unit.yaml_name() {
                map.insert("unit".into(), name.into());
            }
        }
        Err(_) => {
            map.insert("unit".into(), policy.unit.to_string().into());
        }
    }
    if policy.unlimited {
        map.insert("unlimited".into(), true.into());
    } else {
        map.insert("requests_per_unit".into(), policy.requests_per_unit.into());
    }
    if !policy.name.is_empty() {
        map.insert("name".into(), policy.name.clone().into());
    }
    if !policy.replaces.is_empty() {
        let replaces = policy
            .replaces
            .iter()
            .map(|r| {
                let mut entry = Mapping::new();
                entry.insert("name".into(), r.name.clone().into());
                Value::Mapping(entry)
            })
            .collect();
        map.insert("replaces".into(), Value::Sequence(replaces));
    }
    Value::Mapping(map)
}

/// A `google.protobuf.Struct` as a YAML mapping, keys sorted (a stable text, so the same
/// resource always hashes to the same config version).
fn structure(value: &prost_types::Struct) -> Value {
    let mut fields: Vec<_> = value.fields.iter().collect();
    fields.sort_by(|a, b| a.0.cmp(b.0));
    Value::Mapping(fields.into_iter().map(|(k, v)| (Value::from(k.clone()), protobuf_value(v))).collect())
}

/// Struct numbers are doubles: whole ones within ±2^53 are written as integers.
fn protobuf_value(value: &prost_types::Value) -> Value {
    use prost_types::value::Kind;
    match &value.kind {
        None | Some(Kind::NullValue(_)) => Value::Null,
        Some(Kind::BoolValue(b)) => Value::Bool(*b),
        Some(Kind::NumberValue(n)) if n.fract() == 0.0 && n.abs() <= 9_007_199_254_740_992.0 => {
            Value::from(*n as i64)
        }
        Some(Kind::NumberValue(n)) => Value::from(*n),
        Some(Kind::StringValue(s)) => Value::from(s.clone()),
        Some(Kind::StructValue(s)) => structure(s),
        Some(Kind::ListValue(list)) => Value::Sequence(list.values.iter().map(protobuf_value).collect()),
    }
}
