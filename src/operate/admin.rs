//! The admin HTTP server: liveness, readiness, metrics, config, reload, and a
//! descriptor's usage and reset (`usage`). This file is the router and the small
//! endpoints; what they all share (`Admin`, the token checks, refusals) is `state`'s.
//!
//! Loopback by default. With an admin token (`--admin-token-file`) every `POST` endpoint
//! (`/reload`, `/v1/reset`), `GET /v1/usage` and `GET /v1/hotkeys` (`hotkeys`: the busiest
//! buckets) require `Authorization: Bearer <token>`; `/` and `/v1/status` (the status page,
//! `status`) answer without it but leave the busiest buckets out, so that nothing
//! unauthenticated names a bucket; `/metrics`, `/rlconfig`, `/healthz` and `/readyz` never
//! need it. Bound beyond loopback (peer mode binds every interface) without a token, the
//! port is open to whoever reaches it (`Admin::with_listener`): every request value it
//! would show — `/v1/hotkeys`, `/v1/status`, `/` — is keyed-hashed with a per-process key
//! (`value_hmac`), never plain nor an unkeyed hash, `/v1/usage` is refused (403: it
//! answers for any value a caller guesses), and the startup log says so. The other GETs
//! show the config, the store's state and counts, never a bucket's value; `/metrics`
//! holds values only where a rule asks (`detailed_metric`, `value_to_metric`), token or
//! not. Without a token, `/v1/reset` is refused (403) unless
//! `--admin-allow-unauthenticated-reset`: it hands quota back, so an open admin port must
//! not do it by default. Readiness means "config loaded and gRPC serving"; it deliberately
//! does not follow Redis: failure policies handle a Redis outage, so Kubernetes must not
//! pull every replica out of the Service when Redis blips.

use axum::extract::Query;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::{any, get, post};
use axum::Router;
use serde::Deserialize;

mod audit;
pub mod client;
pub mod hotkeys;
pub mod incident;
pub mod query;
mod state;
mod token;
pub mod usage;

pub use state::{Admin, Caller};
pub use token::AdminToken;

use crate::store::Store;

impl Admin {
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
            .route("/v1/override", post(incident::set).get(incident::list).delete(incident::end))
            .route("/v1/hotkeys", get(hotkeys::hotkeys))
            .route("/v1/explain", get(explain))
            .with_state(self.clone())
    }
}

impl Admin {
    /// envoyproxy/ratelimit's health endpoint, as Envoy Gateway's probes use it:
    /// `/healthcheck` (any method) answers 200 `OK` when `/readyz` would answer 200 (serving,
    /// and the config allows it: `Live::readiness`), else 500 with an empty body, as the
    /// peer does. Nothing else is served there.
    pub fn healthcheck_router(&self) -> Router {
        Router::new().route("/healthcheck", any(healthcheck)).with_state(self.clone())
    }

    /// The metrics alone at `path` (the peer's PROMETHEUS_ADDR / PROMETHEUS_PATH); any
    /// other path is 404.
    pub fn metrics_router(&self, path: &str) -> Router {
        let path = path.to_string();
        let admin = self.clone();
        Router::new().fallback(move |uri: axum::http::Uri| {
            let (admin, found) = (admin.clone(), uri.path() == path);
            async move {
                if found {
                    metrics(State(admin)).await.into_response()
                } else {
                    StatusCode::NOT_FOUND.into_response()
                }
            }
        })
    }
}

/// `/readyz`'s decision in the peer's words: 200 `OK`, or 500 with an empty body.
async fn healthcheck(State(admin): State<Admin>) -> (StatusCode, &'static str) {
    match readyz(State(admin)).await {
        (StatusCode::OK, _) => (StatusCode::OK, "OK"),
        _ => (StatusCode::INTERNAL_SERVER_ERROR, ""),
    }
}

async fn status_page(State(admin): State<Admin>, headers: HeaderMap) -> axum::response::Html<String> {
    axum::response::Html(crate::operate::status::page::render(&admin.status(&headers)))
}

async fn status_json(
    State(admin): State<Admin>,
    headers: HeaderMap,
) -> axum::Json<crate::operate::status::Status> {
    axum::Json(admin.status(&headers))
}

/// Ready once serving and the config allows it (`Live::readiness`: the first xDS snapshot,
/// a domain when asked); the body says which.
async fn readyz(State(admin): State<Admin>) -> (StatusCode, &'static str) {
    match admin.live.readiness() {
        Ok(_) if !admin.is_ready() => (StatusCode::SERVICE_UNAVAILABLE, "not ready\n"),
        Ok(text) => (StatusCode::OK, text),
        Err(text) => (StatusCode::SERVICE_UNAVAILABLE, text),
    }
}

async fn metrics(State(admin): State<Admin>) -> impl IntoResponse {
    admin.metrics.set_memory(admin.memory());
    admin.metrics.set_hot_key_shares(&admin.live.load().hot_keys);
    if let Some(approx) = admin.store.approx() {
        admin.metrics.set_approx(approx);
    }
    let name = admin.store.name();
    admin.metrics.export_store(name);
    if let Some(cert) = admin.redis_tls.as_ref().and_then(crate::store::redis::Tls::client_cert) {
        let now =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        admin.metrics.set_redis_client_cert(name, cert.not_after, i64::try_from(now).unwrap_or(i64::MAX));
    }
    admin.overrides.export();
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

/// `GET /v1/explain?domain=D&descriptor=k=v,k2=v2[&descriptor=…]`: `tollgate explain`'s
/// text against the serving config, after where that config comes from (files, or the xDS
/// server, acknowledged version and last rejection). Names no client: the caller gives the
/// descriptors, the answer shows only the config (as `/rlconfig` does).
async fn explain(State(admin): State<Admin>, uri: axum::http::Uri) -> axum::response::Response {
    let (domain, descriptors) = match query::parse_explain(uri.query()) {
        Ok(parsed) => parsed,
        Err(message) => return state::error(StatusCode::BAD_REQUEST, message),
    };
    let active = admin.live.load();
    let source = match admin.live.xds_state() {
        Some(xds) => xds.text(),
        None => format!("source: files {}\n", admin.live.path().display()),
    };
    let text = crate::operate::explain::explain(&active.snapshot, &domain, &descriptors).to_string();
    format!("{source}{text}").into_response()
}

async fn rlconfig(State(admin): State<Admin>, Query(format): Query<Format>) -> axum::response::Response {
    let active = admin.live.load();
    let store = store_state(&admin);
    // From xDS: the server, the acknowledged version and the last rejection come first.
    let xds = admin.live.xds_state();
    if format.format.as_deref() == Some("json") {
        let mut json = crate::operate::rlconfig::json(&active.snapshot, &store);
        if let Some(object) = json.as_object_mut() {
            let now = crate::sources::overrides::now_ms();
            let active: Vec<_> =
                admin.overrides.active().iter().map(|o| incident::describe(o, now, false)).collect();
            object.insert("overrides".into(), serde_json::Value::Array(active));
            object.insert("key_secret".into(), serde_json::Value::Bool(admin.key_secret.is_some()));
        }
        if let (Some(object), Some(xds)) = (json.as_object_mut(), &xds) {
            object.insert("source".into(), serde_json::json!({ "kind": "xds", "xds": xds }));
        }
        axum::Json(json).into_response()
    } else {
        let mut text = crate::operate::rlconfig::text(&active.snapshot, &store);
        if admin.key_secret.is_some() {
            text.push_str("key_secret: on (request values enter bucket keys keyed-hashed)\n");
        }
        let now = crate::sources::overrides::now_ms();
        for o in admin.overrides.active() {
            let left = o.expires_at_ms.saturating_sub(now).div_ceil(1000);
            text.push_str(&format!("override {} mode {} (ends in {left} s)\n", o.scope, o.mode.as_str()));
        }
        match xds {
            Some(xds) => format!("{}{text}", xds.text()).into_response(),
            None => text.into_response(),
        }
    }
}

fn set_breaker(admin: &Admin, breaker: Option<&crate::store::breaker::Breaker>) {
    if let Some(breaker) = breaker {
        admin.metrics.set_breaker(admin.store.name(), breaker.state() as i64, breaker.opened_total());
    }
}

fn store_state(admin: &Admin) -> crate::operate::rlconfig::StoreState {
    let mut state = store_kind(&admin.store);
    state.windows = admin.store.windows();
    if state.kind != "memory" {
        state.client_cert = admin.redis_tls.as_ref().map(|tls| tls.client.as_ref().and(tls.client_cert()));
    }
    state
}

fn store_kind(store: &Store) -> crate::operate::rlconfig::StoreState {
    match store {
        Store::Memory(memory) => {
            let stats = memory.stats();
            crate::operate::rlconfig::StoreState {
                kind: "memory",
                healthy: true,
                detail: format!("{} keys", stats.keys),
                client_cert: None,
                windows: None,
            }
        }
        Store::Redis(redis) => crate::operate::rlconfig::StoreState {
            kind: "redis",
            healthy: redis.client().is_healthy(),
            detail: redis.client().redacted_url(),
            client_cert: None,
            windows: None,
        },
        Store::Cluster(cluster) => crate::operate::rlconfig::StoreState {
            kind: "redis_cluster",
            healthy: cluster.client().is_healthy(),
            detail: cluster.client().redacted_nodes(),
            client_cert: None,
            windows: None,
        },
        Store::Sentinel(sentinel) => crate::operate::rlconfig::StoreState {
            kind: "redis_sentinel",
            healthy: sentinel.client().is_healthy(),
            detail: sentinel.client().description(),
            client_cert: None,
            windows: None,
        },
    }
}
