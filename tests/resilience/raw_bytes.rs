//! Domain, keys and values that are not UTF-8, sent as raw gRPC (issue #12, item 1).
//!
//! Envoy forwards header bytes ≥ 0x80 into descriptor values. Before, such a request failed
//! to decode (`INTERNAL`) and Envoy failed open for every descriptor of it. Each case here
//! is a request with the bytes `\xff\xfe` somewhere: never a gRPC error; a value is its own
//! bucket, limited like any other; a key matches nothing; a domain is an unknown domain.
//! On the memory store and on Redis.

use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use tollgate::app::StoreKind;
use tollgate::service::wire::{RateLimitDescriptor, RateLimitRequest};
use tonic::codegen::http::uri::PathAndQuery;
use tonic::transport::Channel;
use tonic_prost::ProstCodec;

use crate::support::*;

const POLICY: (&str, &str) = (
    "bytes.yaml",
    "domain: bytes_d\nfailure_mode: closed\ndescriptors:\n\
     \x20 - key: user\n    detailed_metric: true\n    rate_limit: { unit: minute, requests_per_unit: 3 }\n\
     \x20 - key: ip\n    rate_limit: { unit: minute, requests_per_unit: 100 }\n\
     \x20 - key: path\n    value: \"/api/*\"\n    rate_limit: { unit: minute, requests_per_unit: 3 }\n",
);

const BYTES: &[u8] = b"\xff\xfe";

/// A gRPC client whose request message has `bytes` where Envoy's has `string`: it sends
/// what Envoy sends for a header holding bytes that are not UTF-8.
struct RawClient(tonic::client::Grpc<Channel>);

impl RawClient {
    async fn connect(app: &TestApp) -> RawClient {
        let addr = app.running.as_ref().expect("running").grpc_addr;
        let channel =
            Channel::from_shared(format!("http://{addr}")).expect("uri").connect().await.expect("connect");
        RawClient(tonic::client::Grpc::new(channel))
    }

    async fn call(&mut self, request: RateLimitRequest) -> Result<RateLimitResponse, tonic::Status> {
        self.0.ready().await.map_err(|e| tonic::Status::unavailable(e.to_string()))?;
        let path = PathAndQuery::from_static("/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit");
        let codec = ProstCodec::<RateLimitRequest, RateLimitResponse>::default();
        self.0.unary(tonic::Request::new(request), path, codec).await.map(tonic::Response::into_inner)
    }

    /// Calls and expects an answer: a gRPC error is what this suite exists to rule out.
    async fn check(&mut self, domain: &[u8], descriptors: &[&[(&[u8], &[u8])]]) -> RateLimitResponse {
        let request = RateLimitRequest {
            domain: domain.to_vec().into(),
            descriptors: descriptors
                .iter()
                .map(|d| RateLimitDescriptor::from_entries(d.iter().copied()))
                .collect(),
            hits_addend: 0,
        };
        self.call(request).await.unwrap_or_else(|status| panic!("{descriptors:?}: gRPC error {status}"))
    }
}

/// `limit_remaining` of each status.
fn remaining(response: &RateLimitResponse) -> Vec<u32> {
    response.statuses.iter().map(|s| s.limit_remaining).collect()
}

async fn bytes_are_limited_like_any_value(store: StoreKind) {
    let mut app = spawn_app(store, &[POLICY]).await;
    let mut raw = RawClient::connect(&app).await;
    let domain = b"bytes_d";

    // A value: 3 per minute in its own bucket, then OVER_LIMIT.
    for left in [2, 1, 0] {
        let response = raw.check(domain, &[&[(b"user", BYTES)]]).await;
        assert!(!over(&response) && response.statuses[0].current_limit.is_some(), "{response:?}");
        assert_eq!(remaining(&response), [left]);
    }
    assert!(over(&raw.check(domain, &[&[(b"user", BYTES)]]).await), "4th with the same bytes");
    // Other bytes, a prefix of them, their escaped text and the replacement character: each
    // a fresh bucket (no lossy decoding merges them).
    let others: [&[u8]; 5] = [b"\xff", b"\xfe", b"\xfe\xff", b"\\xff\\xfe", "\u{fffd}\u{fffd}".as_bytes()];
    for other in others {
        assert_eq!(remaining(&raw.check(domain, &[&[(b"user", other)]]).await), [2], "{other:?}");
    }

    // The attack: the per-IP descriptor of the same request is still charged.
    for _ in 0..4 {
        raw.check(domain, &[&[(b"ip", b"10.0.0.1")], &[(b"user", b"\xff\xff")]]).await;
    }
    let both = raw.check(domain, &[&[(b"ip", b"10.0.0.1")], &[(b"user", b"\xff\xff")]]).await;
    assert_eq!(remaining(&both), [95, 0], "ip charged 5 times, the value 3 then denied");
    assert!(over(&both));

    // A wildcard takes bytes that are not UTF-8 (else one such byte would escape the rule).
    for left in [2, 1, 0] {
        assert_eq!(remaining(&raw.check(domain, &[&[(b"path", b"/api/\xff\xfe")]]).await), [left]);
    }
    assert!(over(&raw.check(domain, &[&[(b"path", b"/api/\xff\xfe")]]).await));

    // A key: configured keys are UTF-8, so it matches nothing: OK, no limit, no bucket.
    let buckets = redis_keys(&mut app);
    let unmatched = raw.check(domain, &[&[(BYTES, BYTES)], &[(BYTES, b"v")]]).await;
    assert!(!over(&unmatched) && unmatched.statuses.iter().all(|s| s.current_limit.is_none()));
    // A domain: an unknown domain, OK for every descriptor, nothing charged, counted.
    let unknown = raw.check(BYTES, &[&[(b"user", BYTES)], &[(b"ip", b"10.0.0.1")]]).await;
    assert!(!over(&unknown) && unknown.statuses.len() == 2, "{unknown:?}");
    assert!(unknown.statuses.iter().all(|s| is_ok(s) && s.current_limit.is_none()));
    assert_eq!(redis_keys(&mut app), buckets, "nothing charged");
    let metrics = app.metrics().await;
    assert_eq!(metric(&metrics, "tollgate_unknown_domain_requests_total"), Some(1.0));

    // Metric labels (detailed_metric) show the bytes escaped: `\xff\xfe`, which the text
    // exposition writes with its backslashes doubled.
    assert!(metrics.contains(r"\\xff\\xfe"), "{metrics}");
}

/// The bucket keys in Redis (raw bytes, sorted); `None` on the memory store.
fn redis_keys(app: &mut TestApp) -> Option<Vec<Vec<u8>>> {
    app.redis.as_ref()?;
    let mut keys: Vec<Vec<u8>> = redis::cmd("KEYS").arg("*").query(&mut app.redis().client()).expect("KEYS");
    keys.sort();
    Some(keys)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bytes_that_are_not_utf8_are_limited_like_any_value_memory() {
    bytes_are_limited_like_any_value(StoreKind::Memory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bytes_that_are_not_utf8_are_limited_like_any_value_redis() {
    bytes_are_limited_like_any_value(StoreKind::Redis).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_keys_of_such_values_are_hashed_text() {
    let mut app = spawn_app(StoreKind::Redis, &[POLICY]).await;
    let mut raw = RawClient::connect(&app).await;
    for value in [&b"\xff"[..], b"\xfe", b"\\xff"] {
        raw.check(b"bytes_d", &[&[(b"user", value)]]).await;
    }
    let keys = redis_keys(&mut app).expect("redis");
    assert_eq!(keys.len(), 3, "three values, three buckets");
    let keys: Vec<&str> = keys.iter().map(|k| std::str::from_utf8(k).expect("keys are UTF-8")).collect();
    assert_eq!(keys.iter().filter(|k| k.contains('#')).count(), 2, "the byte values are hashed: {keys:?}");
    assert!(keys.iter().any(|k| k.ends_with(r"4:\xff")), "the text `\\xff` stays a literal part: {keys:?}");
}
