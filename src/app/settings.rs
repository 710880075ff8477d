//! What `serve` runs with: `ServeSettings` (from flags, or built by tests), the store and
//! Redis topology it names, gRPC TLS files, and the check that refuses settings no server
//! can keep its promises with. Data only: nothing here starts anything.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::config::LoadOptions;
use crate::service::bounds::Bounds;
use crate::service::headers::LimitHeaderNames;
use crate::store::approx::ApproxSettings;
use crate::store::RedisSettings;
use crate::telemetry::metrics::SeriesLimits;

/// Which store backs the buckets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum StoreKind {
    Memory,
    Redis,
}

/// Which Redis deployment `--store redis` uses.
#[derive(Clone, Default, PartialEq, Eq)]
pub enum RedisTopology {
    /// One server (or a proxy) at `redis.url`.
    #[default]
    Single,
    /// A Redis Cluster, discovered from these seed nodes (`host:port` or URLs).
    Cluster { nodes: Vec<String> },
    /// The master the sentinels call `master`; `redis.url` gives its credentials, db and TLS.
    Sentinel { master: String, sentinels: Vec<String> },
}

impl std::fmt::Debug for RedisTopology {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let redacted = |nodes: &[String]| -> Vec<String> {
            nodes.iter().map(|n| crate::store::redis::redact_url(n)).collect()
        };
        match self {
            RedisTopology::Single => f.write_str("Single"),
            RedisTopology::Cluster { nodes } => {
                f.debug_struct("Cluster").field("nodes", &redacted(nodes)).finish()
            }
            RedisTopology::Sentinel { master, sentinels } => f
                .debug_struct("Sentinel")
                .field("master", master)
                .field("sentinels", &redacted(sentinels))
                .finish(),
        }
    }
}

/// Server-side TLS for gRPC; with `client_ca`, clients must present a certificate (mTLS).
#[derive(Debug, Clone)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub client_ca: Option<PathBuf>,
}

/// A listener that serves the metrics alone (the peer's PROMETHEUS_ADDR / PROMETHEUS_PATH).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetricsListener {
    pub addr: SocketAddr,
    /// Starts with `/`; any other path is 404.
    pub path: String,
}

/// Everything `serve` needs, from flags or environment.
#[derive(Debug, Clone)]
pub struct ServeSettings {
    /// The policy files (unused when `xds` is set).
    pub config: PathBuf,
    /// `Some`: policies come from this xDS server instead of files.
    pub xds: Option<crate::sources::xds::XdsSettings>,
    /// `/readyz` only once a domain is configured (`HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED`).
    pub ready_needs_domain: bool,
    /// `--merge-domains`, `--default-algorithm`: how the config's files load (every reload
    /// too).
    pub config_options: LoadOptions,
    pub store: StoreKind,
    pub redis: RedisSettings,
    /// Single server, Cluster or Sentinel (only with `store: Redis`).
    pub redis_topology: RedisTopology,
    pub redis_key_prefix: String,
    pub store_timeout: Duration,
    /// `--lease-hot-keys`: every rule's hot buckets may be leased (not only `lease: true`).
    pub lease_hot_keys: bool,
    /// `--lease-time-ms`: how long a leased block may be spent.
    pub lease_time: Duration,
    /// `--sync-interval-ms`: approximate domains' sync period.
    pub sync_interval: Duration,
    /// `--sync-staleness-ms`: how long failing syncs go on deciding from estimates.
    pub sync_staleness: Duration,
    pub memory_max_keys: usize,
    pub grpc_addr: SocketAddr,
    pub admin_addr: SocketAddr,
    /// Where envoyproxy/ratelimit's `/healthcheck` answers too (its HTTP port), if anywhere.
    pub healthcheck_addr: Option<SocketAddr>,
    /// Where the metrics are served alone too, if anywhere.
    pub metrics_listener: Option<MetricsListener>,
    pub near_limit_ratio: f64,
    pub shadow_mode: bool,
    /// Add x-ratelimit-* / retry-after headers to responses (not with Envoy's own option).
    pub response_headers: bool,
    /// Add the peer's RateLimit-* headers, under these names.
    pub limit_headers: Option<LimitHeaderNames>,
    /// `--ratelimit-headers ietf`: the draft standard's RateLimit-Policy and RateLimit.
    pub ietf_headers: bool,
    /// `--retry-after-jitter`: up to this share of the wait added to retry-after at random.
    pub retry_after_jitter: f64,
    /// Answer the request and the passed rules' `metadata` as dynamic metadata.
    pub response_dynamic_metadata: bool,
    /// Bounds on request size (past them: the domain's failure policy).
    pub bounds: Bounds,
    /// Bounds on the metric series of rules that carry request values.
    pub metric_series: SeriesLimits,
    /// How long to keep serving after SIGTERM while endpoints are withdrawn.
    pub drain: Duration,
    /// `Some`: spans of sampled requests are exported (`crate::telemetry::trace`).
    pub tracing: Option<crate::telemetry::trace::TraceSettings>,
    /// Connections older than this (± 10 % jitter per process) are asked to reconnect.
    pub max_connection_age: Option<Duration>,
    pub tls: Option<TlsFiles>,
    /// Watch the config location and reload on change.
    pub watch_config: bool,
    /// A file holding the bearer token `POST` admin endpoints and `/v1/usage` require
    /// (none: open, and `/v1/reset` refused).
    pub admin_token_file: Option<PathBuf>,
    /// `/v1/reset` (and `/v1/override`) without a token (`--admin-allow-unauthenticated-reset`).
    pub admin_allow_unauthenticated_reset: bool,
    /// `--key-secret-file`: request values enter keys keyed-hashed (`store::key::KeySecret`).
    pub key_secret_file: Option<PathBuf>,
}

impl ServeSettings {
    /// Defaults for a given config path (loopback, memory store), as the CLI has them.
    pub fn new(config: PathBuf) -> ServeSettings {
        ServeSettings {
            tracing: None,
            config,
            xds: None,
            ready_needs_domain: false,
            config_options: LoadOptions::default(),
            store: StoreKind::Memory,
            redis: RedisSettings::new("redis://127.0.0.1:6379/"),
            redis_topology: RedisTopology::Single,
            redis_key_prefix: String::new(),
            store_timeout: Duration::from_millis(10),
            lease_hot_keys: false,
            lease_time: crate::store::lease::DEFAULT_LEASE_TIME,
            sync_interval: Duration::from_millis(250),
            sync_staleness: Duration::from_secs(10),
            memory_max_keys: 1_000_000,
            grpc_addr: SocketAddr::from(([127, 0, 0, 1], 8081)),
            admin_addr: SocketAddr::from(([127, 0, 0, 1], 9102)),
            healthcheck_addr: None,
            metrics_listener: None,
            near_limit_ratio: 0.8,
            shadow_mode: false,
            response_headers: false,
            ietf_headers: false,
            retry_after_jitter: 0.0,
            limit_headers: None,
            response_dynamic_metadata: false,
            bounds: Bounds::default(),
            metric_series: SeriesLimits::default(),
            drain: Duration::from_secs(5),
            max_connection_age: Some(Duration::from_secs(3600)),
            tls: None,
            watch_config: true,
            admin_token_file: None,
            admin_allow_unauthenticated_reset: false,
            key_secret_file: None,
        }
    }
}

/// Refuses settings no server can keep its promises with, before anything starts.
pub(super) fn validate(settings: &ServeSettings) -> anyhow::Result<()> {
    if settings.store_timeout.is_zero() {
        anyhow::bail!("--store-timeout-ms must be at least 1: with 0 every charge would be answered by the failure policy");
    }
    let approx = ApproxSettings {
        interval: settings.sync_interval,
        staleness: settings.sync_staleness,
        max_keys: settings.memory_max_keys,
        window_keys: false,
    };
    approx.validate().map_err(|e| anyhow::anyhow!(e))
}
