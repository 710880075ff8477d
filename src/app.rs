//! Wiring: builds the store, loads the config, binds the listeners and runs the servers
//! until shutdown. Tests call `spawn` with port-0 addresses and get the bound ones back.
//!
//! Layout: this file starts and stops (the order of startup, drain, signals); `servers`
//! binds the listeners and serves gRPC, admin, `/healthcheck` and metrics on them; `tasks`
//! runs what serves beside them (override sync, sweeps, approximate sync, reloads) and
//! the approximate warm-up; `loading` reads what the settings name (config, secrets,
//! span exporter) and builds the request path; `store` builds the store those settings
//! name; `settings` is what it runs with (`ServeSettings`, from the CLI or a test).
//!
//! Layers inside, top to bottom (`tests/layers.rs`): this file; `servers`; `tasks`;
//! `loading`, `store`; `settings`.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tonic_health::server::HealthReporter;
use tonic_health::ServingStatus;

use crate::operate::admin::Admin;
use crate::service::rlqs::{Quota, Streams};
use crate::sources::serving::Live;
use crate::store::syncing::SyncTask;
use crate::telemetry::metrics::Metrics;

mod loading;
mod servers;
mod settings;
mod store;
mod tasks;

/// The gRPC service name health checks ask about (the service's own, re-exported here).
pub use crate::service::SERVICE_NAME;
pub use settings::{MetricsListener, RedisTopology, ServeSettings, StoreKind, TlsFiles};
pub use tasks::warm_up_wait;

use loading::{admin_token, key_secret, limiter, load_config, log_loaded, start_tracing};
use servers::{serve, Listeners};
use settings::validate;
use store::{build_store, warn_unserved_consistency};
use tasks::{background, warm_up, Background};

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
    // The xDS client starts at once; gRPC serves after its first snapshot (`serve`).
    let xds_client = match &settings.xds {
        Some(xds) => Some(crate::sources::xds::spawn(xds.clone(), live.clone(), signal.clone())),
        None => {
            log_loaded(&live);
            None
        }
    };
    let store = Arc::new(build_store(&settings)?);
    warn_unserved_consistency(&live, &store);
    let tracing = start_tracing(&settings, &metrics)?;
    let key_secret = key_secret(&settings)?;
    let limiter =
        limiter(&settings, &live, &store, &metrics, key_secret.clone()).with_tracing(tracing.clone());
    // The incident switch, shared by the request path and the admin port.
    let overrides = limiter.overrides();

    // The RLQS streams: the limiter's config, store and budget. They end with the
    // shutdown signal (the drain) and after the connection age.
    let streams = Arc::new(Streams::new(Quota::new(&limiter), signal.clone(), settings.max_connection_age));

    let listeners = Listeners::bind(&settings).await?;
    let (grpc_addr, admin_addr) = (listeners.grpc_addr, listeners.admin_addr);
    let (healthcheck_addr, metrics_addr) = (listeners.healthcheck_addr, listeners.metrics_addr);
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
    .with_listener(admin_addr)
    .with_quota(streams.clone())
    .with_redis_tls(settings.redis.tls.clone());
    admin.log_exposure(admin_addr);
    let (health, health_service) = tonic_health::server::health_reporter();
    let mut tasks =
        serve(&settings, listeners, (limiter, streams), health_service, &admin, xds_client, &signal).await?;
    let Background { sync, watcher } =
        background(&settings, &live, &store, &metrics, &overrides, &signal, &mut tasks).await?;
    warm_up(&store, &live).await;
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

async fn set_health(health: &HealthReporter, status: ServingStatus) {
    health.set_service_status("", status).await;
    health.set_service_status(SERVICE_NAME, status).await;
    health.set_service_status(crate::service::rlqs::wire::SERVICE_NAME, status).await;
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
