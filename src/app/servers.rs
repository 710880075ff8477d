//! The listeners and the servers on them: gRPC (the rate-limit service, the rate limit quota
//! service and gRPC health),
//! the admin port, and the optional `/healthcheck` and metrics listeners. Every listener
//! is bound before any server starts (a taken port fails startup before anything serves);
//! every server stops on the shutdown signal.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use rand::Rng;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Certificate, Identity, ServerTlsConfig};
use tonic_health::pb::health_server::{Health, HealthServer};

use crate::operate::admin::Admin;
use crate::service::rlqs::{QuotaServer, Streams};
use crate::service::{RateLimitServer, RateLimiter};
use crate::sources::xds::XdsSettings;

use super::settings::{ServeSettings, TlsFiles};
use super::tasks::stopped;

/// Every listener the settings ask for, bound, with the addresses bound.
pub(super) struct Listeners {
    grpc: TcpListener,
    admin: TcpListener,
    healthcheck: Option<TcpListener>,
    metrics: Option<TcpListener>,
    pub grpc_addr: SocketAddr,
    pub admin_addr: SocketAddr,
    pub healthcheck_addr: Option<SocketAddr>,
    pub metrics_addr: Option<SocketAddr>,
}

impl Listeners {
    /// Binds them all (port 0: any free port, read back from the address fields).
    pub async fn bind(settings: &ServeSettings) -> anyhow::Result<Listeners> {
        let grpc = TcpListener::bind(settings.grpc_addr)
            .await
            .with_context(|| format!("binding gRPC address {}", settings.grpc_addr))?;
        let admin = TcpListener::bind(settings.admin_addr)
            .await
            .with_context(|| format!("binding admin address {}", settings.admin_addr))?;
        let healthcheck = bind(settings.healthcheck_addr, "the /healthcheck address").await?;
        let metrics = bind(settings.metrics_listener.as_ref().map(|m| m.addr), "the metrics address").await?;
        Ok(Listeners {
            grpc_addr: grpc.local_addr()?,
            admin_addr: admin.local_addr()?,
            healthcheck_addr: healthcheck.as_ref().map(TcpListener::local_addr).transpose()?,
            metrics_addr: metrics.as_ref().map(TcpListener::local_addr).transpose()?,
            grpc,
            admin,
            healthcheck,
            metrics,
        })
    }
}

/// Starts the servers on `listeners`, gRPC last: the admin server, `/healthcheck` and the
/// metrics first, so that while the first xDS snapshot is awaited (`xds_client`) `/readyz`
/// says so (503), `/healthcheck` answers 500 as the peer's would, and `/metrics` and
/// `/rlconfig` show the stream. Returns their tasks.
pub(super) async fn serve<H: Health>(
    settings: &ServeSettings,
    listeners: Listeners,
    (limiter, streams): (RateLimiter, std::sync::Arc<Streams>),
    health: HealthServer<H>,
    admin: &Admin,
    xds_client: Option<(JoinHandle<()>, watch::Receiver<bool>)>,
    signal: &watch::Receiver<bool>,
) -> anyhow::Result<Vec<JoinHandle<anyhow::Result<()>>>> {
    let mut builder = tonic::transport::Server::builder();
    if let Some(tls) = &settings.tls {
        builder = builder.tls_config(tls_config(tls)?).context("gRPC TLS")?;
    }
    if let Some(age) = settings.max_connection_age {
        builder = builder.max_connection_age(jittered(age));
    }
    // RLQS beside RLS, on by default: the same config, store and budget.
    let quota = QuotaServer::new(streams);
    let grpc = builder
        .add_service(health)
        .add_service(RateLimitServer::new(limiter))
        .add_service(quota)
        .serve_with_incoming_shutdown(
            TcpIncoming::from(listeners.grpc).with_nodelay(Some(true)),
            stopped(signal.clone()),
        );
    // With connect info: the reset audit line names the client's address.
    let admin_service = admin.router().into_make_service_with_connect_info::<SocketAddr>();
    let admin_server =
        axum::serve(listeners.admin, admin_service).with_graceful_shutdown(stopped(signal.clone()));
    let mut tasks = vec![tokio::spawn(async move { admin_server.await.context("admin server failed") })];
    if let Some(listener) = listeners.healthcheck {
        let router = admin.healthcheck_router();
        let server = axum::serve(listener, router).with_graceful_shutdown(stopped(signal.clone()));
        tasks.push(tokio::spawn(async move { server.await.context("/healthcheck server failed") }));
    }
    if let (Some(listener), Some(at)) = (listeners.metrics, &settings.metrics_listener) {
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
    Ok(tasks)
}

/// Binds `addr` if there is one.
async fn bind(addr: Option<SocketAddr>, what: &str) -> anyhow::Result<Option<TcpListener>> {
    let Some(addr) = addr else { return Ok(None) };
    let listener = TcpListener::bind(addr).await.with_context(|| format!("binding {what} {addr}"))?;
    Ok(Some(listener))
}

/// Without force start, waits for the xDS client's first snapshot (for ever, or
/// `initial_wait`) before gRPC serves: until then every domain is unknown, so nothing would
/// be limited. The admin server already answers (`/readyz`: 503, waiting).
async fn first_snapshot(xds: &XdsSettings, mut first: watch::Receiver<bool>) {
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

fn tls_config(tls: &TlsFiles) -> anyhow::Result<ServerTlsConfig> {
    let read = |p: &PathBuf| std::fs::read(p).with_context(|| format!("reading {}", p.display()));
    let mut config = ServerTlsConfig::new().identity(Identity::from_pem(read(&tls.cert)?, read(&tls.key)?));
    if let Some(ca) = &tls.client_ca {
        config = config.client_ca_root(Certificate::from_pem(read(ca)?));
    }
    Ok(config)
}

/// ± 10 %, so replicas started together do not all drop their connections at once.
fn jittered(age: Duration) -> Duration {
    let factor = rand::rng().random_range(0.9..=1.1);
    age.mul_f64(factor)
}
