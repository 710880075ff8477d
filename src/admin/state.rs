//! What every admin endpoint shares: the server's state (`Admin`: readiness, the serving
//! config, the store, metrics, the token), who called (`Caller`, for the audit line), the
//! token checks, and how a refused request answers (`Refusal`, `error`). Below the router
//! (`admin`) and the endpoints that use it (`usage`, `hotkeys`, `audit`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use crate::live::Live;
use crate::metrics::Metrics;
use crate::overrides::Overrides;
use crate::store::key::KeySecret;
use crate::store::{MemoryStore, Store};

use super::token::AdminToken;

/// Shared state of the admin endpoints.
#[derive(Debug, Clone)]
pub struct Admin {
    pub(super) ready: Arc<AtomicBool>,
    pub(super) live: Arc<Live>,
    pub(super) store: Arc<Store>,
    /// The in-process limiter of `failure_mode: local` domains (`RateLimiter::local_store`).
    pub(super) local: Arc<MemoryStore>,
    pub(super) metrics: Arc<Metrics>,
    pub(super) token: Option<Arc<AdminToken>>,
    /// `--redis-key-prefix`: usage and reset compute the keys the request path charges.
    pub(super) key_prefix: Arc<str>,
    /// `--admin-allow-unauthenticated-reset`: reset (and override) without a configured token.
    pub(super) allow_unauthenticated_reset: bool,
    /// The incident switch (`/v1/override`), shared with the request path.
    pub(super) overrides: Arc<Overrides>,
    /// `--key-secret-file`: usage and reset key the raw descriptor as the request path does.
    pub(super) key_secret: Option<Arc<KeySecret>>,
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
        let overrides = Arc::new(Overrides::new("", metrics.clone()));
        Admin {
            ready: Arc::new(AtomicBool::new(false)),
            live,
            store,
            local,
            metrics,
            token,
            key_prefix: Arc::from(""),
            allow_unauthenticated_reset: false,
            overrides,
            key_secret: None,
        }
    }

    /// With the request path's `--key-secret-file` secret (usage and reset key the
    /// descriptor they are given as requests are keyed).
    pub fn with_key_secret(mut self, secret: Option<KeySecret>) -> Admin {
        self.key_secret = secret.map(Arc::new);
        self
    }

    /// With the incident switch the request path honours (`RateLimiter::overrides`).
    pub fn with_overrides(mut self, overrides: Arc<Overrides>) -> Admin {
        self.overrides = overrides;
        self
    }

    /// With the server's `--redis-key-prefix` (usage and reset read the buckets the request
    /// path charges) and `--admin-allow-unauthenticated-reset`.
    pub fn with_buckets(mut self, key_prefix: &str, allow_unauthenticated_reset: bool) -> Admin {
        self.key_prefix = Arc::from(key_prefix);
        self.allow_unauthenticated_reset = allow_unauthenticated_reset;
        self
    }

    /// `Ok` when `headers` may use a guarded endpoint, else the 401 refusal.
    pub(super) fn check_token(&self, headers: &HeaderMap) -> Result<(), Refusal> {
        if self.authorized(headers) {
            return Ok(());
        }
        let message = "this endpoint requires Authorization: Bearer <admin token>";
        Err(Refusal::new(StatusCode::UNAUTHORIZED, message))
    }

    /// `Ok` when `headers` may reset (the token, or no token and the operator allowed it);
    /// else the 401 or 403 answer. Fills in the caller's token id either way.
    pub(super) fn check_reset(&self, headers: &HeaderMap, caller: &mut Caller) -> Result<(), Refusal> {
        let Some(token) = &self.token else {
            if self.allow_unauthenticated_reset {
                return Ok(());
            }
            return Err(Refusal::new(
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
    pub(super) fn authorized(&self, headers: &HeaderMap) -> bool {
        let Some(token) = &self.token else { return true };
        headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .is_some_and(|presented| token.matches(presented.trim()))
    }

    /// The status page's view: the busiest buckets name buckets, so with a token configured
    /// only a request that carries it sees them (without one, everyone, as before).
    pub(super) fn status(&self, headers: &HeaderMap) -> crate::status::Status {
        let hot = if self.authorized(headers) {
            crate::status::HotBuckets::Shown
        } else {
            crate::status::HotBuckets::Hidden
        };
        crate::status::Status::gather(&self.live, &self.store, &self.metrics, hot)
            .with_overrides(&self.overrides)
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
}

/// A JSON error answer: `{"error": message}`.
pub fn error(status: StatusCode, message: impl Into<String>) -> Response {
    (status, Json(json!({ "error": message.into() }))).into_response()
}

/// A request refused before any store work: its status and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub status: StatusCode,
    pub message: String,
}

impl Refusal {
    pub fn new(status: StatusCode, message: impl Into<String>) -> Refusal {
        Refusal { status, message: message.into() }
    }
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let mut response = error(self.status, self.message);
        if self.status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}
