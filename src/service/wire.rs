//! The request as it comes off the wire: `RateLimitRequest` with domain, keys and values as
//! bytes.
//!
//! Envoy copies header bytes as they come, ≥ 0x80 included, into descriptor values. The
//! Envoy proto declares them `string`, and a proto3 `string` must be UTF-8: a decoder that
//! checks (prost does) fails the *whole* request, and Envoy then fails open for every
//! descriptor of it — per-IP limits included. These messages are wire-compatible with
//! `envoy.service.ratelimit.v3.RateLimitRequest` and
//! `envoy.extensions.common.ratelimit.v3.RateLimitDescriptor` (same field numbers and wire
//! types; `string` and `bytes` share the length-delimited encoding), with `bytes` where
//! Envoy has `string`, so every request Envoy can send decodes. Other fields keep Envoy's
//! types. Values are `Bytes`: decoding slices them out of the received buffer without a
//! copy or an allocation per value.
//!
//! This module owns the message shapes only: what the bytes mean (unknown domain, opaque
//! value, hashed key part) is decided by the service, the matcher and the key builder.

use envoy_types::pb::envoy::extensions::common::ratelimit::v3 as envoy_descriptor;
use envoy_types::pb::envoy::service::ratelimit::v3 as envoy_service;
use envoy_types::pb::google::protobuf::UInt64Value;
use prost::bytes::Bytes;

pub use envoy_descriptor::rate_limit_descriptor::RateLimitOverride;

/// The gRPC service name: the endpoint's path prefix, and the name health checks ask about.
pub const SERVICE_NAME: &str = "envoy.service.ratelimit.v3.RateLimitService";

/// `envoy.service.ratelimit.v3.RateLimitRequest` with a `bytes` domain.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RateLimitRequest {
    /// The policy domain; not UTF-8 means no configured domain.
    #[prost(bytes = "bytes", tag = "1")]
    pub domain: Bytes,
    #[prost(message, repeated, tag = "2")]
    pub descriptors: Vec<RateLimitDescriptor>,
    /// Hits for every descriptor without its own `hits_addend`; 0 means 1.
    #[prost(uint32, tag = "3")]
    pub hits_addend: u32,
}

/// `envoy.extensions.common.ratelimit.v3.RateLimitDescriptor` with `bytes` entries.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RateLimitDescriptor {
    #[prost(message, repeated, tag = "1")]
    pub entries: Vec<Entry>,
    /// The request's own limit, replacing the configured one.
    #[prost(message, optional, tag = "2")]
    pub limit: Option<RateLimitOverride>,
    /// This descriptor's hits; set to 0 it is a peek.
    #[prost(message, optional, tag = "3")]
    pub hits_addend: Option<UInt64Value>,
    /// Give the hits back instead of taking them.
    #[prost(bool, tag = "4")]
    pub is_negative_hits: bool,
}

/// `RateLimitDescriptor.Entry`: one `(key, value)`, both bytes as Envoy sent them.
#[derive(Clone, PartialEq, Eq, Hash, prost::Message)]
pub struct Entry {
    #[prost(bytes = "bytes", tag = "1")]
    pub key: Bytes,
    #[prost(bytes = "bytes", tag = "2")]
    pub value: Bytes,
}

impl Entry {
    /// An entry from anything byte-like (`&str`, `&[u8]`, `Vec<u8>`…); copies.
    pub fn new(key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Entry {
        Entry { key: Bytes::copy_from_slice(key.as_ref()), value: Bytes::copy_from_slice(value.as_ref()) }
    }
}

impl RateLimitDescriptor {
    /// A descriptor with these entries and nothing else set.
    pub fn from_entries<K: AsRef<[u8]>, V: AsRef<[u8]>>(entries: impl IntoIterator<Item = (K, V)>) -> Self {
        RateLimitDescriptor {
            entries: entries.into_iter().map(|(k, v)| Entry::new(k, v)).collect(),
            ..Default::default()
        }
    }

    /// The entries as `(key, value)` byte slices, in order.
    pub fn pairs(&self) -> impl ExactSizeIterator<Item = (&[u8], &[u8])> + Clone {
        self.entries.iter().map(|e| (&e.key[..], &e.value[..]))
    }
}

impl RateLimitRequest {
    /// The request with every entry value replaced by `keyed(value)` (keys, limits and
    /// hits as they are): what bucket keys, metrics and the hot-key view see under
    /// `--key-secret-file`.
    pub fn keyed(&self, keyed: impl Fn(&[u8]) -> Vec<u8>) -> RateLimitRequest {
        let descriptors = self
            .descriptors
            .iter()
            .map(|d| RateLimitDescriptor {
                entries: d
                    .entries
                    .iter()
                    .map(|e| Entry { key: e.key.clone(), value: Bytes::from(keyed(&e.value)) })
                    .collect(),
                limit: d.limit,
                hits_addend: d.hits_addend,
                is_negative_hits: d.is_negative_hits,
            })
            .collect();
        RateLimitRequest { domain: self.domain.clone(), descriptors, hits_addend: self.hits_addend }
    }
}

/// Envoy's own (UTF-8) request, e.g. from a client built on envoy-types: the same message.
impl From<envoy_service::RateLimitRequest> for RateLimitRequest {
    fn from(request: envoy_service::RateLimitRequest) -> Self {
        RateLimitRequest {
            domain: Bytes::from(request.domain),
            descriptors: request.descriptors.into_iter().map(RateLimitDescriptor::from).collect(),
            hits_addend: request.hits_addend,
        }
    }
}

impl From<envoy_descriptor::RateLimitDescriptor> for RateLimitDescriptor {
    fn from(descriptor: envoy_descriptor::RateLimitDescriptor) -> Self {
        RateLimitDescriptor {
            entries: descriptor
                .entries
                .into_iter()
                .map(|e| Entry { key: Bytes::from(e.key), value: Bytes::from(e.value) })
                .collect(),
            limit: descriptor.limit,
            hits_addend: descriptor.hits_addend,
            is_negative_hits: descriptor.is_negative_hits,
        }
    }
}

#[cfg(test)]
mod tests {
    use prost::Message;

    use super::*;

    fn envoy_request() -> envoy_service::RateLimitRequest {
        use envoy_descriptor::rate_limit_descriptor::Entry as EnvoyEntry;
        envoy_service::RateLimitRequest {
            domain: "edge".into(),
            descriptors: vec![envoy_descriptor::RateLimitDescriptor {
                entries: vec![
                    EnvoyEntry { key: "remote_address".into(), value: "10.0.0.1".into() },
                    EnvoyEntry { key: "path".into(), value: "/ä".into() },
                ],
                limit: Some(RateLimitOverride { requests_per_unit: 7, unit: 2 }),
                hits_addend: Some(UInt64Value { value: 0 }),
                is_negative_hits: true,
            }],
            hits_addend: 3,
        }
    }

    #[test]
    fn every_field_of_envoys_message_decodes_the_same() {
        let envoy = envoy_request();
        let decoded = RateLimitRequest::decode(envoy.encode_to_vec().as_slice()).expect("decodes");
        assert_eq!(decoded, RateLimitRequest::from(envoy.clone()));
        // And back: our encoding is Envoy's encoding.
        assert_eq!(decoded.encode_to_vec(), envoy.encode_to_vec());
    }

    #[test]
    fn bytes_that_envoys_strings_reject_decode_as_they_are() {
        let mut request = RateLimitRequest::from(envoy_request());
        request.domain = Bytes::from_static(b"\xff\xfe");
        request.descriptors[0].entries[0] = Entry::new(b"\xff\xfe", b"\xff\xfe");
        let wire = request.encode_to_vec();
        assert!(envoy_service::RateLimitRequest::decode(wire.as_slice()).is_err(), "the bug this fixes");
        let decoded = RateLimitRequest::decode(wire.as_slice()).expect("decodes");
        assert_eq!(&decoded.domain[..], b"\xff\xfe");
        assert_eq!(decoded.descriptors[0].pairs().next(), Some((&b"\xff\xfe"[..], &b"\xff\xfe"[..])));
    }
}
