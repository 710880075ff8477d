//! `GET /v1/hotkeys?domain=D&top=N`: a domain's busiest buckets over the last minute, as
//! this instance saw them (`crate::telemetry::hotkeys::view`).
//!
//! Guarded by the admin token like `/v1/usage` (values of rules that show them are request
//! bytes); without a token on a port bound beyond loopback, every value keyed-hashed
//! (`Admin::hot_key_values`). `top` defaults to [`DEFAULT_TOP`] and is cut to [`MAX_TOP`]; an unknown domain
//! is a 404 with a JSON error, a malformed query a 400.

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;

use crate::telemetry::escape::escape;
use crate::telemetry::hotkeys::{self, DEFAULT_TOP, MAX_TOP};

use super::state::{error, Admin};

/// The query string, read as text (numbers are checked here, to answer in JSON).
#[derive(Debug, Deserialize)]
pub struct HotKeysQuery {
    domain: Option<String>,
    top: Option<String>,
}

/// The handler.
pub async fn hotkeys(
    State(admin): State<Admin>,
    headers: HeaderMap,
    query: Result<Query<HotKeysQuery>, QueryRejection>,
) -> Response {
    if let Err(refused) = admin.check_token(&headers) {
        return refused.into_response();
    }
    let Ok(Query(query)) = query else {
        return error(StatusCode::BAD_REQUEST, "malformed query: expected domain=D&top=N");
    };
    let Some(name) = query.domain else {
        return error(StatusCode::BAD_REQUEST, "the query needs domain=<domain>");
    };
    let top = match query.top.as_deref().map(str::parse::<usize>) {
        None => DEFAULT_TOP,
        Some(Ok(top)) => top.min(MAX_TOP),
        Some(Err(_)) => return error(StatusCode::BAD_REQUEST, "top must be a whole number"),
    };
    let active = admin.live.load();
    let (Some(domain), Some(sketch)) = (active.snapshot.domain(&name), active.hot_keys.domain(&name)) else {
        return error(StatusCode::NOT_FOUND, format!("unknown domain {:?}", escape(name.as_bytes())));
    };
    let now = admin.metrics.history().now();
    Json(hotkeys::view(domain, sketch, now, top, admin.hot_key_values(), |key| {
        hotkeys::is_leased(&admin.store, key)
    }))
    .into_response()
}
