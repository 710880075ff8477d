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
#[derive(Clone)]
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
    /// Serve gRPC over TLS (`client` then stays unconnected: build a TLS client).
    pub tls: Option<tollgate::app::TlsFiles>,
    pub response_headers: bool,
    /// `--limit-headers` with these names.
    pub limit_headers: Option<tollgate::service::headers::LimitHeaderNames>,
    /// `--response-dynamic-metadata`.
    pub response_dynamic_metadata: bool,
    pub breaker: tollgate::store::breaker::BreakerSettings,
    pub redis_ca_file: Option<PathBuf>,
    /// `--redis-client-cert-file`, `--redis-client-key-file`.
    pub redis_client_cert: Option<(PathBuf, PathBuf)>,
    /// `--redis-max-inflight` (commands outstanding per connection).
    pub max_inflight: usize,
    /// Per-key coalescing (`--no-coalesce` when false).
    pub coalesce: bool,
    /// `--redis-connections`.
    pub redis_connections: usize,
    /// `--admin-token-file`.
    pub admin_token_file: Option<PathBuf>,
    /// `--admin-allow-unauthenticated-reset`.
    pub admin_allow_unauthenticated_reset: bool,
    /// `--merge-domains`, `--default-algorithm`.
    pub config_options: tollgate::config::LoadOptions,
    /// `--lease-time-ms`.
    pub lease_time: Duration,
    /// `--tracing` and its settings.
    pub tracing: Option<tollgate::telemetry::trace::TraceSettings>,
    /// `--key-secret-file`.
    pub key_secret_file: Option<PathBuf>,
    /// `--grpc-max-connection-age`; `None` keeps the default.
    pub max_connection_age: Option<Duration>,
    /// `--redis-windows`.
    pub windows: tollgate::store::redis::Windows,
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
            tls: None,
            response_headers: false,
            limit_headers: None,
            response_dynamic_metadata: false,
            breaker: Default::default(),
            redis_ca_file: None,
            redis_client_cert: None,
            max_inflight: tollgate::store::redis::DEFAULT_MAX_INFLIGHT,
            coalesce: tollgate::store::redis::DEFAULT_COALESCE,
            redis_connections: 2,
            admin_token_file: None,
            admin_allow_unauthenticated_reset: false,
            config_options: Default::default(),
            lease_time: tollgate::store::lease::DEFAULT_LEASE_TIME,
            tracing: None,
            key_secret_file: None,
            max_connection_age: None,
            windows: Default::default(),
        }
    }
}

/// An admin token in a file of its own (`--admin-token-file`), kept while this lives.
pub struct AdminToken {
    dir: tempfile::TempDir,
}

impl AdminToken {
    pub fn new(token: &str) -> AdminToken {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("admin-token"), format!("{token}\n")).expect("write token");
        AdminToken { dir }
    }

    /// Options on `store` at the production store timeout, with this token.
    pub fn production(&self, store: StoreKind) -> Options {
        let production = tollgate::app::ServeSettings::new(PathBuf::new());
        Options {
            store_timeout: production.store_timeout,
            admin_token_file: Some(self.dir.path().join("admin-token")),
            ..Options::new(store)
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
    spawn_in(options, config_dir).await
}

/// Like `spawn_with`, on a config directory the caller prepared (e.g. a ConfigMap layout).
pub async fn spawn_in(options: Options, config_dir: tempfile::TempDir) -> TestApp {
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
    settings.redis = RedisSettings::new(redis_url);
    settings.redis.breaker = options.breaker;
    let client = options
        .redis_client_cert
        .map(|(cert_file, key_file)| tollgate::store::redis::ClientCert { cert_file, key_file });
    settings.redis.tls = tollgate::store::redis::Tls::new(options.redis_ca_file, client);
    settings.redis.max_inflight = options.max_inflight;
    settings.redis.coalesce = options.coalesce;
    settings.redis.connections = options.redis_connections;
    settings.redis.windows = options.windows;
    settings.admin_token_file = options.admin_token_file;
    settings.admin_allow_unauthenticated_reset = options.admin_allow_unauthenticated_reset;
    settings.config_options = options.config_options;
    settings.lease_time = options.lease_time;
    settings.redis_key_prefix = options.key_prefix;
    settings.store_timeout = options.store_timeout;
    settings.memory_max_keys = options.memory_max_keys;
    settings.grpc_addr = "127.0.0.1:0".parse().expect("addr");
    settings.admin_addr = "127.0.0.1:0".parse().expect("addr");
    settings.drain = options.drain;
    settings.shadow_mode = options.shadow_mode;
    settings.watch_config = options.watch_config;
    settings.tls = options.tls;
    let plaintext = settings.tls.is_none();
    settings.response_headers = options.response_headers;
    settings.limit_headers = options.limit_headers;
    settings.response_dynamic_metadata = options.response_dynamic_metadata;
    settings.tracing = options.tracing;
    settings.key_secret_file = options.key_secret_file;
    if let Some(age) = options.max_connection_age {
        settings.max_connection_age = Some(age);
    }
    let running = tollgate::app::spawn(settings).await.expect("app starts");
    let endpoint = format!("http://{}", running.grpc_addr);
    let client = if plaintext {
        RateLimitServiceClient::connect(endpoint).await.expect("connect to app")
    } else {
        RateLimitServiceClient::new(Channel::from_shared(endpoint).expect("endpoint").connect_lazy())
    };
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

impl TestApp {
    /// The admin listener's address.
    pub fn admin_addr(&self) -> std::net::SocketAddr {
        self.running.as_ref().expect("app is running").admin_addr
    }

    /// One admin HTTP request; panics when the admin server cannot be reached.
    pub async fn admin(&self, method: &str, path: &str) -> HttpResponse {
        http(self.admin_addr(), method, path).await.expect("admin HTTP request")
    }

    /// The `/metrics` text.
    pub async fn metrics(&self) -> String {
        let response = self.admin("GET", "/metrics").await;
        assert_eq!(response.status, 200, "{}", response.body);
        response.body
    }
}

/// An admin HTTP answer.
#[derive(Debug, Clone)]
pub struct HttpResponse {
    pub status: u16,
    pub body: String,
}

/// A tiny HTTP/1.1 client: one request per connection (`Connection: close`), no body sent;
/// understands `Content-Length`, chunked and read-to-close bodies.
pub async fn http(addr: std::net::SocketAddr, method: &str, path: &str) -> std::io::Result<HttpResponse> {
    http_with(addr, method, path, &[]).await
}

/// `http` with extra request headers (`name`, `value`).
pub async fn http_with(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> std::io::Result<HttpResponse> {
    http_request(addr, method, path, headers, "").await
}

/// `http_with` and a request body.
pub async fn http_request(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> std::io::Result<HttpResponse> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    let extra: String = headers.iter().map(|(k, v)| format!("{k}: {v}\r\n")).collect();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n{extra}\r\n{body}",
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await?;
    parse_http(&raw)
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidData, "malformed HTTP response"))
}

fn parse_http(raw: &[u8]) -> Option<HttpResponse> {
    let text = String::from_utf8_lossy(raw);
    let (head, body) = text.split_once("\r\n\r\n")?;
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    let header = |name: &str| {
        head.lines().skip(1).find_map(|line| {
            let (k, v) = line.split_once(':')?;
            k.trim().eq_ignore_ascii_case(name).then(|| v.trim().to_ascii_lowercase())
        })
    };
    let body = if header("transfer-encoding").is_some_and(|v| v.contains("chunked")) {
        dechunk(body)?
    } else {
        match header("content-length") {
            Some(n) => body.get(..n.parse::<usize>().ok()?)?.to_string(),
            None => body.to_string(),
        }
    };
    Some(HttpResponse { status, body })
}

fn dechunk(mut rest: &str) -> Option<String> {
    let mut body = String::new();
    loop {
        let (size, after) = rest.split_once("\r\n")?;
        let size = usize::from_str_radix(size.split(';').next()?.trim(), 16).ok()?;
        if size == 0 {
            return Some(body);
        }
        body.push_str(after.get(..size)?);
        rest = after.get(size + 2..)?;
    }
}

/// The value of one series in a Prometheus text exposition, e.g.
/// `tollgate_hits_total{domain="api",rule="per-user"}`; `None` when absent. Compare it with
/// `Some(..)`, or read it with [`metric_value`]: never as 0 when absent (a renamed or
/// unexported metric must fail the test, not pass an `== 0`).
pub fn metric(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|line| {
        let (name, value) = line.rsplit_once(' ')?;
        (name == series).then(|| value.parse().ok()).flatten()
    })
}

/// The value of one series; panics, naming it and showing the scrape, when it is absent.
#[track_caller]
pub fn metric_value(text: &str, series: &str) -> f64 {
    metric(text, series).unwrap_or_else(|| panic!("metric series {series} is not exported:\n{text}"))
}

/// Whether the metric family `name` is exported (its `# TYPE` line, written once the family
/// has a series). `name` may carry a counter's `_total` (OpenMetrics names the family
/// without it).
pub fn family_exported(text: &str, name: &str) -> bool {
    let family = name.strip_suffix("_total").unwrap_or(name);
    text.lines().any(|line| {
        line.strip_prefix("# TYPE ")
            .and_then(|rest| rest.split(' ').next())
            .is_some_and(|exported| exported == family || exported == name)
    })
}

/// A labelled counter the server creates at its first increment: its value, or 0 while
/// absent — but only when its family is exported (another of its series is), so that a
/// renamed metric fails. Panics, with the scrape, otherwise. Prefer [`metric_value`] for
/// the many series the server exports at 0 from startup.
#[track_caller]
pub fn counter_value(text: &str, series: &str) -> f64 {
    let family = series.split('{').next().unwrap_or(series);
    assert!(family_exported(text, family), "metric family {family} is not exported:\n{text}");
    metric(text, series).unwrap_or(0.0)
}

/// Requests sent continuously by several tasks while something else happens (a reload, a
/// shutdown); `stop` returns what they saw.
pub struct Traffic {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<TrafficReport>>,
}

/// What the traffic saw: request count, every gRPC error, and each distinct tuple of
/// `current_limit.requests_per_unit` (0 when a status has no limit), one per descriptor.
#[derive(Debug, Default)]
pub struct TrafficReport {
    pub requests: usize,
    /// Answers whose overall code was OK.
    pub allowed: usize,
    pub errors: Vec<String>,
    pub limits: std::collections::BTreeSet<Vec<u32>>,
}

impl Traffic {
    /// `tasks` tasks, each sending `request` in a loop on `client`.
    pub fn start(
        client: &RateLimitServiceClient<Channel>,
        request: &RateLimitRequest,
        tasks: usize,
    ) -> Traffic {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let tasks = (0..tasks)
            .map(|_| {
                let (mut client, request, stop) = (client.clone(), request.clone(), stop.clone());
                tokio::spawn(async move {
                    let mut report = TrafficReport::default();
                    while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                        report.requests += 1;
                        match client.should_rate_limit(request.clone()).await {
                            Ok(response) => {
                                let response = response.into_inner();
                                report.allowed += usize::from(!over(&response));
                                report.limits.insert(limits(&response));
                            }
                            Err(status) => report.errors.push(status.to_string()),
                        }
                    }
                    report
                })
            })
            .collect();
        Traffic { stop, tasks }
    }

    /// Stops every task and merges their reports.
    pub async fn stop(self) -> TrafficReport {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        let mut all = TrafficReport::default();
        for task in self.tasks {
            let report = task.await.expect("traffic task");
            all.requests += report.requests;
            all.allowed += report.allowed;
            all.errors.extend(report.errors);
            all.limits.extend(report.limits);
        }
        all
    }
}

/// `current_limit.requests_per_unit` of each status (0 without a limit).
pub fn limits(response: &RateLimitResponse) -> Vec<u32> {
    response.statuses.iter().map(|s| s.current_limit.as_ref().map_or(0, |l| l.requests_per_unit)).collect()
}
