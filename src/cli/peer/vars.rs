//! Every envoyproxy/ratelimit variable Tollgate knows (its `settings.go`, plus what Envoy
//! Gateway sets) and what becomes of it in peer mode. The README's table says the same.

/// What Tollgate does with one of the peer's variables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    /// Read in peer mode: it sets a Tollgate setting (`super::apply`).
    Applied,
    /// Read by the config source (`cli::xds`) whenever Tollgate runs, not by peer mode.
    Xds,
    /// Not used; when set, logged once at start-up with this reason.
    Ignored(&'static str),
    /// Not used; logged only when set to true (false asks for nothing Tollgate lacks).
    IgnoredWhenTrue(&'static str),
}

const NO_STATSD: &str = "no statsd sink: metrics are Prometheus (tollgate_*), on the admin /metrics and, with USE_PROMETHEUS, on PROMETHEUS_ADDR";
const PIPELINING: &str = "requests pipeline on --redis-connections multiplexed connections (no pool)";
const PER_SECOND: &str = "per-second limits live in the same store as the others";
const NO_MEMCACHE: &str = "no memcache backend (BACKEND_TYPE=memcache is refused)";
const NO_TRACES: &str = "no trace export";

/// The peer's variables by name. `TRACING_*` and `OTEL_*` not listed here are
/// `Ignored(NO_TRACES)` too (`fate`).
pub const VARIABLES: &[(&str, Fate)] = &[
    ("HOST", Fate::Applied),
    ("PORT", Fate::Applied),
    ("DEBUG_HOST", Fate::Applied),
    ("DEBUG_PORT", Fate::Applied),
    ("GRPC_HOST", Fate::Applied),
    ("GRPC_PORT", Fate::Applied),
    ("GRPC_UDS", Fate::Applied),
    ("GRPC_MAX_CONNECTION_AGE", Fate::Applied),
    ("GRPC_MAX_CONNECTION_AGE_GRACE", Fate::Ignored("in-flight requests finish within --drain-seconds")),
    ("GRPC_SERVER_USE_TLS", Fate::Applied),
    ("GRPC_SERVER_TLS_CERT", Fate::Applied),
    ("GRPC_SERVER_TLS_KEY", Fate::Applied),
    ("GRPC_SERVER_TLS_CA_CERT", Fate::Ignored("as the peer, which has no such variable (its client CA is GRPC_CLIENT_TLS_CACERT): clients are not asked for a certificate")),
    ("GRPC_CLIENT_TLS_CACERT", Fate::Applied),
    ("GRPC_CLIENT_TLS_SAN", Fate::Applied),
    ("LOG_LEVEL", Fate::Applied),
    ("LOG_FORMAT", Fate::Applied),
    ("CONFIG_TYPE", Fate::Xds),
    ("FORCE_START_WITHOUT_INITIAL_CONFIG", Fate::Xds),
    ("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", Fate::Xds),
    ("CONFIG_GRPC_XDS_NODE_ID", Fate::Xds),
    ("CONFIG_GRPC_XDS_NODE_METADATA", Fate::Xds),
    ("CONFIG_GRPC_XDS_SERVER_URL", Fate::Xds),
    ("CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", Fate::Xds),
    ("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", Fate::Xds),
    ("CONFIG_GRPC_XDS_SERVER_USE_TLS", Fate::Xds),
    ("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", Fate::Xds),
    ("CONFIG_GRPC_XDS_CLIENT_TLS_KEY", Fate::Xds),
    ("CONFIG_GRPC_XDS_SERVER_TLS_CACERT", Fate::Xds),
    ("CONFIG_GRPC_XDS_SERVER_TLS_SAN", Fate::Xds),
    ("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", Fate::Xds),
    ("XDS_CLIENT_BACKOFF_MAX_INTERVAL", Fate::Xds),
    ("XDS_CLIENT_BACKOFF_RANDOM_FACTOR", Fate::Xds),
    ("XDS_CLIENT_BACKOFF_JITTER", Fate::Xds),
    ("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", Fate::Xds),
    ("USE_STATSD", Fate::IgnoredWhenTrue(NO_STATSD)),
    ("USE_DOG_STATSD", Fate::IgnoredWhenTrue(NO_STATSD)),
    ("USE_DOG_STATSD_MOGRIFIERS", Fate::Ignored(NO_STATSD)),
    ("STATSD_HOST", Fate::Ignored(NO_STATSD)),
    ("STATSD_PORT", Fate::Ignored(NO_STATSD)),
    ("EXTRA_TAGS", Fate::Ignored(NO_STATSD)),
    ("STATS_FLUSH_INTERVAL", Fate::Ignored("metrics are read when scraped")),
    ("DISABLE_STATS", Fate::IgnoredWhenTrue("metrics are always counted; scraping them is optional")),
    ("USE_PROMETHEUS", Fate::Applied),
    ("PROMETHEUS_ADDR", Fate::Applied),
    ("PROMETHEUS_PATH", Fate::Applied),
    ("PROMETHEUS_MAPPER_YAML", Fate::Ignored("metric names are Tollgate's own (tollgate_*), not statsd names mapped")),
    ("PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS", Fate::IgnoredWhenTrue("tollgate_request_duration_seconds is in seconds")),
    ("RUNTIME_ROOT", Fate::Applied),
    ("RUNTIME_SUBDIRECTORY", Fate::Applied),
    ("RUNTIME_APPDIRECTORY", Fate::Applied),
    ("RUNTIME_IGNOREDOTFILES", Fate::Ignored("dotfiles are always ignored")),
    ("RUNTIME_WATCH_ROOT", Fate::Ignored("the config directory is watched either way (ConfigMap swaps included); --no-watch turns it off")),
    ("EXPIRATION_JITTER_MAX_SECONDS", Fate::Ignored("a key expires when its bucket is full again")),
    ("LOCAL_CACHE_SIZE_IN_BYTES", Fate::Ignored("the over-limit cache is always on, bounded by entries")),
    ("NEAR_LIMIT_RATIO", Fate::Applied),
    ("CACHE_KEY_PREFIX", Fate::Applied),
    ("BACKEND_TYPE", Fate::Applied),
    ("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", Fate::Applied),
    ("LIMIT_RESPONSE_HEADERS_ENABLED", Fate::Applied),
    ("LIMIT_LIMIT_HEADER", Fate::Applied),
    ("LIMIT_REMAINING_HEADER", Fate::Applied),
    ("LIMIT_RESET_HEADER", Fate::Applied),
    ("REDIS_SOCKET_TYPE", Fate::Applied),
    ("REDIS_TYPE", Fate::Applied),
    ("REDIS_URL", Fate::Applied),
    ("REDIS_AUTH", Fate::Applied),
    ("REDIS_TLS", Fate::Applied),
    ("REDIS_TLS_CACERT", Fate::Applied),
    ("REDIS_TLS_CLIENT_CERT", Fate::Applied),
    ("REDIS_TLS_CLIENT_KEY", Fate::Applied),
    ("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", Fate::Applied),
    ("REDIS_SENTINEL_AUTH", Fate::Applied),
    ("REDIS_POOL_SIZE", Fate::Ignored(PIPELINING)),
    ("REDIS_PIPELINE_WINDOW", Fate::Ignored(PIPELINING)),
    ("REDIS_PIPELINE_LIMIT", Fate::Ignored(PIPELINING)),
    ("REDIS_CLUSTER_PIPELINE_PARALLELISM", Fate::Ignored(PIPELINING)),
    ("REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", Fate::Ignored("Redis health is in metrics and /rlconfig; readiness does not follow it")),
    ("REDIS_TIMEOUT", Fate::Ignored("--store-timeout-ms bounds each request's wait for the store")),
    ("REDIS_POOL_ON_EMPTY_BEHAVIOR", Fate::Ignored(PIPELINING)),
    ("REDIS_STARTUP_INITIAL_INTERVAL", Fate::Ignored("Tollgate serves with Redis down and connects when it comes")),
    ("REDIS_STARTUP_MAX_INTERVAL", Fate::Ignored("Tollgate serves with Redis down and connects when it comes")),
    ("REDIS_STARTUP_MAX_ELAPSED_TIME", Fate::Ignored("Tollgate serves with Redis down and connects when it comes")),
    ("REDIS_PERSECOND", Fate::IgnoredWhenTrue(PER_SECOND)),
    ("REDIS_PERSECOND_SOCKET_TYPE", Fate::Ignored(PER_SECOND)),
    ("REDIS_PERSECOND_TYPE", Fate::Ignored(PER_SECOND)),
    ("REDIS_PERSECOND_URL", Fate::Ignored(PER_SECOND)),
    ("REDIS_PERSECOND_POOL_SIZE", Fate::Ignored(PER_SECOND)),
    ("REDIS_PERSECOND_AUTH", Fate::Ignored(PER_SECOND)),
    ("REDIS_PERSECOND_TLS", Fate::Ignored(PER_SECOND)),
    ("REDIS_PERSECOND_SENTINEL_AUTH", Fate::Ignored(PER_SECOND)),
    ("REDIS_PERSECOND_PIPELINE_WINDOW", Fate::Ignored(PER_SECOND)),
    ("REDIS_PERSECOND_PIPELINE_LIMIT", Fate::Ignored(PER_SECOND)),
    ("REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM", Fate::Ignored(PER_SECOND)),
    ("REDIS_PERSECOND_TIMEOUT", Fate::Ignored(PER_SECOND)),
    ("REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR", Fate::Ignored(PER_SECOND)),
    ("MEMCACHE_HOST_PORT", Fate::Ignored(NO_MEMCACHE)),
    ("MEMCACHE_MAX_IDLE_CONNS", Fate::Ignored(NO_MEMCACHE)),
    ("MEMCACHE_SRV", Fate::Ignored(NO_MEMCACHE)),
    ("MEMCACHE_SRV_REFRESH", Fate::Ignored(NO_MEMCACHE)),
    ("MEMCACHE_TLS", Fate::Ignored(NO_MEMCACHE)),
    ("MEMCACHE_TLS_CLIENT_CERT", Fate::Ignored(NO_MEMCACHE)),
    ("MEMCACHE_TLS_CLIENT_KEY", Fate::Ignored(NO_MEMCACHE)),
    ("MEMCACHE_TLS_CACERT", Fate::Ignored(NO_MEMCACHE)),
    ("MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION", Fate::Ignored(NO_MEMCACHE)),
    ("SHADOW_MODE", Fate::Applied),
    ("QUOTA_MODE", Fate::Ignored("each rule's quota_mode applies as its config says")),
    ("RESPONSE_DYNAMIC_METADATA", Fate::Applied),
    ("MERGE_DOMAIN_CONFIG", Fate::Applied),
];

/// What becomes of the variable `name`, if it is the peer's.
pub fn fate(name: &str) -> Option<Fate> {
    match VARIABLES.iter().find(|(known, _)| *known == name) {
        Some((_, fate)) => Some(*fate),
        None if name.starts_with("TRACING_") || name.starts_with("OTEL_") => Some(Fate::Ignored(NO_TRACES)),
        None => None,
    }
}
