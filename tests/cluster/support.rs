//! The app spawner of this binary: the same API as `tests/api/support.rs` (`spawn_app`,
//! `TestApp::check`, `request`, …), so `tests/api/scenarios.rs` runs here unchanged. Here
//! `StoreKind::Redis` means a fresh 3-master Redis Cluster of the test's own; `Memory`
//! stays the memory store.

use std::time::Duration;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{Code, DescriptorStatus};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use tollgate::app::{RedisTopology, Running, ServeSettings, StoreKind};
use tonic::transport::Channel;

pub use crate::cluster_support::RedisCluster;

/// A running Tollgate, and the cluster it owns (if it started one).
pub struct TestApp {
    pub running: Option<Running>,
    pub client: RateLimitServiceClient<Channel>,
    pub cluster: Option<RedisCluster>,
    _config_dir: tempfile::TempDir,
}

/// Spawns the app with these policy files: on the memory store, or on a new cluster.
pub async fn spawn_app(store: StoreKind, policies: &[(&str, &str)]) -> TestApp {
    match store {
        StoreKind::Memory => {
            spawn(StoreKind::Memory, RedisTopology::Single, Duration::from_secs(2), policies).await
        }
        StoreKind::Redis => {
            let cluster = start_cluster().await;
            let mut app = spawn_on(&cluster, Duration::from_secs(2), policies).await;
            app.cluster = Some(cluster);
            app
        }
    }
}

/// Starts a cluster without blocking the runtime's workers.
pub async fn start_cluster() -> RedisCluster {
    tokio::task::spawn_blocking(RedisCluster::start).await.expect("cluster start panicked")
}

/// An app on an existing cluster (several instances may share one).
pub async fn spawn_on(cluster: &RedisCluster, store_timeout: Duration, policies: &[(&str, &str)]) -> TestApp {
    spawn(StoreKind::Redis, RedisTopology::Cluster { nodes: cluster.nodes() }, store_timeout, policies).await
}

/// An app with this store and topology.
pub async fn spawn(
    store: StoreKind,
    topology: RedisTopology,
    store_timeout: Duration,
    policies: &[(&str, &str)],
) -> TestApp {
    spawn_with(store, topology, store_timeout, policies, |_| {}).await
}

/// As [`spawn`], with `tweak` applied to the settings last.
pub async fn spawn_with(
    store: StoreKind,
    topology: RedisTopology,
    store_timeout: Duration,
    policies: &[(&str, &str)],
    tweak: impl FnOnce(&mut ServeSettings),
) -> TestApp {
    let config_dir = tempfile::tempdir().expect("tempdir");
    for (name, yaml) in policies {
        std::fs::write(config_dir.path().join(name), yaml).expect("write policy");
    }
    let mut settings = ServeSettings::new(config_dir.path().to_path_buf());
    settings.store = store;
    settings.redis_topology = topology;
    settings.store_timeout = store_timeout;
    settings.grpc_addr = "127.0.0.1:0".parse().expect("addr");
    settings.admin_addr = "127.0.0.1:0".parse().expect("addr");
    settings.drain = Duration::ZERO;
    settings.watch_config = false;
    tweak(&mut settings);
    let running = tollgate::app::spawn(settings).await.expect("app starts");
    let client = RateLimitServiceClient::connect(format!("http://{}", running.grpc_addr))
        .await
        .expect("connect to app");
    TestApp { running: Some(running), client, cluster: None, _config_dir: config_dir }
}

impl TestApp {
    pub fn cluster(&mut self) -> &mut RedisCluster {
        self.cluster.as_mut().expect("this app runs on its own cluster")
    }

    /// Calls ShouldRateLimit; panics on a gRPC error.
    pub async fn check(&self, request: RateLimitRequest) -> RateLimitResponse {
        self.client.clone().should_rate_limit(request).await.expect("grpc call").into_inner()
    }

    /// Calls ShouldRateLimit and returns the gRPC result.
    pub async fn call(&self, request: RateLimitRequest) -> Result<RateLimitResponse, tonic::Status> {
        self.client.clone().should_rate_limit(request).await.map(|r| r.into_inner())
    }

    /// Sends the same one-descriptor request `n` times; returns how many were OK.
    pub async fn allowed_of(&self, n: usize, request: &RateLimitRequest) -> usize {
        let mut allowed = 0;
        for _ in 0..n {
            if self.check(request.clone()).await.overall_code == Code::Ok as i32 {
                allowed += 1;
            }
        }
        allowed
    }
}

/// One descriptor from `(key, value)` pairs.
pub fn descriptor(entries: &[(&str, &str)]) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: entries.iter().map(|(k, v)| Entry { key: k.to_string(), value: v.to_string() }).collect(),
        ..Default::default()
    }
}

/// A request with one descriptor per element of `descriptors`.
pub fn request(domain: &str, descriptors: &[&[(&str, &str)]]) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.to_string(),
        descriptors: descriptors.iter().map(|d| descriptor(d)).collect(),
        hits_addend: 0,
    }
}

pub fn is_ok(status: &DescriptorStatus) -> bool {
    status.code == Code::Ok as i32
}

pub fn over(response: &RateLimitResponse) -> bool {
    response.overall_code == Code::OverLimit as i32
}

/// Polls `f` until it returns true or `timeout` passes.
pub async fn eventually<F, Fut>(timeout: Duration, mut f: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if f().await {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
