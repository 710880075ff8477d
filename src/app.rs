//! Wiring: builds the store, loads the config, binds the listeners and runs the servers
//! until shutdown. Tests call `spawn` with port-0 addresses and get the bound ones back.

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use rand::Rng;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Certificate, Identity, ServerTlsConfig};
use tonic_health::server::HealthReporter;
use tonic_health::ServingStatus;

use crate::admin::Admin;
use crate::config::LoadOptions;
use crate::live::Live;
use crate::metrics::{Metrics, SeriesLimits};
use crate::service::bounds::Bounds;
use crate::service::respond::LimitHeaderNames;
use crate::service::{RateLimitServer, RateLimiter, Settings};
use crate::store::approx::sync::SyncTarget;
use crate::store::approx::ApproxSettings;
use crate::store::cluster::{ClusterSettings, ClusterStore};
use crate::store::lease::LeaseSettings;
use crate::store::sentinel::{SentinelSettings, SentinelStore};
use crate::store::{Guarded, MemoryStore, RedisSettings, RedisStore, Store};

/// The gRPC service name health checks ask about (the service's own, re-exported here).
pub use crate::service::SERVICE_NAME;

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

/// Everything `serve` needs, from flags or environment.
#[derive(Debug, Clone)]
pub struct ServeSettings {
    pub config: PathBuf,
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
    pub near_limit_ratio: f64,
    pub shadow_mode: bool,
    /// Add x-ratelimit-* / retry-after headers to responses (not with Envoy's own option).
    pub response_headers: bool,
    /// Add the peer's RateLimit-* headers, under these names.
    pub limit_headers: Option<LimitHeaderNames>,
    /// Answer the request and the passed rules' `metadata` as dynamic metadata.
    pub response_dynamic_metadata: bool,
    /// Bounds on request size (past them: the domain's failure policy).
    pub bounds: Bounds,
    /// Bounds on the metric series of rules that carry request values.
    pub metric_series: SeriesLimits,
    /// How long to keep serving after SIGTERM while endpoints are withdrawn.
    pub drain: Duration,
    /// Connections older than this (± 10 % jitter per process) are asked to reconnect.
    pub max_connection_age: Option<Duration>,
    pub tls: Option<TlsFiles>,
    /// Watch the config location and reload on change.
    pub watch_config: bool,
    /// A file holding the bearer token `POST` admin endpoints and `/v1/usage` require
    /// (none: open, and `/v1/reset` refused).
    pub admin_token_file: Option<PathBuf>,
    /// `/v1/reset` without a token (`--admin-allow-unauthenticated-reset`).
    pub admin_allow_unauthenticated_reset: bool,
}

impl ServeSettings {
    /// Defaults for a given config path (loopback, memory store), as the CLI has them.
    pub fn new(config: PathBuf) -> ServeSettings {
        ServeSettings {
            config,
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
            near_limit_ratio: 0.8,
            shadow_mode: false,
            response_headers: false,
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
        }
    }
}

/// A running server: its bound addresses and a way to stop it.
#[derive(Debug)]
pub struct Running {
    pub grpc_addr: SocketAddr,
    pub admin_addr: SocketAddr,
    pub admin: Admin,
    pub live: Arc<Live>,
    pub metrics: Arc<Metrics>,
    health: HealthReporter,
    drain: Duration,
    shutdown: watch::Sender<bool>,
    tasks: Vec<JoinHandle<anyhow::Result<()>>>,
    /// Approximate mode's sync, stopped after the servers (it writes what they admitted
    /// last), and its stop signal.
    sync: Option<(watch::Sender<bool>, JoinHandle<anyhow::Result<()>>)>,
    _watcher: Option<notify::RecommendedWatcher>,
}

impl Running {
    /// Graceful stop: readiness and gRPC health go NOT_SERVING, requests are still served
    /// for the drain period, then the listeners close and in-flight requests finish
    /// (bounded by the drain period again).
    pub async fn stop(self) -> anyhow::Result<()> {
        self.admin.set_ready(false);
        set_health(&self.health, ServingStatus::NotServing).await;
        tracing::info!(drain_seconds = self.drain.as_secs_f64(), "draining: not ready, still serving");
        tokio::time::sleep(self.drain).await;
        let _ = self.shutdown.send(true);
        let finish = async {
            for task in self.tasks {
                task.await.context("server task panicked")??;
            }
            anyhow::Ok(())
        };
        let finished = match tokio::time::timeout(self.drain.max(Duration::from_secs(1)), finish).await {
            Ok(result) => result,
            Err(_) => {
                tracing::warn!("in-flight requests did not finish within the drain period");
                Ok(())
            }
        };
        // Every request is answered: the last increments are written and this instance
        // leaves the heartbeat set (the task bounds that to 1 s).
        if let Some((stop, task)) = self.sync {
            let _ = stop.send(true);
            match tokio::time::timeout(Duration::from_secs(2), task).await {
                Ok(joined) => joined.context("sync task panicked")??,
                Err(_) => tracing::warn!("the approximate sync's last write did not finish"),
            }
        }
        finished
    }
}

/// Loads the config, builds the store, binds both listeners and starts serving.
/// A bad config is an error (the caller exits non-zero with it).
pub async fn spawn(settings: ServeSettings) -> anyhow::Result<Running> {
    // rustls needs one process-wide crypto provider (Redis TLS); a second install is a no-op.
    let _ = rustls::crypto::ring::default_provider().install_default();
    validate(&settings)?;
    let metrics = Arc::new(Metrics::with_limits(settings.metric_series));
    let live = Live::load_initial_with(&settings.config, settings.config_options, metrics.clone())
        .map_err(|errors| anyhow::anyhow!("invalid config {}:\n{errors}", settings.config.display()))?;
    let live = Arc::new(live);
    log_loaded(&live);
    let store = Arc::new(build_store(&settings)?);
    warn_unserved_consistency(&live, &store);
    let limiter = RateLimiter::new(
        live.clone(),
        store.clone(),
        metrics.clone(),
        Settings {
            store_timeout: settings.store_timeout,
            key_prefix: settings.redis_key_prefix.clone(),
            near_limit_ratio: settings.near_limit_ratio,
            shadow_mode: settings.shadow_mode,
            response_headers: settings.response_headers,
            limit_headers: settings.limit_headers.clone(),
            response_dynamic_metadata: settings.response_dynamic_metadata,
            bounds: settings.bounds,
            local_max_keys: settings.memory_max_keys,
        },
    );

    let grpc_listener = TcpListener::bind(settings.grpc_addr)
        .await
        .with_context(|| format!("binding gRPC address {}", settings.grpc_addr))?;
    let admin_listener = TcpListener::bind(settings.admin_addr)
        .await
        .with_context(|| format!("binding admin address {}", settings.admin_addr))?;
    let grpc_addr = grpc_listener.local_addr()?;
    let admin_addr = admin_listener.local_addr()?;
    let (shutdown, signal) = watch::channel(false);
    let admin = Admin::new(
        live.clone(),
        store.clone(),
        limiter.local_store(),
        metrics.clone(),
        admin_token(&settings)?,
    )
    .with_buckets(&settings.redis_key_prefix, settings.admin_allow_unauthenticated_reset);
    let (health, health_service) = tonic_health::server::health_reporter();

    let mut builder = tonic::transport::Server::builder();
    if let Some(tls) = &settings.tls {
        builder = builder.tls_config(tls_config(tls)?).context("gRPC TLS")?;
    }
    if let Some(age) = settings.max_connection_age {
        builder = builder.max_connection_age(jittered(age));
    }
    let grpc = builder
        .add_service(health_service)
        .add_service(RateLimitServer::new(limiter))
        .serve_with_incoming_shutdown(
            TcpIncoming::from(grpc_listener).with_nodelay(Some(true)),
            stopped(signal.clone()),
        );
    // With connect info: the reset audit line names the client's address.
    let admin_service = admin.router().into_make_service_with_connect_info::<SocketAddr>();
    let admin_server =
        axum::serve(admin_listener, admin_service).with_graceful_shutdown(stopped(signal.clone()));
    let mut tasks = vec![
        tokio::spawn(async move { grpc.await.context("gRPC server failed") }),
        tokio::spawn(async move { admin_server.await.context("admin server failed") }),
    ];
    let store_for_sync = store.clone();
    if let Store::Memory(_) = store.as_ref() {
        tasks.push(tokio::spawn(sweep_memory(store, signal.clone())));
    } else if store.leases().is_some() {
        let stop = stopped(signal.clone());
        let (metrics, name) = (metrics.clone(), store.name());
        tasks.push(tokio::spawn(async move {
            crate::store::leasing::sweep_leases(store, stop, |stats| metrics.set_leases(name, stats)).await;
            Ok(())
        }));
    }
    let mut sync = None;
    if let Some(approx) = store_for_sync.approx().cloned() {
        let live_for_sync = live.clone();
        let target = SyncTarget::new(&settings.redis_key_prefix);
        let (sync_stop, sync_signal) = watch::channel(false);
        let stop = stopped(sync_signal);
        let task = tokio::spawn(async move {
            // The heartbeat only where an approximate domain is configured (or buckets
            // are held): exact-only deployments send Redis nothing more.
            let live = live_for_sync;
            let configured = move || live.load().snapshot.has_approximate();
            crate::store::syncing::run(approx, store_for_sync, target, configured, stop).await;
            Ok(())
        });
        sync = Some((sync_stop, task));
    }
    #[cfg(unix)]
    tokio::spawn(crate::reload::reload_on_sighup(live.clone(), signal.clone()));
    let watcher = if settings.watch_config {
        Some(crate::reload::watch_config(live.clone(), signal.clone()).context("watching the config")?)
    } else {
        None
    };
    set_health(&health, ServingStatus::Serving).await;
    admin.set_ready(true);
    tracing::info!(%grpc_addr, %admin_addr, store = ?settings.store, "serving");
    Ok(Running {
        grpc_addr,
        admin_addr,
        admin,
        live,
        metrics,
        health,
        drain: settings.drain,
        shutdown,
        tasks,
        sync,
        _watcher: watcher,
    })
}

/// Refuses settings no server can keep its promises with, before anything starts.
fn validate(settings: &ServeSettings) -> anyhow::Result<()> {
    if settings.store_timeout.is_zero() {
        anyhow::bail!("--store-timeout-ms must be at least 1: with 0 every charge would be answered by the failure policy");
    }
    let approx = ApproxSettings {
        interval: settings.sync_interval,
        staleness: settings.sync_staleness,
        max_keys: settings.memory_max_keys,
    };
    approx.validate().map_err(|e| anyhow::anyhow!(e))
}

/// Runs until `shutdown` resolves, then stops gracefully.
pub async fn run(settings: ServeSettings, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
    let running = spawn(settings).await?;
    shutdown.await;
    tracing::info!("shutdown requested");
    running.stop().await
}

fn log_loaded(live: &Live) {
    let active = live.load();
    tracing::info!(
        version = %active.snapshot.version,
        domains = active.snapshot.domains.len(),
        rules = active.snapshot.rule_count(),
        "config loaded"
    );
}

/// Approximate domains on the memory store (nothing to sync with: each instance counts
/// alone) are charged exactly: say so once at startup, so the config's promise is not
/// silently different. Every Redis topology serves them.
fn warn_unserved_consistency(live: &Live, store: &Store) {
    if store.approx().is_some() {
        return;
    }
    let active = live.load();
    let approximate: Vec<&str> = active
        .snapshot
        .domains
        .values()
        .filter(|d| d.consistency == crate::config::Consistency::Approximate)
        .map(|d| d.name.as_str())
        .collect();
    if !approximate.is_empty() {
        tracing::warn!(
            domains = ?approximate,
            store = store.name(),
            "consistency: approximate needs --store redis; these domains are charged exactly"
        );
    }
}

async fn set_health(health: &HealthReporter, status: ServingStatus) {
    health.set_service_status("", status).await;
    health.set_service_status(SERVICE_NAME, status).await;
}

fn tls_config(tls: &TlsFiles) -> anyhow::Result<ServerTlsConfig> {
    let read = |p: &PathBuf| std::fs::read(p).with_context(|| format!("reading {}", p.display()));
    let mut config = ServerTlsConfig::new().identity(Identity::from_pem(read(&tls.cert)?, read(&tls.key)?));
    if let Some(ca) = &tls.client_ca {
        config = config.client_ca_root(Certificate::from_pem(read(ca)?));
    }
    Ok(config)
}

/// The admin token from `--admin-token-file`: an unreadable or empty file is a startup error
/// (an operator who asked for a token must not get an open admin port).
fn admin_token(settings: &ServeSettings) -> anyhow::Result<Option<crate::admin::AdminToken>> {
    let Some(path) = &settings.admin_token_file else { return Ok(None) };
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the admin token {}", path.display()))?;
    let token = crate::admin::AdminToken::new(&text)
        .with_context(|| format!("the admin token file {} is empty", path.display()))?;
    tracing::info!(
        token = token.id(),
        "admin token loaded; audit lines name it by this id, in this process only"
    );
    Ok(Some(token))
}

/// ± 10 %, so replicas started together do not all drop their connections at once.
fn jittered(age: Duration) -> Duration {
    let factor = rand::rng().random_range(0.9..=1.1);
    age.mul_f64(factor)
}

fn build_store(settings: &ServeSettings) -> anyhow::Result<Store> {
    if settings.store == StoreKind::Memory && settings.redis_topology != RedisTopology::Single {
        anyhow::bail!("--redis-cluster-nodes and --redis-sentinel need --store redis");
    }
    Ok(match settings.store {
        StoreKind::Memory => Store::Memory(MemoryStore::new(settings.memory_max_keys)),
        StoreKind::Redis => build_redis(settings)?,
    })
}

fn build_redis(settings: &ServeSettings) -> anyhow::Result<Store> {
    let link = settings.redis.link(settings.store_timeout);
    let ca_file = settings.redis.ca_file.clone();
    // Always a table: a reload may give any rule `lease: true`.
    let leases = LeaseSettings {
        every_rule: settings.lease_hot_keys,
        time: settings.lease_time,
        max_keys: crate::store::lease::LEASE_MAX_KEYS,
        store_timeout: settings.store_timeout,
    };
    // Always a table: a reload may make any domain approximate.
    let approx = ApproxSettings {
        interval: settings.sync_interval,
        staleness: settings.sync_staleness,
        max_keys: settings.memory_max_keys,
    };
    Ok(match &settings.redis_topology {
        RedisTopology::Single => Store::Redis(
            Guarded::new(
                RedisStore::new(&settings.redis, settings.store_timeout).context("redis store")?,
                Some(settings.redis.breaker),
            )
            .coalescing(settings.redis.coalesce.then_some(settings.redis.max_inflight))
            .with_leases(leases)
            .with_approx(approx),
        ),
        RedisTopology::Cluster { nodes } => {
            if let Some(tag) = crate::store::cluster::hash_tag(settings.redis_key_prefix.as_bytes()) {
                tracing::warn!(
                    slot = crate::store::cluster::key_slot(tag),
                    "the key prefix holds a hash tag: every bucket is in one slot, on one master"
                );
            }
            let cluster = ClusterSettings { nodes: nodes.clone(), ca_file, link };
            let client = ClusterStore::new(&cluster).context("redis cluster store")?;
            Store::Cluster(
                Guarded::new(client, None)
                    .coalescing(settings.redis.coalesce.then_some(settings.redis.max_inflight))
                    .with_leases(leases)
                    .with_approx(approx),
            )
        }
        RedisTopology::Sentinel { master, sentinels } => {
            let sentinel = SentinelSettings {
                master: master.clone(),
                sentinels: sentinels.clone(),
                master_url: Some(settings.redis.url.clone()),
                ca_file,
                link,
            };
            Store::Sentinel(
                Guarded::new(
                    SentinelStore::new(&sentinel).context("redis sentinel store")?,
                    Some(settings.redis.breaker),
                )
                .coalescing(settings.redis.coalesce.then_some(settings.redis.max_inflight))
                .with_leases(leases)
                .with_approx(approx),
            )
        }
    })
}

async fn stopped(mut signal: watch::Receiver<bool>) {
    let _ = signal.wait_for(|stop| *stop).await;
}

/// Drops expired memory buckets every second so idle keys do not wait for a full shard.
async fn sweep_memory(store: Arc<Store>, signal: watch::Receiver<bool>) -> anyhow::Result<()> {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let stop = stopped(signal);
    tokio::pin!(stop);
    loop {
        tokio::select! {
            _ = &mut stop => return Ok(()),
            _ = tick.tick() => {
                if let Store::Memory(memory) = store.as_ref() {
                    memory.sweep_expired(crate::store::memory::now_us());
                }
            }
        }
    }
}

/// Resolves on SIGTERM or SIGINT (Ctrl-C).
///
/// The handlers are installed by the call itself (it must run inside the runtime), before
/// the server reports ready: a SIGTERM right after startup then drains and exits 0 instead
/// of killing the process (SIGTERM's default action).
pub fn shutdown_signal() -> impl Future<Output = ()> {
    #[cfg(unix)]
    let (term, int) = {
        use tokio::signal::unix::{signal, SignalKind};
        (signal(SignalKind::terminate()), signal(SignalKind::interrupt()))
    };
    async move {
        #[cfg(unix)]
        {
            let wait = |s: std::io::Result<tokio::signal::unix::Signal>| async move {
                match s {
                    Ok(mut s) => {
                        s.recv().await;
                    }
                    Err(_) => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                _ = wait(term) => {},
                _ = wait(int) => {},
            }
        }
        #[cfg(not(unix))]
        let _ = tokio::signal::ctrl_c().await;
    }
}
