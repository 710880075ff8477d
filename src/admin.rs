//! The admin HTTP server: liveness, readiness, metrics (and, as operations grow, config).
//!
//! Loopback by default. Readiness means "config loaded and gRPC serving"; it deliberately
//! does not follow Redis: failure policies handle a Redis outage, so Kubernetes must not
//! pull every replica out of the Service when Redis blips.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use axum::extract::Query;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::Router;
use serde::Deserialize;

use crate::live::Live;
use crate::metrics::Metrics;
use crate::store::{MemoryStore, Store};

/// Shared state of the admin endpoints.
#[derive(Debug, Clone)]
pub struct Admin {
    ready: Arc<AtomicBool>,
    live: Arc<Live>,
    store: Arc<Store>,
    /// The in-process limiter of `failure_mode: local` domains (`RateLimiter::local_store`).
    local: Arc<MemoryStore>,
    metrics: Arc<Metrics>,
}

impl Admin {
    pub fn new(live: Arc<Live>, store: Arc<Store>, local: Arc<MemoryStore>, metrics: Arc<Metrics>) -> Admin {
        Admin { ready: Arc::new(AtomicBool::new(false)), live, store, local, metrics }
    }

    /// The buckets this process holds in memory, which the `tollgate_memory_*` metrics
    /// describe: the memory store, or with Redis the `failure_mode: local` limiter (the
    /// other one of the two is never charged).
    pub fn memory(&self) -> &MemoryStore {
        match self.store.as_ref() {
            Store::Memory(memory) => memory,
            Store::Redis(_) | Store::Sentinel(_) | Store::Cluster(_) => &self.local,
        }
    }

    /// Marks the server ready (or not, while draining).
    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::SeqCst);
    }

    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::SeqCst)
    }

    /// The admin routes.
    pub fn router(&self) -> Router {
        Router::new()
            .route("/healthz", get(|| async { "ok\n" }))
            .route("/readyz", get(readyz))
            .route("/metrics", get(metrics))
            .route("/rlconfig", get(rlconfig))
            .route("/reload", post(reload))
            .with_state(self.clone())
    }
}

async fn readyz(State(admin): State<Admin>) -> (StatusCode, &'static str) {
    if admin.is_ready() {
        (StatusCode::OK, "ready\n")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready\n")
    }
}

async fn metrics(State(admin): State<Admin>) -> impl IntoResponse {
    admin.metrics.set_memory(&admin.memory().stats());
    match admin.store.as_ref() {
        Store::Memory(_) => {}
        Store::Redis(redis) => {
            set_breaker(&admin, redis.breaker());
            admin.metrics.set_replaced(admin.store.name(), redis.client().replaced());
        }
        Store::Sentinel(sentinel) => {
            set_breaker(&admin, sentinel.breaker());
            admin.metrics.set_replaced(admin.store.name(), sentinel.client().replaced());
        }
        Store::Cluster(cluster) => {
            admin.metrics.set_replaced(admin.store.name(), cluster.client().replaced())
        }
    }
    (
        [(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")],
        admin.metrics.encode(),
    )
}

async fn reload(State(admin): State<Admin>) -> (StatusCode, String) {
    let live = admin.live.clone();
    match tokio::task::spawn_blocking(move || live.reload()).await {
        Ok(Ok((version, changed))) => {
            let what = if changed { "reloaded" } else { "unchanged" };
            (StatusCode::OK, format!("{what}: version {version}\n"))
        }
        Ok(Err(errors)) => (StatusCode::UNPROCESSABLE_ENTITY, format!("{errors}\n")),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("reload failed: {e}\n")),
    }
}

#[derive(Debug, Deserialize)]
struct Format {
    format: Option<String>,
}

async fn rlconfig(State(admin): State<Admin>, Query(format): Query<Format>) -> axum::response::Response {
    let active = admin.live.load();
    let store = store_state(&admin.store);
    if format.format.as_deref() == Some("json") {
        axum::Json(crate::rlconfig::json(&active.snapshot, &store)).into_response()
    } else {
        crate::rlconfig::text(&active.snapshot, &store).into_response()
    }
}

fn set_breaker(admin: &Admin, breaker: Option<&crate::store::breaker::Breaker>) {
    if let Some(breaker) = breaker {
        admin.metrics.set_breaker(admin.store.name(), breaker.state() as i64, breaker.opened_total());
    }
}

fn store_state(store: &Store) -> crate::rlconfig::StoreState {
    match store {
        Store::Memory(memory) => {
            let stats = memory.stats();
            crate::rlconfig::StoreState {
                kind: "memory",
                healthy: true,
                detail: format!("{} keys", stats.keys),
            }
        }
        Store::Redis(redis) => crate::rlconfig::StoreState {
            kind: "redis",
            healthy: redis.client().is_healthy(),
            detail: redis.client().redacted_url(),
        },
        Store::Cluster(cluster) => crate::rlconfig::StoreState {
            kind: "redis_cluster",
            healthy: cluster.client().is_healthy(),
            detail: cluster.client().redacted_nodes(),
        },
        Store::Sentinel(sentinel) => crate::rlconfig::StoreState {
            kind: "redis_sentinel",
            healthy: sentinel.client().is_healthy(),
            detail: sentinel.client().description(),
        },
    }
}
