//! Wiring: builds the store, loads the config, binds the listeners and runs the servers
//! until shutdown. Tests call `spawn` with port-0 addresses and get the bound ones back.
//!
//! Layout: this file starts, serves and stops (listeners, health, drain, signals);
//! `settings` is what it runs with (`ServeSettings`, from the CLI or a test) and `store`
//! builds the store those settings name.
//!
//! Layers inside, top to bottom (`tests/layers.rs`): this file; `store`; `settings`.

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use rand::Rng;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Certificate, Identity, ServerTlsConfig};
use tonic_health::server::HealthReporter;
use tonic_health::ServingStatus;

use crate::operate::admin::Admin;
use crate::service::{RateLimitServer, RateLimiter, Settings};
use crate::sources::serving::Live;
use crate::store::approx::sync::SyncTarget;
use crate::store::syncing::SyncTask;
use crate::store::Store;
use crate::telemetry::metrics::Metrics;

mod settings;
mod store;

/// The gRPC service name health checks ask about (the service's own, re-exported here).
pub use crate::service::SERVICE_NAME;
pub use settings::{MetricsListener, RedisTopology, ServeSettings, StoreKind, TlsFiles};

use settings::validate;
use store::{build_store, warn_unserved_consistency};

/// A running server: its bound addresses and a way to stop it.
#[derive(Debug)]
pub struct Running {
    pub grpc_addr: SocketAddr,
    pub admin_addr: SocketAddr,
    /// Where `/healthcheck` answers (`ServeSettings::healthcheck_addr`), bound.
    pub healthcheck_addr: Option<SocketAddr>,
    /// Where the metrics are served alone (`ServeSettings::metrics_listener`), bound.
    pub metrics_addr: Option<SocketAddr>,
    pub admin: Admin,
    pub live: Arc<Live>,
    pub metrics: Arc<Metrics>,
    health: HealthReporter,
    drain: Duration,
    shutdown: watch::Sender<bool>,
    tasks: Vec<JoinHandle<anyhow::Result<()>>>,
    /// Approximate mode's sync (supervised: restarted if it ends or panics), stopped after
    /// the servers (it writes what they admitted last).
    sync: Option<SyncTask>,
    /// Span export, when tracing is on: its queue is sent last.
    tracing: Option<Arc<crate::telemetry::trace::Tracing>>,
    _watcher: Option<notify::RecommendedWatcher>,
}

impl Running {
    /// Ends approximate mode's running sync task at once, as a panic in it would; its
    /// supervisor starts it again. For tests of that supervision only, not a contract.
    /// Whether a task was running.
    #[doc(hidden)]
    pub fn end_approximate_sync_task(&self) -> bool {
        self.sync.as_ref().is_some_and(SyncTask::end_running_task)
    }

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
        if let Some(sync) = self.sync {
            match sync.stop(Duration::from_secs(2)).await {
                Some(joined) => joined.context("the approximate sync's supervisor panicked")?,
                None => tracing::warn!("the approximate sync's last write did not finish"),
            }
        }
        // The last requests' spans, within 2 s (what is left is counted as dropped).
        if let Some(tracing) = &self.tracing {
            tracing.stop(Duration::from_secs(2)).await;
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
    let (shutdown, signal) = watch::channel(false);
    let live = Arc::new(load_config(&settings, metrics.clone())?);
    // The xDS client starts at once; gRPC serves after its first snapshot (below).
    let xds_client = match &settings.xds {
        Some(xds) => Some(crate::sources::xds::spawn(xds.clone(), live.clone(), signal.clone())),
        None => {
            log_loaded(&live);
            None
        }
    };
    let store = Arc::new(build_store(&settings)?);
    warn_unserved_consistency(&live, &store);
    let tracing = match &settings.tracing {
        Some(trace) => {
            let started = crate::telemetry::trace::Tracing::start(trace, metrics.clone())
                .map_err(anyhow::Error::msg)?;
            tracing::info!(
                protocol = trace.protocol.as_str(),
                endpoint = %trace.endpoint,
                ratio = trace.sampling.ratio,
                parent_based = trace.sampling.parent_based,
                service = %trace.service_name,
                "tracing on"
            );
            Some(Arc::new(started))
        }
        None => None,
    };
    let key_secret = key_secret(&settings)?;
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
            ietf_headers: settings.ietf_headers,
            retry_after_jitter: settings.retry_after_jitter,
            response_dynamic_metadata: settings.response_dynamic_metadata,
            bounds: settings.bounds,
            local_max_keys: settings.memory_max_keys,
            key_secret: key_secret.clone(),
        },
    )
    .with_tracing(tracing.clone());
    // The incident switch, shared by the request path and the admin port.
    let overrides = limiter.overrides();

    let grpc_listener = TcpListener::bind(settings.grpc_addr)
        .await
        .with_context(|| format!("binding gRPC address {}", settings.grpc_addr))?;
    let admin_listener = TcpListener::bind(settings.admin_addr)
        .await
        .with_context(|| format!("binding admin address {}", settings.admin_addr))?;
    let healthcheck_listener = bind(settings.healthcheck_addr, "the /healthcheck address").await?;
    let metrics_listener =
        bind(settings.metrics_listener.as_ref().map(|m| m.addr), "the metrics address").await?;
    let grpc_addr = grpc_listener.local_addr()?;
    let admin_addr = admin_listener.local_addr()?;
    let healthcheck_addr = healthcheck_listener.as_ref().map(TcpListener::local_addr).transpose()?;
    let metrics_addr = metrics_listener.as_ref().map(TcpListener::local_addr).transpose()?;
    let admin = Admin::new(
        live.clone(),
        store.clone(),
        limiter.local_store(),
        metrics.clone(),
        admin_token(&settings)?,
    )
    .with_buckets(&settings.redis_key_prefix, settings.admin_allow_unauthenticated_reset)
    .with_overrides(overrides.clone())
    .with_key_secret(key_secret)
    .with_listener(admin_addr);
    admin.log_exposure(admin_addr);
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
    // The admin server, `/healthcheck` and the metrics first: while the first xDS snapshot
    // is awaited, `/readyz` says so (503), `/healthcheck` answers 500 as the peer's would,
    // and `/metrics` and `/rlconfig` show the stream.
    let mut tasks = vec![tokio::spawn(async move { admin_server.await.context("admin server failed") })];
    if let Some(listener) = healthcheck_listener {
        let router = admin.healthcheck_router();
        let server = axum::serve(listener, router).with_graceful_shutdown(stopped(signal.clone()));
        tasks.push(tokio::spawn(async move { server.await.context("/healthcheck server failed") }));
    }
    if let (Some(listener), Some(at)) = (metrics_listener, &settings.metrics_listener) {
        let router = admin.metrics_router(&at.path);
        let server = axum::serve(listener, router).with_graceful_shutdown(stopped(signal.clone()));
        tasks.push(tokio::spawn(async move { server.await.context("metrics server failed") }));
    }
    if let (Some(xds), Some((task, first))) = (&settings.xds, xds_client) {
        first_snapshot(xds, first).await;
        // Stops with the shutdown signal; a panic there is a bug worth failing the stop for.
        tasks.push(tokio::spawn(async move { task.await.context("xDS client panicked") }));
    }
    tasks.push(tokio::spawn(async move { grpc.await.context("gRPC server failed") }));
    if store.is_shared() {
        // An instance started during an incident honours the fleet's overrides from its
        // first request: one read before it is ready, then one every SYNC_INTERVAL.
        if let Err(e) = overrides.sync(&store).await {
            tracing::warn!(error = %e, "overrides: not read from Redis at startup; reading them every 250 ms");
        }
        let (overrides, store, stop) = (overrides.clone(), store.clone(), stopped(signal.clone()));
        tasks.push(tokio::spawn(async move {
            tokio::select! {
                () = crate::sources::overrides::sync_forever(overrides, store) => {}
                () = stop => {}
            }
            Ok(())
        }));
    }
    let store_for_sync = store.clone();
    let store_for_warm_up = store.clone();
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
    let sync = store_for_sync.approx().cloned().and_then(|approx| {
        // The heartbeat only where an approximate domain is configured (or buckets are
        // held): exact-only deployments send Redis nothing more.
        let live = live.clone();
        let configured = move || live.load().snapshot.has_approximate();
        let target = SyncTarget::new(&settings.redis_key_prefix);
        SyncTask::spawn(approx, store_for_sync, target, configured)
    });
    #[cfg(unix)]
    tokio::spawn(crate::sources::reload::reload_on_sighup(live.clone(), signal.clone()));
    let watcher = if settings.watch_config && settings.xds.is_none() {
        Some(
            crate::sources::reload::watch_config(live.clone(), signal.clone())
                .context("watching the config")?,
        )
    } else {
        None
    };
    warm_up(&store_for_warm_up, &live).await;
    set_health(&health, ServingStatus::Serving).await;
    admin.set_ready(true);
    tracing::info!(%grpc_addr, %admin_addr, ?healthcheck_addr, ?metrics_addr, store = ?settings.store, "serving");
    Ok(Running {
        grpc_addr,
        admin_addr,
        healthcheck_addr,
        metrics_addr,
        admin,
        live,
        metrics,
        health,
        drain: settings.drain,
        shutdown,
        tasks,
        sync,
        tracing,
        _watcher: watcher,
    })
}

/// Before it reports ready, an instance with approximate domains on Redis waits for its
/// approximate warm-up (`Approx::warmed_up`: two heartbeats an interval apart), so that
/// the first request a load balancer sends is decided locally, not exactly at the store
/// timeout while the connections are new and the load arrives at once. Bounded by
/// [`warm_up_wait`]: with Redis not answering it reports ready anyway, and approximate
/// domains are decided exactly (their `failure_mode` answers) until the warm-up ends.
async fn warm_up(store: &Store, live: &Live) {
    let Some(approx) = store.approx() else { return };
    if store.sync_via().is_none() || !live.load().snapshot.has_approximate() {
        return;
    }
    let wait = warm_up_wait(approx.settings().interval);
    let started = Instant::now();
    match tokio::time::timeout(wait, approx.warmed_up()).await {
        Ok(()) => tracing::info!(
            waited_ms = started.elapsed().as_millis() as u64,
            "approximate warm-up done before ready"
        ),
        Err(_) => tracing::warn!(
            waited_ms = wait.as_millis() as u64,
            "approximate warm-up not done (Redis not answering the heartbeat): ready anyway; \
             approximate domains are decided exactly, by their failure_mode on store errors, until it is"
        ),
    }
}

/// How long startup waits for the approximate warm-up: the first heartbeat and one full
/// wake at least an interval later (at most two intervals on the shared grid), each call
/// allowed its sync deadline — 2.5 s at the defaults.
pub fn warm_up_wait(interval: Duration) -> Duration {
    interval * 2 + crate::store::approx::sync::sync_deadline(interval) * 2
}

/// Binds `addr` if there is one.
async fn bind(addr: Option<SocketAddr>, what: &str) -> anyhow::Result<Option<TcpListener>> {
    let Some(addr) = addr else { return Ok(None) };
    let listener = TcpListener::bind(addr).await.with_context(|| format!("binding {what} {addr}"))?;
    Ok(Some(listener))
}

/// Runs until `shutdown` resolves, then stops gracefully.
pub async fn run(settings: ServeSettings, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
    tokio::pin!(shutdown);
    // A shutdown while starting (waiting for the first xDS snapshot, the approximate
    // warm-up) ends the process at once: nothing serves gRPC yet.
    let running = tokio::select! {
        running = spawn(settings) => running?,
        () = &mut shutdown => {
            tracing::info!("shutdown requested before ready: exiting");
            return Ok(());
        }
    };
    shutdown.await;
    tracing::info!("shutdown requested");
    running.stop().await
}

/// The config from its files (a bad one is an error), or an empty one the xDS client fills.
fn load_config(settings: &ServeSettings, metrics: Arc<Metrics>) -> anyhow::Result<Live> {
    let live = match &settings.xds {
        None => Live::load_initial_with(&settings.config, settings.config_options, metrics)
            .map_err(|errors| anyhow::anyhow!("invalid config {}:\n{errors}", settings.config.display()))?,
        Some(xds) => {
            if let Some(tls) = &xds.tls {
                crate::sources::xds::check_files(tls).map_err(|e| anyhow::anyhow!("xDS TLS: {e}"))?;
            }
            for (key, value) in &xds.headers {
                tonic::metadata::MetadataKey::<tonic::metadata::Ascii>::from_bytes(key.as_bytes()).map_err(
                    |_| anyhow::anyhow!("xDS header name {key:?} is not a valid gRPC metadata key"),
                )?;
                tonic::metadata::MetadataValue::<tonic::metadata::Ascii>::try_from(value.as_str()).map_err(
                    |_| anyhow::anyhow!("the value of xDS header {key:?} is not valid gRPC metadata"),
                )?;
            }
            let state = crate::sources::serving::XdsState {
                server: xds.server.clone(),
                node_id: xds.node_id.clone(),
                force_start: xds.force_start,
                ..Default::default()
            };
            Live::for_xds(settings.config_options, metrics, state)
        }
    };
    Ok(live.with_ready_needs_domain(settings.ready_needs_domain))
}

/// Without force start, waits for the xDS client's first snapshot (for ever, or
/// `initial_wait`) before gRPC serves: until then every domain is unknown, so nothing would
/// be limited. The admin server already answers (`/readyz`: 503, waiting).
async fn first_snapshot(xds: &crate::sources::xds::XdsSettings, mut first: watch::Receiver<bool>) {
    if xds.force_start {
        tracing::warn!(server = %xds.server, "serving before the first xDS snapshot: nothing is limited until it arrives");
        return;
    }
    tracing::info!(server = %xds.server, node = %xds.node_id, "waiting for the first xDS snapshot");
    let arrived = first.wait_for(|received| *received);
    match xds.initial_wait {
        None => {
            let _ = arrived.await;
        }
        Some(wait) => {
            if tokio::time::timeout(wait, arrived).await.is_err() {
                tracing::warn!(
                    wait_ms = wait.as_millis() as u64,
                    "no xDS snapshot within --xds-initial-wait: serving anyway, nothing is limited until it arrives"
                );
            }
        }
    }
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
fn admin_token(settings: &ServeSettings) -> anyhow::Result<Option<crate::operate::admin::AdminToken>> {
    let Some(path) = &settings.admin_token_file else { return Ok(None) };
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the admin token {}", path.display()))?;
    let token = crate::operate::admin::AdminToken::new(&text)
        .with_context(|| format!("the admin token file {} is empty", path.display()))?;
    tracing::info!(
        token = token.id(),
        "admin token loaded; audit lines name it by this id, in this process only"
    );
    Ok(Some(token))
}

/// The secret of `--key-secret-file`: an unreadable file or one too short is a startup
/// error (an operator who asked for private keys must not get clear ones). Never logged.
fn key_secret(settings: &ServeSettings) -> anyhow::Result<Option<crate::store::key::KeySecret>> {
    let Some(path) = &settings.key_secret_file else { return Ok(None) };
    let bytes = std::fs::read(path).with_context(|| format!("reading the key secret {}", path.display()))?;
    let secret = crate::store::key::KeySecret::new(&bytes)
        .map_err(|e| anyhow::anyhow!("the key secret file {}: {e}", path.display()))?;
    tracing::info!(file = %path.display(), "key secret loaded: request values enter bucket keys keyed-hashed");
    Ok(Some(secret))
}

/// ± 10 %, so replicas started together do not all drop their connections at once.
fn jittered(age: Duration) -> Duration {
    let factor = rand::rng().random_range(0.9..=1.1);
    age.mul_f64(factor)
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
