//! Command-line interface: every flag is also a `TOLLGATE_*` environment variable.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::app::{ServeSettings, StoreKind, TlsFiles};
use crate::store::RedisSettings;

#[derive(Debug, Parser)]
#[command(name = "tollgate", version, about = "Rate-limit service for Envoy")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// Log format.
    #[arg(long, global = true, env = "TOLLGATE_LOG_FORMAT", value_enum, default_value = "text")]
    pub log_format: LogFormat,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the Envoy rate-limit API.
    Serve(Box<Serve>),
    /// Validate a config file or directory; exit non-zero with every error.
    Check {
        /// A policy file or a directory of *.yaml / *.yml files.
        path: PathBuf,
    },
}

#[derive(Debug, Args)]
pub struct Serve {
    /// A policy file or a directory of *.yaml / *.yml files (one domain each).
    #[arg(long, env = "TOLLGATE_CONFIG", default_value = "config")]
    pub config: PathBuf,
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
    /// Prefix for every Redis key (for a Redis shared with other applications).
    #[arg(long, env = "TOLLGATE_REDIS_KEY_PREFIX", default_value = "")]
    pub redis_key_prefix: String,
    /// Multiplexed Redis connections shared by all requests.
    #[arg(long, env = "TOLLGATE_REDIS_CONNECTIONS", default_value_t = 2)]
    pub redis_connections: usize,
    /// Longest a request waits for the store, in ms (Envoy's filter gives up after 20 ms).
    #[arg(long, env = "TOLLGATE_STORE_TIMEOUT_MS", default_value_t = 10)]
    pub store_timeout_ms: u64,
    /// Cap on buckets kept by the memory store.
    #[arg(long, env = "TOLLGATE_MEMORY_MAX_KEYS", default_value_t = 1_000_000)]
    pub memory_max_keys: usize,
    /// gRPC listen address.
    #[arg(long, env = "TOLLGATE_GRPC_ADDR", default_value = "127.0.0.1:8081")]
    pub grpc_addr: SocketAddr,
    /// Admin HTTP listen address (health, readiness).
    #[arg(long, env = "TOLLGATE_ADMIN_ADDR", default_value = "127.0.0.1:9102")]
    pub admin_addr: SocketAddr,
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
    /// Do not watch the config for changes (SIGHUP and POST /reload still reload).
    #[arg(long, env = "TOLLGATE_NO_WATCH")]
    pub no_watch: bool,
}

/// `90s`, `30m`, `1h`, `500ms` or plain seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (digits, unit) = s.split_at(split);
    let n: u64 = digits.parse().map_err(|_| format!("invalid duration {s:?} (e.g. 90s, 30m, 1h)"))?;
    let secs = match unit {
        "" | "s" => n,
        "m" => n.saturating_mul(60),
        "h" => n.saturating_mul(3600),
        "ms" => return Ok(Duration::from_millis(n)),
        _ => return Err(format!("invalid duration unit in {s:?} (use ms, s, m or h)")),
    };
    Ok(Duration::from_secs(secs))
}

impl Serve {
    /// The settings the app runs with.
    pub fn settings(&self) -> ServeSettings {
        ServeSettings {
            config: self.config.clone(),
            store: self.store,
            redis: RedisSettings { url: self.redis_url.clone(), connections: self.redis_connections },
            redis_key_prefix: self.redis_key_prefix.clone(),
            store_timeout: Duration::from_millis(self.store_timeout_ms),
            memory_max_keys: self.memory_max_keys,
            grpc_addr: self.grpc_addr,
            admin_addr: self.admin_addr,
            near_limit_ratio: self.near_limit_ratio,
            shadow_mode: self.shadow_mode,
            response_headers: self.response_headers,
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
        }
    }
}
