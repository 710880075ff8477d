//! Approximate mode against the rest of the request surface on a real 3-master cluster, at
//! production flags (default store timeout, reply timeout and sync interval; instances used
//! once they report approximate mode ready): a charge larger than one instance's share, a
//! peek on an instance that never read the bucket and on one that read it once, and an
//! operator's reset through one instance seen by another that only denies (issue 37,
//! holes 1–3, as `tests/approximate_surface.rs` checks them on one Redis).
//!
//! The domain fails closed, so a failure-policy answer is a denial that would look like
//! the limit working: the test fails if any decision came from the failure policy (and if
//! the metric is not exported).

use std::time::Duration;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::google::protobuf::UInt64Value;
use tokio::time::Instant;
use tollgate::app::{RedisTopology, Running, ServeSettings, StoreKind};
use tonic::transport::Channel;

use crate::approx_support::{failure_decisions, metric, reset, within_one_window};
use crate::support::{start_cluster, RedisCluster};

const POLICY: &str =
    "domain: approx\nconsistency: approximate\nfailure_mode: closed\ndescriptors:\n  - key: user\n    \
                      rate_limit: { unit: minute, requests_per_unit: 10, algorithm: fixed_window }\n";

/// How soon a peek or a charge must see what another instance did once Redis holds it
/// (a peek reads again a bucket last read a sync interval, 250 ms, ago; a reset is read
/// once per wake): generous for a loaded machine, never without the fixes.
const SEEN_WITHIN: Duration = Duration::from_secs(1);

struct Instance {
    running: Running,
    client: RateLimitServiceClient<Channel>,
    _config: tempfile::TempDir,
}

/// An instance on `cluster` at production flags but for the ports, the config watch, the
/// drain and an admin port that takes `/v1/reset` without a token; returned once it decides
/// approximate domains locally.
async fn instance(cluster: &RedisCluster) -> Instance {
    let config = tempfile::tempdir().expect("tempdir");
    std::fs::write(config.path().join("approx.yaml"), POLICY).expect("write policy");
    let mut settings = ServeSettings::new(config.path().to_path_buf());
    settings.store = StoreKind::Redis;
    settings.redis_topology = RedisTopology::Cluster { nodes: cluster.nodes() };
    settings.grpc_addr = "127.0.0.1:0".parse().expect("addr");
    settings.admin_addr = "127.0.0.1:0".parse().expect("addr");
    settings.drain = Duration::ZERO;
    settings.watch_config = false;
    settings.admin_allow_unauthenticated_reset = true;
    let running = tollgate::app::spawn(settings).await.expect("app starts");
    let client =
        RateLimitServiceClient::connect(format!("http://{}", running.grpc_addr)).await.expect("connect");
    let instance = Instance { running, client, _config: config };
    until("approximate mode is ready", Duration::from_secs(20), || async {
        metric(instance.running.admin_addr, "tollgate_approximate_ready ").await == 1.0
    })
    .await;
    instance
}

/// `hits` of `user` (`0`: a peek): OK or not, and the remaining it answered.
async fn charge(instance: &Instance, user: &str, hits: u64) -> (bool, u32) {
    let request = RateLimitRequest {
        domain: "approx".into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry { key: "user".into(), value: user.into() }],
            hits_addend: Some(UInt64Value { value: hits }),
            ..Default::default()
        }],
        hits_addend: 0,
    };
    let response = instance.client.clone().should_rate_limit(request).await.expect("grpc").into_inner();
    (
        response.overall_code == Code::Ok as i32,
        response.statuses.first().map_or(u32::MAX, |s| s.limit_remaining),
    )
}

/// Polls `ready` every 5 ms for at most `within`; fails naming `what`.
async fn until<F: std::future::Future<Output = bool>>(
    what: &str,
    within: Duration,
    mut ready: impl FnMut() -> F,
) {
    let deadline = Instant::now() + within;
    while !ready().await {
        assert!(Instant::now() < deadline, "not within {within:?}: {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn costly_charges_peeks_and_resets_hold_across_instances_on_a_cluster() {
    let cluster = start_cluster().await;
    let a = instance(&cluster).await;
    let b = instance(&cluster).await;
    within_one_window(Duration::from_secs(25)).await;

    // Hole 1: 6 of an empty 10 is more than any share (⌈10 / 2N⌉ ≤ 5): decided against
    // Redis, as exact mode would; then the rest, then nothing.
    assert_eq!(charge(&a, "costly", 6).await, (true, 4), "a charge larger than a share");
    assert_eq!(charge(&a, "costly", 4).await, (true, 0));
    assert!(!charge(&a, "costly", 1).await.0, "the bucket is spent");

    // Hole 2: B never read it; its peek reads it first.
    assert_eq!(charge(&b, "costly", 0).await, (false, 0), "B's first peek of a spent bucket");

    // Hole 2's gap: B reads a bucket once, A spends it whole (one charge larger than a
    // share: in Redis when it answers); B's peeks see it within a sync interval or so.
    assert_eq!(charge(&b, "read-once", 0).await, (true, 10), "B's first peek");
    assert_eq!(charge(&a, "read-once", 10).await, (true, 0));
    until("B's peek sees the bucket A spent", SEEN_WITHIN, || async {
        charge(&b, "read-once", 0).await == (false, 0)
    })
    .await;

    // Hole 3: B only denies "costly" (a local denial writes nothing); a reset through A is
    // seen by B within a second.
    assert!(!charge(&b, "costly", 1).await.0, "B denies the spent bucket");
    assert_eq!(reset(a.running.admin_addr, "domain=approx&descriptor=user%3Dcostly").await, 200);
    let since = Instant::now();
    until("B admits the reset bucket", SEEN_WITHIN, || async { charge(&b, "costly", 1).await.0 }).await;
    println!("B admitted the reset bucket {:?} after the reset answered", since.elapsed());

    for instance in [&a, &b] {
        assert_eq!(failure_decisions(instance.running.admin_addr).await, 0.0, "a failure-policy answer");
    }
    a.running.stop().await.expect("stop");
    b.running.stop().await.expect("stop");
}
