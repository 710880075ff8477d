//! The admin HTTP server: liveness, readiness, metrics, config, reload, and a
//! descriptor's usage and reset (`usage`).
//!
//! Loopback by default. With an admin token (`--admin-token-file`) every `POST` endpoint
//! (`/reload`, `/v1/reset`), `GET /v1/usage` and `GET /v1/hotkeys` (`hotkeys`: the busiest
//! buckets) require `Authorization: Bearer <token>`; `/` and `/v1/status` (the status page,
//! `status`) answer without it but leave the busiest buckets out, so that nothing
//! unauthenticated names a bucket; `/metrics`, `/rlconfig`, `/healthz` and `/readyz` never
//! need it. Without a token, `/v1/reset` is refused (403) unless
//! `--admin-allow-unauthenticated-reset`: it hands quota back, so an open admin port must
//! not do it by default. Readiness means "config loaded and gRPC serving"; it deliberately
//! does not follow Redis: failure policies handle a Redis outage, so Kubernetes must not
//! pull every replica out of the Service when Redis blips.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use axum::extract::Query;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::Router;
use serde::Deserialize;

mod audit;
pub mod client;
pub mod hotkeys;
pub mod query;
mod token;
pub mod usage;

pub use token::AdminToken;

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
    token: Option<Arc<AdminToken>>,
    /// `--redis-key-prefix`: usage and reset compute the keys the request path charges.
    key_prefix: Arc<str>,
    /// `--admin-allow-unauthenticated-reset`: reset without a configured token.
    allow_unauthenticated_reset: bool,
}

/// Who called a reset, for the audit line.
#[derive(Debug, Clone)]
pub struct Caller {
    /// The client's socket address (absent when the server runs without connect info).
    pub client: Option<std::net::SocketAddr>,
    /// The id of the token presented (`AdminToken::id`), `invalid` for a wrong one.
    pub token: Option<String>,
}

impl Admin {
    pub fn new(
        live: Arc<Live>,
        store: Arc<Store>,
        local: Arc<MemoryStore>,
        metrics: Arc<Metrics>,
        token: Option<AdminToken>,
    ) -> Admin {
        let token = token.map(Arc::new);
        Admin {
            ready: Arc::new(AtomicBool::new(false)),
            live,
            store,
            local,
            metrics,
            token,
            key_prefix: Arc::from(""),
            allow_unauthenticated_reset: false,
        }
    }

    /// With the server's `--redis-key-prefix` (usage and reset read the buckets the request
    /// path charges) and `--admin-allow-unauthenticated-reset`.
    pub fn with_buckets(mut self, key_prefix: &str, allow_unauthenticated_reset: bool) -> Admin {
        self.key_prefix = Arc::from(key_prefix);
        self.allow_unauthenticated_reset = allow_unauthenticated_reset;
        self
    }

    /// `Ok` when `headers` may use a guarded endpoint, else the 401 refusal.
    fn check_token(&self, headers: &HeaderMap) -> Result<(), usage::Refusal> {
        if self.authorized(headers) {
            return Ok(());
        }
        let message = "this endpoint requires Authorization: Bearer <admin token>";
        Err(usage::Refusal::new(StatusCode::UNAUTHORIZED, message))
    }

    /// `Ok` when `headers` may reset (the token, or no token and the operator allowed it);
    /// else the 401 or 403 answer. Fills in the caller's token id either way.
    fn check_reset(&self, headers: &HeaderMap, caller: &mut Caller) -> Result<(), usage::Refusal> {
        let Some(token) = &self.token else {
            if self.allow_unauthenticated_reset {
                return Ok(());
            }
            return Err(usage::Refusal::new(
                StatusCode::FORBIDDEN,
                "reset needs an admin token: start the server with --admin-token-file \
                 (or, on a trusted network only, --admin-allow-unauthenticated-reset)",
            ));
        };
        let presented = headers.contains_key(header::AUTHORIZATION);
        let allowed = self.authorized(headers);
        caller.token = match (presented, allowed) {
            (_, true) => Some(token.id().to_string()),
            (true, false) => Some("invalid".into()),
            (false, false) => None,
        };
        self.check_token(headers)
    }

    /// Whether `headers` may use a mutating endpoint: no token is configured, or they carry
    /// it as `Authorization: Bearer <token>`.
    fn authorized(&self, headers: &HeaderMap) -> bool {
        let Some(token) = &self.token else { return true };
        headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .is_some_and(|presented| token.matches(presented.trim()))
    }

    /// The status page's view: the busiest buckets name buckets, so with a token configured
    /// only a request that carries it sees them (without one, everyone, as before).
    fn status(&self, headers: &HeaderMap) -> crate::status::Status {
        let hot = if self.authorized(headers) {
            crate::status::HotBuckets::Shown
        } else {
            crate::status::HotBuckets::Hidden
        };
        crate::status::Status::gather(&self.live, &self.store, &self.metrics, hot)
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
            .route("/", get(status_page))
            .route("/v1/status", get(status_json))
            .route("/healthz", get(|| async { "ok\n" }))
            .route("/readyz", get(readyz))
            .route("/metrics", get(metrics))
            .route("/rlconfig", get(rlconfig))
            .route("/reload", post(reload))
            .route("/v1/usage", get(usage::usage))
            .route("/v1/reset", post(usage::reset))
            .route("/v1/hotkeys", get(hotkeys::hotkeys))
            .with_state(self.clone())
    }
}

async fn status_page(State(admin): State<Admin>, headers: HeaderMap) -> axum::response::Html<String> {
    axum::response::Html(crate::status::page::render(&admin.status(&headers)))
}

async fn status_json(State(admin): State<Admin>, headers: HeaderMap) -> axum::Json<crate::status::Status> {
    axum::Json(admin.status(&headers))
}

async fn readyz(State(admin): State<Admin>) -> (StatusCode, &'static str) {
    if admin.is_ready() {
        (StatusCode::OK, "ready\n")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready\n")
    }
}

async fn metrics(State(admin): State<Admin>) -> impl IntoResponse {
    admin.metrics.set_memory(admin.memory());
    admin.metrics.set_hot_key_shares(&admin.live.load().hot_keys);
    if let Some(approx) = admin.store.approx() {
        admin.metrics.set_approx(approx);
    }
    let name = admin.store.name();
    match admin.store.as_ref() {
        Store::Memory(_) => {}
        Store::Redis(redis) => {
            set_breaker(&admin, redis.breaker());
            admin.metrics.set_replaced(name, redis.client().replaced());
            admin.metrics.set_over_limit_cache_hits(name, redis.over_limit().local_answers());
        }
        Store::Sentinel(sentinel) => {
            set_breaker(&admin, sentinel.breaker());
            admin.metrics.set_replaced(name, sentinel.client().replaced());
            admin.metrics.set_over_limit_cache_hits(name, sentinel.over_limit().local_answers());
        }
        Store::Cluster(cluster) => {
            admin.metrics.set_replaced(name, cluster.client().replaced());
            admin.metrics.set_over_limit_cache_hits(name, cluster.over_limit().local_answers());
        }
    }
    (
        [(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")],
        admin.metrics.encode(),
    )
}

async fn reload(State(admin): State<Admin>, headers: HeaderMap) -> axum::response::Response {
    if !admin.authorized(&headers) {
        let challenge = [(header::WWW_AUTHENTICATE, "Bearer")];
        let body = "this endpoint requires Authorization: Bearer <admin token>\n";
        return (StatusCode::UNAUTHORIZED, challenge, body).into_response();
    }
    reload_now(admin).await.into_response()
}

async fn reload_now(admin: Admin) -> (StatusCode, String) {
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
