//! What every admin endpoint shares: the server's state (`Admin`: readiness, the serving
//! config, the store, metrics, the token), who called (`Caller`, for the audit line), the
//! token checks, and how a refused request answers (`Refusal`, `error`). Below the router
//! (`admin`) and the endpoints that use it (`usage`, `hotkeys`, `audit`).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use crate::sources::overrides::Overrides;
use crate::sources::serving::Live;
use crate::store::key::KeySecret;
use crate::store::{MemoryStore, Store};
use crate::telemetry::hotkeys::ViewKey;
use crate::telemetry::metrics::Metrics;

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
    /// Set when the listener is bound beyond loopback and no token is configured: anyone who
    /// reaches the port reads it, so no request value shows there but keyed-hashed with
    /// this key (`with_listener`).
    pub(super) open: Option<Arc<ViewKey>>,
    /// The RLQS streams, for the status view and `/v1/usage` (`with_quota`).
    pub(super) quota: Option<Arc<crate::service::rlqs::Streams>>,
    /// The Redis TLS files: `/rlconfig` and the metrics show the client certificate.
    pub(super) redis_tls: Option<crate::store::redis::Tls>,
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
            open: None,
            quota: None,
            redis_tls: None,
        }
    }

    /// With the RLQS streams of this instance: the status view lists their buckets and
    /// `/v1/usage` their holders.
    pub fn with_quota(mut self, streams: Arc<crate::service::rlqs::Streams>) -> Admin {
        self.quota = Some(streams);
        self
    }

    /// With the Redis TLS files (a Redis store): `/rlconfig` says whether a client
    /// certificate is presented, whose and until when; a metric counts its days left.
    pub fn with_redis_tls(mut self, tls: crate::store::redis::Tls) -> Admin {
        self.redis_tls = Some(tls);
        self
    }

    /// With the address the admin listener is bound to: beyond loopback (every interface,
    /// as peer mode binds it, or any other address) and without an admin token, request
    /// values are keyed-hashed with a per-process key on every view and `/v1/usage` is
    /// refused (`is_open`). On loopback, or with a token, nothing changes.
    pub fn with_listener(mut self, bound: SocketAddr) -> Admin {
        let open = !bound.ip().is_loopback() && self.token.is_none();
        self.open = open.then(|| Arc::new(ViewKey::random()));
        self
    }

    /// Whether the port is open beyond loopback without a token (see `with_listener`).
    pub fn is_open(&self) -> bool {
        self.open.is_some()
    }

    /// Logs, once at startup, how an open port shows request values (nothing when not open).
    pub fn log_exposure(&self, bound: SocketAddr) {
        if self.is_open() {
            tracing::warn!(
                admin_addr = %bound,
                "the admin port is reachable beyond loopback without --admin-token-file: request values on \
                 it (/v1/hotkeys, /v1/status, the status page) are shown only keyed-hashed with a per-process \
                 key (value_hmac), and /v1/usage is refused; give --admin-token-file to see them"
            );
        }
    }

    /// How `/v1/hotkeys` shows request values to a caller it admits.
    pub(super) fn hot_key_values(&self) -> crate::telemetry::hotkeys::Values<'_> {
        match &self.open {
            Some(key) => crate::telemetry::hotkeys::Values::Keyed(key),
            None => crate::telemetry::hotkeys::Values::AsConfigured,
        }
    }

    /// `Ok` unless the port is open (`with_listener`): `/v1/usage` answers for any value a
    /// caller names, which tells whether that value (an address, a user) is a client.
    pub(super) fn check_not_open(&self) -> Result<(), Refusal> {
        if self.is_open() {
            return Err(Refusal::new(
                StatusCode::FORBIDDEN,
                "the admin port is reachable beyond loopback without an admin token: this endpoint needs \
                 --admin-token-file (or an admin address on loopback)",
            ));
        }
        Ok(())
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
    /// only a request that carries it sees them; without one, everyone, as before on
    /// loopback, and keyed-hashed on an open port.
    pub(super) fn status(&self, headers: &HeaderMap) -> crate::operate::status::Status {
        let hot = match (&self.open, self.authorized(headers)) {
            (Some(key), _) => crate::operate::status::HotBuckets::Keyed(key),
            (None, true) => crate::operate::status::HotBuckets::Shown,
            (None, false) => crate::operate::status::HotBuckets::Hidden,
        };
        let mut status = crate::operate::status::Status::gather(&self.live, &self.store, &self.metrics, hot)
            .with_overrides(&self.overrides);
        if let Some(streams) = &self.quota {
            status.rlqs = crate::operate::status::RlqsStatus::gather(streams, hot.values());
        }
        status
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
