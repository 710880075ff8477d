//! `tollgate serve`: its flags (each also a `TOLLGATE_*` variable) and the
//! `ServeSettings` they make for `app`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use crate::app::{MetricsListener, RedisTopology, ServeSettings, StoreKind, TlsFiles};
use crate::service::bounds::Bounds;
use crate::service::headers::LimitHeaderNames;
use crate::store::breaker::BreakerSettings;
use crate::store::RedisSettings;
use crate::telemetry::metrics::SeriesLimits;

use super::load::LoadFlags;
use super::tracing::TracingFlags;
use super::values::{
    parse_duration, parse_limit_header_names, parse_metrics_path, parse_sentinel, parse_share, SentinelArg,
};
use super::xds::XdsFlags;

#[derive(Debug, Args)]
pub struct Serve {
    /// A policy file or a directory of *.yaml / *.yml files (one domain each, unless
    /// --merge-domains) [default: config]. Not with --config-source xds.
    #[arg(long, env = "TOLLGATE_CONFIG")]
    pub config: Option<PathBuf>,
    #[command(flatten)]
    pub load: LoadFlags,
    #[command(flatten)]
    pub source: XdsFlags,
    #[command(flatten)]
    pub trace: TracingFlags,
    /// Where buckets live: process memory (one instance) or Redis (a fleet).
    #[arg(long, env = "TOLLGATE_STORE", value_enum, default_value = "memory")]
    pub store: StoreKind,
    /// Redis URL: redis://[user:password@]host:port/db, or rediss:// for TLS.
    #[arg(
        long,
        env = "TOLLGATE_REDIS_URL",
        default_value = "redis://127.0.0.1:6379/",
        hide_env_values = true
    )]
    pub redis_url: String,
    /// Redis Cluster seed nodes (with --store redis): `host:port,host:port`, or
    /// `redis://[user:password@]host:port` (`rediss://` for TLS). Not with --redis-url.
    #[arg(
        long,
        env = "TOLLGATE_REDIS_CLUSTER_NODES",
        value_delimiter = ',',
        conflicts_with_all = ["redis_url", "redis_sentinel"],
        hide_env_values = true
    )]
    pub redis_cluster_nodes: Vec<String>,
    /// Redis Sentinel (with --store redis): `master_name,host:port,host:port` (sentinels as
    /// `host:port` or URLs). --redis-url then gives only the master's user, password, db, TLS.
    #[arg(long, env = "TOLLGATE_REDIS_SENTINEL", value_parser = parse_sentinel, hide_env_values = true)]
    pub redis_sentinel: Option<SentinelArg>,
    /// Prefix for every Redis key (for a Redis shared with other applications).
    #[arg(long, env = "TOLLGATE_REDIS_KEY_PREFIX", default_value = "")]
    pub redis_key_prefix: String,
    /// PEM CA bundle to verify the Redis server's TLS certificate (rediss://).
    #[arg(long, env = "TOLLGATE_REDIS_CA_FILE")]
    pub redis_ca_file: Option<PathBuf>,
    /// PEM client certificate presented to every rediss:// server (with
    /// --redis-client-key-file). Read again for every new connection: a rotated file is used
    /// without a restart.
    #[arg(long, env = "TOLLGATE_REDIS_CLIENT_CERT_FILE")]
    pub redis_client_cert_file: Option<PathBuf>,
    /// PEM private key of --redis-client-cert-file.
    #[arg(long, env = "TOLLGATE_REDIS_CLIENT_KEY_FILE")]
    pub redis_client_key_file: Option<PathBuf>,
    /// Fewest failed Redis calls within the breaker window that open the circuit breaker
    /// (0 = no breaker).
    #[arg(long, env = "TOLLGATE_BREAKER_FAILURES", default_value_t = 5)]
    pub breaker_failures: u32,
    /// Share of the Redis calls within the breaker window that must have failed to open it.
    #[arg(long, env = "TOLLGATE_BREAKER_FAILURE_RATE", default_value_t = 0.5, value_parser = parse_share)]
    pub breaker_failure_rate: f64,
    /// The circuit breaker's sliding window, in ms: how far back Redis calls count.
    #[arg(
        long,
        env = "TOLLGATE_BREAKER_WINDOW_MS",
        default_value_t = 1000,
        value_parser = clap::value_parser!(u64).range(10..)
    )]
    pub breaker_window_ms: u64,
    /// First cool-down of an open breaker, in ms (doubles after each failed probe, up to 2 s or this value if larger).
    #[arg(long, env = "TOLLGATE_BREAKER_COOLDOWN_MS", default_value_t = 1000)]
    pub breaker_cooldown_ms: u64,
    /// Multiplexed Redis connections shared by all requests (per master with a cluster).
    #[arg(long, env = "TOLLGATE_REDIS_CONNECTIONS", default_value_t = 2)]
    pub redis_connections: usize,
    /// Commands in flight per Redis connection; past it a charge fails at once to the
    /// failure policy instead of queueing behind a stalled Redis.
    #[arg(long, env = "TOLLGATE_REDIS_MAX_INFLIGHT", default_value_t = crate::store::redis::DEFAULT_MAX_INFLIGHT as u32,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub redis_max_inflight: u32,
    /// A Redis connection with commands outstanding and no reply for this long (ms) is
    /// replaced (default: 3 × --store-timeout-ms, at least 100).
    #[arg(long, env = "TOLLGATE_REDIS_REPLY_TIMEOUT_MS", value_parser = clap::value_parser!(u64).range(1..))]
    pub redis_reply_timeout_ms: Option<u64>,
    /// Do not coalesce: every charge sends its own script call, even while a call for the
    /// same bucket is in flight (see docs/scaling.md, "Coalescing").
    #[arg(long, env = "TOLLGATE_NO_COALESCE")]
    pub no_coalesce: bool,
    /// Do not batch: every request sends its own script calls (one per group of its
    /// charges), even while calls from this instance are in flight (see docs/scaling.md, "Batching").
    #[arg(long, env = "TOLLGATE_NO_BATCH")]
    pub no_batch: bool,
    /// Fixed and sliding windows on Redis: `lua` (a script call), `plain` (plain commands
    /// counting in a key per window, near envoyproxy/ratelimit's INCRBY + EXPIRE; a denial
    /// gives its count back after the answer) or `read` (`lua`, counting plain consumes:
    /// every instance runs `read` before any runs `plain`; see docs/migration.md).
    #[arg(long, env = "TOLLGATE_REDIS_WINDOWS", default_value = "lua", value_parser = ["lua", "read", "plain"])]
    pub redis_windows: String,
    /// Tokio worker threads serving gRPC, admin and store I/O (default: one per core).
    #[arg(long, env = "TOLLGATE_WORKER_THREADS", value_parser = clap::value_parser!(u16).range(1..))]
    pub worker_threads: Option<u16>,
    /// Longest a request waits for the store, in ms (Envoy's filter gives up after 20 ms);
    /// at least 1.
    #[arg(long, env = "TOLLGATE_STORE_TIMEOUT_MS", default_value_t = 10,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub store_timeout_ms: u64,
    /// Lease hot buckets of every rule, not only of rules with `lease: true` (Redis store):
    /// a key above two hits per lease time takes a block of tokens in one charge and spends
    /// it locally (see docs/policies.md, "Leases").
    #[arg(long, env = "TOLLGATE_LEASE_HOT_KEYS")]
    pub lease_hot_keys: bool,
    /// How long a leased block may be spent after it was taken (ms); unused tokens are then
    /// given back. Bounds what leases add: `burst + (t + lease time) × rate`.
    #[arg(long, env = "TOLLGATE_LEASE_TIME_MS", default_value_t = 100,
          value_parser = clap::value_parser!(u64).range(1..=60_000))]
    pub lease_time_ms: u64,
    /// `consistency: approximate` domains: how often each instance syncs its local
    /// estimates with Redis, in ms (buckets near their limit: every half of it). The
    /// over-admission bound grows with it (see docs/scaling.md, "Approximate mode").
    #[arg(long, env = "TOLLGATE_SYNC_INTERVAL_MS", default_value_t = 250,
          value_parser = clap::value_parser!(u64).range(10..=60_000))]
    pub sync_interval_ms: u64,
    /// `consistency: approximate` domains: once syncs have failed for this long (ms), a
    /// bucket not synced within it is answered by the domain's `failure_mode`; until then
    /// decisions go on from the local estimates. At least --sync-interval-ms.
    #[arg(long, env = "TOLLGATE_SYNC_STALENESS_MS", default_value_t = 10_000,
          value_parser = clap::value_parser!(u64).range(1..=3_600_000))]
    pub sync_staleness_ms: u64,
    /// Cap on buckets kept by the memory store.
    #[arg(long, env = "TOLLGATE_MEMORY_MAX_KEYS", default_value_t = 1_000_000)]
    pub memory_max_keys: usize,
    /// gRPC listen address.
    #[arg(long, env = "TOLLGATE_GRPC_ADDR", default_value = "127.0.0.1:8081")]
    pub grpc_addr: SocketAddr,
    /// Admin HTTP listen address (health, readiness).
    #[arg(long, env = "TOLLGATE_ADMIN_ADDR", default_value = "127.0.0.1:9102")]
    pub admin_addr: SocketAddr,
    /// Also answer envoyproxy/ratelimit's health probe here: `/healthcheck`, 200 `OK` while
    /// ready, else 500 (peer mode: HOST:PORT, default 0.0.0.0:8080).
    #[arg(long, env = "TOLLGATE_HEALTHCHECK_ADDR")]
    pub healthcheck_addr: Option<SocketAddr>,
    /// Also serve the metrics here, at --metrics-path, alone (peer mode, with
    /// USE_PROMETHEUS: PROMETHEUS_ADDR).
    #[arg(long, env = "TOLLGATE_METRICS_ADDR")]
    pub metrics_addr: Option<SocketAddr>,
    /// The path of the metrics on --metrics-addr (peer mode: PROMETHEUS_PATH).
    #[arg(long, env = "TOLLGATE_METRICS_PATH", default_value = "/metrics", value_parser = parse_metrics_path)]
    pub metrics_path: String,
    /// Read envoyproxy/ratelimit's environment (GRPC_PORT, REDIS_URL, USE_PROMETHEUS, …)
    /// where no flag or TOLLGATE_* variable is given, with its listen addresses (on every
    /// interface) as defaults; on by itself when started as `ratelimit`. See
    /// docs/envoy-gateway.md.
    #[arg(long, env = "TOLLGATE_PEER_ENV")]
    pub peer_env: bool,
    /// Share of a limit consumed above which a decision counts as near_limit.
    #[arg(long, env = "TOLLGATE_NEAR_LIMIT_RATIO", default_value_t = 0.8)]
    pub near_limit_ratio: f64,
    /// Decide and count everything, but answer OK (for rolling out new policies safely).
    #[arg(long, env = "TOLLGATE_SHADOW_MODE")]
    pub shadow_mode: bool,
    /// Add x-ratelimit-limit/remaining/reset (and retry-after when over the limit) to every
    /// response, for setups that do not enable the Envoy filter's own header option.
    #[arg(long, env = "TOLLGATE_RESPONSE_HEADERS")]
    pub response_headers: bool,
    /// Add envoyproxy/ratelimit's RateLimit-Limit/-Remaining/-Reset headers (its
    /// LIMIT_RESPONSE_HEADERS_ENABLED), with the numbers of --response-headers.
    #[arg(long, env = "TOLLGATE_LIMIT_HEADERS")]
    pub limit_headers: bool,
    /// Names of the --limit-headers headers, as `LIMIT,REMAINING,RESET` (the peer's
    /// LIMIT_LIMIT_HEADER, LIMIT_REMAINING_HEADER, LIMIT_RESET_HEADER).
    #[arg(
        long,
        env = "TOLLGATE_LIMIT_HEADER_NAMES",
        requires = "limit_headers",
        value_parser = parse_limit_header_names,
        default_value = "RateLimit-Limit,RateLimit-Remaining,RateLimit-Reset"
    )]
    pub limit_header_names: LimitHeaderNames,
    /// Add the header fields of an HTTP rate-limit standard to every answer with a limit:
    /// `ietf` is RateLimit-Policy and RateLimit of draft-ietf-httpapi-ratelimit-headers-09
    /// (names from the limits' `name`s, else the rules'), alone or beside the other sets.
    #[arg(long, env = "TOLLGATE_RATELIMIT_HEADERS", value_enum)]
    pub ratelimit_headers: Option<RateLimitHeaders>,
    /// Add up to R × the wait to --response-headers' retry-after, drawn at random per answer
    /// (0 to 10; 0: the exact wait), so that clients denied together do not all come back in
    /// the same second. Never less than the wait.
    #[arg(long, env = "TOLLGATE_RETRY_AFTER_JITTER", default_value_t = 0.0, value_parser = parse_jitter)]
    pub retry_after_jitter: f64,
    /// Answer the request's descriptors and the merged `metadata` of the rules it passed as
    /// the response's dynamic metadata (envoyproxy/ratelimit's RESPONSE_DYNAMIC_METADATA).
    #[arg(long, env = "TOLLGATE_RESPONSE_DYNAMIC_METADATA")]
    pub response_dynamic_metadata: bool,
    /// Requests with more descriptors are answered by the domain's failure policy.
    #[arg(long, env = "TOLLGATE_MAX_DESCRIPTORS", default_value_t = 64)]
    pub max_descriptors: usize,
    /// Descriptors with more entries make the request answered by the failure policy.
    #[arg(long, env = "TOLLGATE_MAX_ENTRIES", default_value_t = 32)]
    pub max_entries: usize,
    /// Keys or values longer than this (bytes) make the request answered by the failure policy.
    #[arg(long, env = "TOLLGATE_MAX_VALUE_BYTES", default_value_t = 4096)]
    pub max_value_bytes: usize,
    /// Longest part (key, value or pattern), in bytes, of a `rule` metric label that carries
    /// request values (`detailed_metric`, `value_to_metric`); longer parts are cut, ending in `…`.
    #[arg(
        long,
        env = "TOLLGATE_MAX_LABEL_VALUE_BYTES",
        default_value_t = crate::telemetry::metrics::label::DEFAULT_MAX_LABEL_VALUE_BYTES as u64,
        value_parser = clap::value_parser!(u64).range(crate::telemetry::metrics::label::MIN_LABEL_VALUE_BYTES as u64..)
    )]
    pub max_label_value_bytes: u64,
    /// Distinct value label sets per domain for rules that carry request values in their
    /// `rule` label (each ≤ 9 series); past it they count under `rule="<rule>:_other_"`.
    #[arg(long, env = "TOLLGATE_MAX_DETAILED_SERIES", default_value_t = crate::telemetry::metrics::DEFAULT_MAX_DETAILED_SERIES)]
    pub max_detailed_series: usize,
    /// Seconds to keep serving after SIGTERM while not ready (endpoints being withdrawn).
    #[arg(long, env = "TOLLGATE_DRAIN_SECONDS", default_value_t = 5)]
    pub drain_seconds: u64,
    /// Ask gRPC clients to reconnect after this long (e.g. 1h, 30m, 90s; 0 = never), with
    /// ±10 % jitter, so Envoy's long-lived connections spread onto new replicas.
    #[arg(long, env = "TOLLGATE_GRPC_MAX_CONNECTION_AGE", default_value = "1h", value_parser = parse_duration)]
    pub grpc_max_connection_age: Duration,
    /// PEM certificate for gRPC TLS (with --grpc-tls-key).
    #[arg(long, env = "TOLLGATE_GRPC_TLS_CERT", requires = "grpc_tls_key")]
    pub grpc_tls_cert: Option<PathBuf>,
    /// PEM private key for gRPC TLS.
    #[arg(long, env = "TOLLGATE_GRPC_TLS_KEY", requires = "grpc_tls_cert")]
    pub grpc_tls_key: Option<PathBuf>,
    /// PEM CA bundle: require and verify client certificates (mTLS).
    #[arg(long, env = "TOLLGATE_GRPC_CLIENT_CA", requires = "grpc_tls_cert")]
    pub grpc_client_ca: Option<PathBuf>,
    /// File holding a bearer token: with it, every POST admin endpoint (/reload, /v1/reset,
    /// /v1/override), DELETE /v1/override, GET /v1/usage, GET /v1/override and GET
    /// /v1/hotkeys require `Authorization: Bearer <token>`, and the
    /// status page (/, /v1/status) lists hot keys only with it; other read endpoints never do.
    #[arg(long, env = "TOLLGATE_ADMIN_TOKEN_FILE")]
    pub admin_token_file: Option<PathBuf>,
    /// Allow `POST /v1/reset` and `POST`/`DELETE /v1/override` without --admin-token-file
    /// (refused by default: anyone who reaches the admin port could hand quota back or
    /// switch limiting off). Only on a trusted network.
    #[arg(long, env = "TOLLGATE_ADMIN_ALLOW_UNAUTHENTICATED_RESET")]
    pub admin_allow_unauthenticated_reset: bool,
    /// File holding a secret (at least 32 bytes, e.g. `openssl rand -hex 32`): request
    /// values enter bucket keys, Redis, metrics, the hot-key view and spans as keyed hashes
    /// (HMAC-SHA256), never in the clear. Turning it on or changing the secret starts every
    /// bucket afresh. Never logged or shown.
    #[arg(long, env = "TOLLGATE_KEY_SECRET_FILE")]
    pub key_secret_file: Option<PathBuf>,
    /// Do not watch the config for changes (SIGHUP and POST /reload still reload).
    #[arg(long, env = "TOLLGATE_NO_WATCH")]
    pub no_watch: bool,
}

impl Serve {
    fn redis_topology(&self) -> RedisTopology {
        let nodes: Vec<String> =
            self.redis_cluster_nodes.iter().map(|n| n.trim().to_string()).filter(|n| !n.is_empty()).collect();
        match &self.redis_sentinel {
            _ if !nodes.is_empty() => RedisTopology::Cluster { nodes },
            Some(s) => RedisTopology::Sentinel { master: s.master.clone(), sentinels: s.sentinels.clone() },
            None => RedisTopology::Single,
        }
    }

    /// The settings the app runs with, the peer's config source variables read from the
    /// environment (`cli::xds`). An explicit `--config` together with xDS is refused.
    pub fn settings(&self) -> Result<ServeSettings, String> {
        self.settings_from(&|name| std::env::var(name).ok())
    }

    /// [`Serve::settings`] with the peer's variables read through `env` (tests).
    pub fn settings_from(&self, env: &dyn Fn(&str) -> Option<String>) -> Result<ServeSettings, String> {
        let chosen = self.source.choose(env)?;
        if chosen.xds.is_some() && self.config.is_some() {
            return Err("--config (TOLLGATE_CONFIG) names policy files, but the config source is xDS \
                        (--config-source xds or CONFIG_TYPE=GRPC_XDS_SOTW): choose one"
                .into());
        }
        let mut settings = self.files_settings();
        settings.xds = chosen.xds;
        settings.ready_needs_domain = chosen.ready_needs_domain;
        settings.tracing = self.trace.choose(env)?;
        let client = super::redis_tls::client_cert(
            self.redis_client_cert_file.as_ref(),
            self.redis_client_key_file.as_ref(),
            self.store,
            &self.redis_url,
            &settings.redis_topology,
        )?;
        settings.redis.tls = crate::store::redis::Tls::new(self.redis_ca_file.clone(), client);
        Ok(settings)
    }

    fn files_settings(&self) -> ServeSettings {
        ServeSettings {
            config: self.config.clone().unwrap_or_else(|| PathBuf::from("config")),
            xds: None,
            ready_needs_domain: false,
            tracing: None,
            config_options: self.load.options(),
            store: self.store,
            redis: RedisSettings {
                url: self.redis_url.clone(),
                connections: self.redis_connections,
                tls: crate::store::redis::Tls::new(self.redis_ca_file.clone(), None),
                breaker: BreakerSettings {
                    failures: self.breaker_failures,
                    failure_rate: self.breaker_failure_rate,
                    window: Duration::from_millis(self.breaker_window_ms),
                    cooldown: Duration::from_millis(self.breaker_cooldown_ms),
                },
                reply_timeout: self.redis_reply_timeout_ms.map(Duration::from_millis),
                max_inflight: self.redis_max_inflight as usize,
                coalesce: !self.no_coalesce,
                batch: !self.no_batch,
                windows: self.redis_windows.parse().unwrap_or_default(),
            },
            redis_topology: self.redis_topology(),
            redis_key_prefix: self.redis_key_prefix.clone(),
            store_timeout: Duration::from_millis(self.store_timeout_ms),
            lease_hot_keys: self.lease_hot_keys,
            lease_time: Duration::from_millis(self.lease_time_ms),
            sync_interval: Duration::from_millis(self.sync_interval_ms),
            sync_staleness: Duration::from_millis(self.sync_staleness_ms),
            memory_max_keys: self.memory_max_keys,
            grpc_addr: self.grpc_addr,
            admin_addr: self.admin_addr,
            healthcheck_addr: self.healthcheck_addr,
            metrics_listener: self
                .metrics_addr
                .map(|addr| MetricsListener { addr, path: self.metrics_path.clone() }),
            near_limit_ratio: self.near_limit_ratio,
            shadow_mode: self.shadow_mode,
            response_headers: self.response_headers,
            limit_headers: self.limit_headers.then(|| self.limit_header_names.clone()),
            ietf_headers: self.ratelimit_headers == Some(RateLimitHeaders::Ietf),
            retry_after_jitter: self.retry_after_jitter,
            response_dynamic_metadata: self.response_dynamic_metadata,
            bounds: Bounds {
                max_descriptors: self.max_descriptors,
                max_entries: self.max_entries,
                max_value_bytes: self.max_value_bytes,
            },
            metric_series: SeriesLimits {
                max_label_value_bytes: usize::try_from(self.max_label_value_bytes).unwrap_or(usize::MAX),
                max_detailed_series: self.max_detailed_series,
            },
            drain: Duration::from_secs(self.drain_seconds),
            max_connection_age: (!self.grpc_max_connection_age.is_zero())
                .then_some(self.grpc_max_connection_age),
            tls: match (&self.grpc_tls_cert, &self.grpc_tls_key) {
                (Some(cert), Some(key)) => Some(TlsFiles {
                    cert: cert.clone(),
                    key: key.clone(),
                    client_ca: self.grpc_client_ca.clone(),
                }),
                _ => None,
            },
            watch_config: !self.no_watch,
            admin_token_file: self.admin_token_file.clone(),
            admin_allow_unauthenticated_reset: self.admin_allow_unauthenticated_reset,
            key_secret_file: self.key_secret_file.clone(),
        }
    }
}

/// `--ratelimit-headers`: which standard's header fields to add.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RateLimitHeaders {
    /// `RateLimit-Policy` and `RateLimit` (draft-ietf-httpapi-ratelimit-headers-09).
    Ietf,
}

/// `--retry-after-jitter`: a share of the wait, from 0 to 10.
fn parse_jitter(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(r) if (0.0..=10.0).contains(&r) => Ok(r),
        Ok(r) => Err(format!("{r} is outside 0 to 10 (a share of the wait: 0.5 adds up to half of it)")),
        Err(_) => Err(format!("{s:?} is not a number (a share of the wait, such as 0.5)")),
    }
}
