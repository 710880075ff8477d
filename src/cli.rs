//! Command-line interface: every flag is also a `TOLLGATE_*` environment variable.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

pub use crate::admin::client::AdminCall;
use crate::algorithm::Algorithm;
use crate::app::{RedisTopology, ServeSettings, StoreKind, TlsFiles};
use crate::config::LoadOptions;
use crate::metrics::SeriesLimits;
use crate::service::bounds::Bounds;
use crate::service::respond::LimitHeaderNames;
use crate::store::breaker::BreakerSettings;
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
    /// Validate a config file or directory; exit non-zero with every error. With
    /// `--against OLD`, also list the buckets that replacing OLD with it starts afresh.
    Check {
        /// A policy file or a directory of *.yaml / *.yml files.
        path: PathBuf,
        /// The config PATH would replace (e.g. the one serving now): list every rule whose
        /// bucket keys change, as a reload would warn. Loaded with the same flags.
        #[arg(long, value_name = "OLD")]
        against: Option<PathBuf>,
        #[command(flatten)]
        load: LoadFlags,
    },
    /// Show which rule each descriptor matches and why (the path walked, the limit, the key).
    Explain(Explain),
    /// Ask a running server how much of a descriptor's quota is left (GET /v1/usage).
    Usage(AdminCall),
    /// Reset a descriptor's buckets to full on a running server (POST /v1/reset).
    Reset(AdminCall),
}

/// `tollgate explain PATH --domain D --descriptor k=v[,k=v…]...`
#[derive(Debug, Args)]
pub struct Explain {
    /// A policy file or a directory of *.yaml / *.yml files.
    pub path: PathBuf,
    /// The request's domain.
    #[arg(long)]
    pub domain: String,
    /// One descriptor as `key=value,key=value` (entries in order; `\,` for a comma in a
    /// value). Repeat for the descriptors of one request.
    #[arg(long = "descriptor", required = true)]
    pub descriptors: Vec<crate::explain::DescriptorArg>,
    #[command(flatten)]
    pub load: LoadFlags,
}

/// How the config's files load: the same flags for `serve`, `check` and `explain`, so that
/// `check` accepts exactly what `serve` serves.
#[derive(Debug, Clone, Args)]
pub struct LoadFlags {
    /// Merge the files that name the same domain (envoyproxy/ratelimit's
    /// MERGE_DOMAIN_CONFIG=true) instead of refusing them.
    #[arg(long, env = "TOLLGATE_MERGE_DOMAINS")]
    pub merge_domains: bool,
    /// Algorithm of every limit that names none, and of a request's own `limit` override
    /// (a `burst` still means gcra). Part of every bucket's identity: changing it starts
    /// those buckets afresh.
    #[arg(long, env = "TOLLGATE_DEFAULT_ALGORITHM", value_enum, default_value = "gcra")]
    pub default_algorithm: DefaultAlgorithm,
    /// Charge `all_or_nothing` in every domain that sets no `charge`: a request with any
    /// descriptor denied charges none (envoyproxy/ratelimit's
    /// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT). A domain's own `charge` wins.
    #[arg(long, env = "TOLLGATE_STOP_CHARGING_WHEN_OVER_LIMIT")]
    pub stop_charging_when_over_limit: bool,
}

/// `--default-algorithm`'s values: the names of the YAML `algorithm` field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
#[value(rename_all = "snake_case")]
pub enum DefaultAlgorithm {
    Gcra,
    FixedWindow,
    SlidingWindow,
}

impl LoadFlags {
    /// The options the config loads with.
    pub fn options(&self) -> LoadOptions {
        LoadOptions {
            merge_domains: self.merge_domains,
            default_algorithm: match self.default_algorithm {
                DefaultAlgorithm::Gcra => Algorithm::Gcra,
                DefaultAlgorithm::FixedWindow => Algorithm::FixedWindow,
                DefaultAlgorithm::SlidingWindow => Algorithm::SlidingWindow,
            },
            stop_charging_when_over_limit: self.stop_charging_when_over_limit,
        }
    }
}

#[derive(Debug, Args)]
pub struct Serve {
    /// A policy file or a directory of *.yaml / *.yml files (one domain each, unless
    /// --merge-domains).
    #[arg(long, env = "TOLLGATE_CONFIG", default_value = "config")]
    pub config: PathBuf,
    #[command(flatten)]
    pub load: LoadFlags,
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
    /// same bucket is in flight (see README, "Coalescing").
    #[arg(long, env = "TOLLGATE_NO_COALESCE")]
    pub no_coalesce: bool,
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
    /// it locally (see the README, "Leases").
    #[arg(long, env = "TOLLGATE_LEASE_HOT_KEYS")]
    pub lease_hot_keys: bool,
    /// How long a leased block may be spent after it was taken (ms); unused tokens are then
    /// given back. Bounds what leases add: `burst + (t + lease time) × rate`.
    #[arg(long, env = "TOLLGATE_LEASE_TIME_MS", default_value_t = 100,
          value_parser = clap::value_parser!(u64).range(1..=60_000))]
    pub lease_time_ms: u64,
    /// `consistency: approximate` domains: how often each instance syncs its local
    /// estimates with Redis, in ms (buckets near their limit: every half of it). The
    /// over-admission bound grows with it (see the README, "Approximate mode").
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
        default_value_t = crate::metrics::label::DEFAULT_MAX_LABEL_VALUE_BYTES as u64,
        value_parser = clap::value_parser!(u64).range(crate::metrics::label::MIN_LABEL_VALUE_BYTES as u64..)
    )]
    pub max_label_value_bytes: u64,
    /// Distinct value label sets per domain for rules that carry request values in their
    /// `rule` label (each ≤ 8 series); past it they count under `rule="<rule>:_other_"`.
    #[arg(long, env = "TOLLGATE_MAX_DETAILED_SERIES", default_value_t = crate::metrics::DEFAULT_MAX_DETAILED_SERIES)]
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
    /// File holding a bearer token: with it, every POST admin endpoint (/reload, /v1/reset),
    /// GET /v1/usage and GET /v1/hotkeys require `Authorization: Bearer <token>`, and the
    /// status page (/, /v1/status) lists hot keys only with it; other read endpoints never do.
    #[arg(long, env = "TOLLGATE_ADMIN_TOKEN_FILE")]
    pub admin_token_file: Option<PathBuf>,
    /// Allow `POST /v1/reset` without --admin-token-file (refused by default: anyone who
    /// reaches the admin port could hand quota back). Only on a trusted network.
    #[arg(long, env = "TOLLGATE_ADMIN_ALLOW_UNAUTHENTICATED_RESET")]
    pub admin_allow_unauthenticated_reset: bool,
    /// Do not watch the config for changes (SIGHUP and POST /reload still reload).
    #[arg(long, env = "TOLLGATE_NO_WATCH")]
    pub no_watch: bool,
}

/// `--redis-sentinel`: the master's name and the sentinels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SentinelArg {
    pub master: String,
    pub sentinels: Vec<String>,
}

/// `master_name,host:port[,host:port…]`.
pub fn parse_sentinel(s: &str) -> Result<SentinelArg, String> {
    let mut parts = s.split(',').map(str::trim).filter(|p| !p.is_empty());
    let master = parts.next().unwrap_or_default().to_string();
    let sentinels: Vec<String> = parts.map(str::to_string).collect();
    if master.is_empty() || master.contains(':') || sentinels.is_empty() {
        return Err("expected master_name,host:port[,host:port...]".into());
    }
    Ok(SentinelArg { master, sentinels })
}

/// `LIMIT,REMAINING,RESET`: three distinct HTTP header names.
pub fn parse_limit_header_names(s: &str) -> Result<LimitHeaderNames, String> {
    let names: Vec<&str> = s.split(',').map(str::trim).collect();
    let [limit, remaining, reset] = names[..] else {
        return Err(format!("expected three header names LIMIT,REMAINING,RESET, got {s:?}"));
    };
    // RFC 9110 `token`: what a field name may hold.
    let token = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
    if let Some(bad) = names.iter().find(|n| n.is_empty() || !n.chars().all(token)) {
        return Err(format!("{bad:?} is not an HTTP header name"));
    }
    let lower: Vec<String> = names.iter().map(|n| n.to_ascii_lowercase()).collect();
    if lower[0] == lower[1] || lower[0] == lower[2] || lower[1] == lower[2] {
        return Err(format!("the three header names must differ, got {s:?}"));
    }
    Ok(LimitHeaderNames { limit: limit.into(), remaining: remaining.into(), reset: reset.into() })
}

/// A share from 0 to 1 (e.g. `0.5`).
pub fn parse_share(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(share) if (0.0..=1.0).contains(&share) => Ok(share),
        _ => Err(format!("expected a share from 0 to 1 (e.g. 0.5), got {s:?}")),
    }
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
    fn redis_topology(&self) -> RedisTopology {
        let nodes: Vec<String> =
            self.redis_cluster_nodes.iter().map(|n| n.trim().to_string()).filter(|n| !n.is_empty()).collect();
        match &self.redis_sentinel {
            _ if !nodes.is_empty() => RedisTopology::Cluster { nodes },
            Some(s) => RedisTopology::Sentinel { master: s.master.clone(), sentinels: s.sentinels.clone() },
            None => RedisTopology::Single,
        }
    }

    /// The settings the app runs with.
    pub fn settings(&self) -> ServeSettings {
        ServeSettings {
            config: self.config.clone(),
            config_options: self.load.options(),
            store: self.store,
            redis: RedisSettings {
                url: self.redis_url.clone(),
                connections: self.redis_connections,
                ca_file: self.redis_ca_file.clone(),
                breaker: BreakerSettings {
                    failures: self.breaker_failures,
                    failure_rate: self.breaker_failure_rate,
                    window: Duration::from_millis(self.breaker_window_ms),
                    cooldown: Duration::from_millis(self.breaker_cooldown_ms),
                },
                reply_timeout: self.redis_reply_timeout_ms.map(Duration::from_millis),
                max_inflight: self.redis_max_inflight as usize,
                coalesce: !self.no_coalesce,
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
            near_limit_ratio: self.near_limit_ratio,
            shadow_mode: self.shadow_mode,
            response_headers: self.response_headers,
            limit_headers: self.limit_headers.then(|| self.limit_header_names.clone()),
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
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn breaker(args: &[&str]) -> Result<BreakerSettings, clap::Error> {
        let cli = Cli::try_parse_from(["tollgate", "serve"].iter().chain(args))?;
        match cli.command {
            Command::Serve(serve) => Ok(serve.settings().redis.breaker),
            other => panic!("not serve: {other:?}"),
        }
    }

    #[test]
    fn breaker_flags_default_to_the_breaker_defaults_and_parse() {
        assert_eq!(breaker(&[]).expect("defaults"), BreakerSettings::default());
        let set = breaker(&[
            "--breaker-failures",
            "2",
            "--breaker-failure-rate",
            "0.25",
            "--breaker-window-ms",
            "500",
            "--breaker-cooldown-ms",
            "300",
        ])
        .expect("flags");
        assert_eq!(
            set,
            BreakerSettings {
                failures: 2,
                failure_rate: 0.25,
                window: Duration::from_millis(500),
                cooldown: Duration::from_millis(300),
            }
        );
        assert!(breaker(&["--breaker-failure-rate", "1.5"]).is_err(), "a share is at most 1");
        assert!(breaker(&["--breaker-failure-rate", "-0.1"]).is_err());
        assert!(breaker(&["--breaker-window-ms", "5"]).is_err(), "a window of at least 10 ms");
    }

    fn serve(args: &[&str]) -> Result<ServeSettings, clap::Error> {
        let cli = Cli::try_parse_from(["tollgate", "serve"].iter().chain(args))?;
        match cli.command {
            Command::Serve(serve) => Ok(serve.settings()),
            other => panic!("not serve: {other:?}"),
        }
    }

    #[test]
    fn limit_headers_take_the_peers_names_unless_renamed() {
        let plain = serve(&[]).expect("defaults");
        assert_eq!((plain.limit_headers, plain.response_dynamic_metadata), (None, false));
        let on = serve(&["--limit-headers", "--response-dynamic-metadata"]).expect("flags");
        assert_eq!(on.limit_headers, Some(LimitHeaderNames::default()));
        assert!(on.response_dynamic_metadata);
        let renamed = serve(&["--limit-headers", "--limit-header-names", "A-Limit, A-Remaining,A-Reset"]);
        let want = LimitHeaderNames {
            limit: "A-Limit".into(),
            remaining: "A-Remaining".into(),
            reset: "A-Reset".into(),
        };
        assert_eq!(renamed.expect("names").limit_headers, Some(want));
        assert!(serve(&["--limit-header-names", "a,b,c"]).is_err(), "names without the headers do nothing");
        for bad in ["a,b", "a,b,c,d", "a,,c", "a b,c,d", "a,B,b", "x:y,b,c"] {
            assert!(parse_limit_header_names(bad).is_err(), "{bad}");
        }
    }

    fn series(args: &[&str]) -> Result<SeriesLimits, clap::Error> {
        let cli = Cli::try_parse_from(["tollgate", "serve"].iter().chain(args))?;
        match cli.command {
            Command::Serve(serve) => Ok(serve.settings().metric_series),
            other => panic!("not serve: {other:?}"),
        }
    }

    #[test]
    fn series_flags_default_to_64_bytes_and_1000_sets() {
        assert_eq!(series(&[]).expect("defaults"), SeriesLimits::default());
        assert_eq!(
            SeriesLimits::default(),
            SeriesLimits { max_label_value_bytes: 64, max_detailed_series: 1000 }
        );
        let set = series(&["--max-label-value-bytes", "32", "--max-detailed-series", "0"]).expect("flags");
        assert_eq!(set, SeriesLimits { max_label_value_bytes: 32, max_detailed_series: 0 });
        assert!(series(&["--max-label-value-bytes", "8"]).is_err(), "room for an escape and the mark");
    }
}
