//! `spawn_app`: the whole server in-process on port 0, with its own policy directory and,
//! for the Redis store, its own redis-server. Every test gets a fresh, isolated instance.

use std::path::PathBuf;
use std::time::Duration;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{Code, DescriptorStatus};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use tollgate::app::{Running, ServeSettings, StoreKind};
use tollgate::store::RedisSettings;
use tonic::transport::Channel;

pub use crate::redis_support::RedisServer;

/// A running Tollgate with everything it needs.
pub struct TestApp {
    pub running: Option<Running>,
    pub client: RateLimitServiceClient<Channel>,
    pub redis: Option<RedisServer>,
    pub config_dir: tempfile::TempDir,
}

/// Options for `spawn_with`.
pub struct Options {
    pub store: StoreKind,
    pub store_timeout: Duration,
    /// Reuse this Redis URL instead of starting a server (several instances, one Redis).
    pub redis_url: Option<String>,
    pub key_prefix: String,
    pub memory_max_keys: usize,
    pub drain: Duration,
    pub shadow_mode: bool,
    pub watch_config: bool,
    pub response_headers: bool,
}

impl Options {
    pub fn new(store: StoreKind) -> Options {
        Options {
            store,
            // Generous: tests of exact counts must not see a timed-out call that still ran.
            store_timeout: Duration::from_secs(2),
            redis_url: None,
            key_prefix: String::new(),
            memory_max_keys: 100_000,
            drain: Duration::ZERO,
            shadow_mode: false,
            watch_config: true,
            response_headers: false,
        }
    }
}

/// Spawns the app on `store` with the given policy files (name, YAML).
pub async fn spawn_app(store: StoreKind, policies: &[(&str, &str)]) -> TestApp {
    spawn_with(Options::new(store), policies).await
}

pub async fn spawn_with(options: Options, policies: &[(&str, &str)]) -> TestApp {
    let config_dir = tempfile::tempdir().expect("tempdir");
    for (name, yaml) in policies {
        std::fs::write(config_dir.path().join(name), yaml).expect("write policy");
    }
    let (redis, redis_url) = match (options.store, options.redis_url) {
        (StoreKind::Redis, None) => {
            let server = RedisServer::start();
            let url = server.url();
            (Some(server), url)
        }
        (_, Some(url)) => (None, url),
        (StoreKind::Memory, None) => (None, "redis://127.0.0.1:1/".to_string()),
    };
    let mut settings = ServeSettings::new(config_dir.path().to_path_buf());
    settings.store = options.store;
    settings.redis = RedisSettings { url: redis_url, connections: 2 };
    settings.redis_key_prefix = options.key_prefix;
    settings.store_timeout = options.store_timeout;
    settings.memory_max_keys = options.memory_max_keys;
    settings.grpc_addr = "127.0.0.1:0".parse().expect("addr");
    settings.admin_addr = "127.0.0.1:0".parse().expect("addr");
    settings.drain = options.drain;
    settings.shadow_mode = options.shadow_mode;
    settings.watch_config = options.watch_config;
    settings.response_headers = options.response_headers;
    let running = tollgate::app::spawn(settings).await.expect("app starts");
    let client = RateLimitServiceClient::connect(format!("http://{}", running.grpc_addr))
        .await
        .expect("connect to app");
    TestApp { running: Some(running), client, redis, config_dir }
}

impl TestApp {
    pub fn config_path(&self) -> PathBuf {
        self.config_dir.path().to_path_buf()
    }

    pub fn redis(&mut self) -> &mut RedisServer {
        self.redis.as_mut().expect("this app runs on its own redis")
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
