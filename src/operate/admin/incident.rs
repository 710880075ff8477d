//! `POST`, `GET` and `DELETE /v1/override`: the incident switch (`crate::sources::overrides`).
//!
//! `POST` takes `{"scope": "all" | "<domain>", "mode": "shadow" | "open", "ttl_seconds": N}`
//! (`ttl_seconds` from 1 to `MAX_TTL_SECONDS`, default an hour) and answers 200 with the
//! override. It is guarded as `/v1/reset` is: the admin token, or without one only with
//! `--admin-allow-unauthenticated-reset` (switching limits off must not be open to anyone
//! who reaches the port). `GET` lists the active overrides (token-gated as `/v1/usage`);
//! `DELETE ?scope=…` ends one early (guarded as `POST`). Every `POST` and `DELETE`, taken
//! or refused, writes one audit line (`audit`).

use std::net::SocketAddr;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::sources::overrides::{now_ms, Mode, Override, ALL, DEFAULT_TTL_SECONDS, MAX_TTL_SECONDS};
use crate::store::StoreError;

use super::audit;
use super::state::{error, Admin, Caller};

/// Largest `POST` body read.
const MAX_BODY: usize = 4_096;

/// The `POST` body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Wanted {
    scope: String,
    mode: Mode,
    ttl_seconds: Option<u64>,
}

/// An override as the endpoints answer it; who set it only where the caller showed the
/// token (`with_who`), never on an unauthenticated page.
pub fn describe(o: &Override, now_ms: u64, with_who: bool) -> Value {
    let mut described = json!({
        "scope": o.scope,
        "mode": o.mode.as_str(),
        "expires_at_unix": o.expires_at_ms as f64 / 1000.0,
        "expires_in_seconds": o.expires_at_ms.saturating_sub(now_ms).div_ceil(1000),
        "set_at_unix": o.set_at_ms as f64 / 1000.0,
    });
    if with_who {
        described["set_by"] = json!(o.set_by);
    }
    described
}

fn caller_of(request: &Request) -> Caller {
    let client = request.extensions().get::<ConnectInfo<SocketAddr>>().map(|c| c.0);
    Caller { client, token: None }
}

/// Where the fleet stands after a change: `shared` (every instance honours it within
/// `VISIBLE_WITHIN`), `local` (the memory store: this instance), or `pending` (Redis did
/// not take it: this instance honours it and retries).
fn sharing(stored: &Result<bool, StoreError>) -> &'static str {
    match stored {
        Ok(true) => "shared",
        Ok(false) => "local",
        Err(_) => "pending",
    }
}

/// `POST /v1/override`.
pub async fn set(State(admin): State<Admin>, request: Request) -> Response {
    let mut caller = caller_of(&request);
    if let Err(refused) = admin.check_reset(request.headers(), &mut caller) {
        audit::override_refused(&caller, None, refused.status);
        return refused.into_response();
    }
    let body = match axum::body::to_bytes(request.into_body(), MAX_BODY).await {
        Ok(body) => body,
        Err(_) => {
            audit::override_refused(&caller, None, StatusCode::PAYLOAD_TOO_LARGE);
            return error(StatusCode::PAYLOAD_TOO_LARGE, format!("the body is over {MAX_BODY} bytes"));
        }
    };
    let wanted: Wanted = match serde_json::from_slice(&body) {
        Ok(wanted) => wanted,
        Err(e) => {
            audit::override_refused(&caller, None, StatusCode::BAD_REQUEST);
            return error(
                StatusCode::BAD_REQUEST,
                format!(
                    "{e}: expected {{\"scope\": \"all\" | \"<domain>\", \"mode\": \"shadow\" | \"open\", \
                     \"ttl_seconds\": 1..{MAX_TTL_SECONDS}}}"
                ),
            );
        }
    };
    let ttl = wanted.ttl_seconds.unwrap_or(DEFAULT_TTL_SECONDS);
    if !(1..=MAX_TTL_SECONDS).contains(&ttl) {
        audit::override_refused(&caller, Some(&wanted.scope), StatusCode::BAD_REQUEST);
        return error(
            StatusCode::BAD_REQUEST,
            format!("ttl_seconds {ttl} is outside 1..={MAX_TTL_SECONDS} (an override ends by itself within a day)"),
        );
    }
    if wanted.scope != ALL && admin.live.load().snapshot.domain(&wanted.scope).is_none() {
        audit::override_refused(&caller, Some(&wanted.scope), StatusCode::NOT_FOUND);
        return error(
            StatusCode::NOT_FOUND,
            format!("unknown domain {:?} (the scope is \"all\" or a configured domain)", wanted.scope),
        );
    }
    let now = now_ms();
    let set = Override {
        scope: wanted.scope,
        mode: wanted.mode,
        expires_at_ms: now + ttl * 1000,
        set_at_ms: now,
        set_by: audit::who(&caller),
    };
    let stored = admin.overrides.set(&admin.store, set.clone()).await;
    audit::override_set(&caller, &set, ttl, sharing(&stored));
    let mut answer = describe(&set, now, true);
    answer["ttl_seconds"] = json!(ttl);
    answer["fleet"] = json!(sharing(&stored));
    if let Err(e) = &stored {
        answer["warning"] = json!(format!(
            "Redis did not take the override ({e}): this instance honours it and retries every \
             sync; other instances do not see it yet"
        ));
    }
    Json(answer).into_response()
}

/// `GET /v1/override`: the active overrides, soonest to end first.
pub async fn list(State(admin): State<Admin>, request: Request) -> Response {
    if let Err(refused) = admin.check_token(request.headers()) {
        return refused.into_response();
    }
    let now = now_ms();
    let active: Vec<Value> = admin.overrides.active().iter().map(|o| describe(o, now, true)).collect();
    let fleet = if admin.store.is_shared() { "shared" } else { "local" };
    Json(json!({ "overrides": active, "fleet": fleet })).into_response()
}

#[derive(Debug, Deserialize)]
struct EndQuery {
    scope: Option<String>,
}

/// `DELETE /v1/override?scope=…`: ends that scope's override now.
pub async fn end(State(admin): State<Admin>, request: Request) -> Response {
    let mut caller = caller_of(&request);
    if let Err(refused) = admin.check_reset(request.headers(), &mut caller) {
        audit::override_refused(&caller, None, refused.status);
        return refused.into_response();
    }
    let query = request.uri().query().unwrap_or_default();
    let scope = match serde_urlencoded_scope(query) {
        Some(scope) => scope,
        None => {
            audit::override_refused(&caller, None, StatusCode::BAD_REQUEST);
            return error(StatusCode::BAD_REQUEST, "missing ?scope=all or ?scope=<domain>");
        }
    };
    let (ended, stored) = admin.overrides.end(&admin.store, &scope).await;
    audit::override_ended(&caller, &scope, ended.as_ref(), sharing(&stored));
    let now = now_ms();
    match ended {
        Some(o) => {
            let mut answer = describe(&o, now, true);
            answer["ended"] = json!(true);
            answer["fleet"] = json!(sharing(&stored));
            Json(answer).into_response()
        }
        None => error(StatusCode::NOT_FOUND, format!("no active override of scope {scope:?}")),
    }
}

/// `scope` of a query string, percent-decoded.
fn serde_urlencoded_scope(query: &str) -> Option<String> {
    let parsed: EndQuery = axum::extract::Query::try_from_uri(&format!("/?{query}").parse().ok()?).ok()?.0;
    parsed.scope.filter(|s| !s.is_empty())
}
