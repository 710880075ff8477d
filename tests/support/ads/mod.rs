//! An ADS management server (go-control-plane's snapshot-cache behaviour, over mTLS) and
//! the certificates of one test, shared by the test binaries that need a real xDS server:
//! included with `#[path = "../support/ads/mod.rs"] mod ads;` (or from `tests/api`).

pub mod certs;
pub mod server;

use envoy_types::pb::google::protobuf::Any;
use prost::Message;
use tollgate::config::xds::proto::{RateLimitConfig, RateLimitDescriptor, RateLimitPolicy, RateLimitUnit};

/// A `RateLimitConfig` as Envoy Gateway's translator emits one (`name` = `domain`): `key`
/// limited to `requests` per `unit` (`RateLimitUnit::Unknown` makes it invalid).
pub fn resource(domain: &str, key: &str, requests: u32, unit: RateLimitUnit) -> Any {
    let config = RateLimitConfig {
        name: domain.into(),
        domain: domain.into(),
        descriptors: vec![RateLimitDescriptor {
            key: key.into(),
            rate_limit: Some(RateLimitPolicy {
                unit: unit as i32,
                requests_per_unit: requests,
                ..Default::default()
            }),
            ..Default::default()
        }],
    };
    Any { type_url: tollgate::config::xds::TYPE_URL.into(), value: config.encode_to_vec() }
}

/// `bytes` sent as they are in a resource slot with `type_url`: the server never checks what
/// it sends, so a test can send what no encoder would (bytes that do not decode, a foreign
/// type).
pub fn raw(type_url: &str, bytes: &[u8]) -> Any {
    Any { type_url: type_url.into(), value: bytes.to_vec() }
}

/// `resource` cut one byte short: its last field's length then runs past the end, so the
/// bytes do not decode as a `RateLimitConfig` (a truncated write in the control plane).
pub fn cut_short(mut resource: Any) -> Any {
    resource.value.pop();
    resource
}
