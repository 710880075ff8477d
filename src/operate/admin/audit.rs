//! The audit log of resets and incident overrides: one line per `POST /v1/reset`, `POST`
//! or `DELETE /v1/override`, accepted or refused, on the `tollgate::audit` target.
//!
//! Who: the client's socket address and the token's id (`AdminToken::id`: 8 hex digits of
//! a keyed hash of the token, the key random per process; never the token, nor a bare hash
//! of it), `none` without a token, `invalid` for a wrong one. What: the domain and the descriptor, escaped like `explain` shows them (`escape`),
//! and the number of buckets. The line is `info` when the reset ran and `warn` when it was
//! refused or failed, e.g.
//! `INFO tollgate::audit: admin reset client=127.0.0.1:51234 token="3f2a9c1e" domain="api"
//! descriptor="user=alice" buckets=2 result="reset"`.

use axum::http::StatusCode;

use crate::sources::overrides::Override;
use crate::store::StoreError;
use crate::telemetry::escape::escape;

use super::query::Target;
use super::state::Caller;

/// The audit line of a reset that ran.
pub fn reset(caller: &Caller, target: &Target, buckets: usize) {
    tracing::info!(
        target: "tollgate::audit",
        client = %client(caller),
        token = caller.token.as_deref().unwrap_or("none"),
        domain = ?escape(&target.domain),
        descriptor = ?descriptor(target),
        buckets,
        result = "reset",
        "admin reset"
    );
}

/// The audit line of a reset refused with `status` (`target`: what it asked for, when
/// the request could be read).
pub fn refused(caller: &Caller, target: Option<&Target>, status: StatusCode) {
    tracing::warn!(
        target: "tollgate::audit",
        client = %client(caller),
        token = caller.token.as_deref().unwrap_or("none"),
        domain = ?target.map(|t| escape(&t.domain).into_owned()).unwrap_or_default(),
        descriptor = ?target.map(descriptor).unwrap_or_default(),
        buckets = 0,
        result = "refused",
        status = status.as_u16(),
        "admin reset"
    );
}

/// The audit line of a reset the store failed.
pub fn failed(caller: &Caller, target: &Target, buckets: usize, error: &StoreError) {
    tracing::warn!(
        target: "tollgate::audit",
        client = %client(caller),
        token = caller.token.as_deref().unwrap_or("none"),
        domain = ?escape(&target.domain),
        descriptor = ?descriptor(target),
        buckets,
        result = "failed",
        %error,
        "admin reset"
    );
}

fn client(caller: &Caller) -> String {
    caller.client.map_or_else(|| "unknown".to_string(), |a| a.to_string())
}

/// `k=v,k2=v2`, each key and value escaped.
fn descriptor(target: &Target) -> String {
    let parts: Vec<String> =
        target.entries.iter().map(|(k, v)| format!("{}={}", escape(k), escape(v))).collect();
    parts.join(",")
}

/// Who called, as an override records it: `client=<addr> token=<id>`.
pub fn who(caller: &Caller) -> String {
    format!("client={} token={}", client(caller), caller.token.as_deref().unwrap_or("none"))
}

/// The audit line of an override set: who, what (scope, mode), when (now), until when,
/// and whether the fleet has it (`shared`, `local`, `pending`).
pub fn override_set(caller: &Caller, set: &Override, ttl_seconds: u64, fleet: &str) {
    tracing::info!(
        target: "tollgate::audit",
        client = %client(caller),
        token = caller.token.as_deref().unwrap_or("none"),
        scope = ?escape(set.scope.as_bytes()),
        mode = set.mode.as_str(),
        ttl_seconds,
        expires_at_unix_ms = set.expires_at_ms,
        fleet,
        result = "set",
        "admin override"
    );
}

/// The audit line of an override ended early (`ended`: the one that was active, if any).
pub fn override_ended(caller: &Caller, scope: &str, ended: Option<&Override>, fleet: &str) {
    tracing::info!(
        target: "tollgate::audit",
        client = %client(caller),
        token = caller.token.as_deref().unwrap_or("none"),
        scope = ?escape(scope.as_bytes()),
        mode = ended.map_or("none", |o| o.mode.as_str()),
        fleet,
        result = if ended.is_some() { "ended" } else { "none_active" },
        "admin override"
    );
}

/// The audit line of an override request refused with `status`.
pub fn override_refused(caller: &Caller, scope: Option<&str>, status: StatusCode) {
    tracing::warn!(
        target: "tollgate::audit",
        client = %client(caller),
        token = caller.token.as_deref().unwrap_or("none"),
        scope = ?scope.map(|s| escape(s.as_bytes()).into_owned()).unwrap_or_default(),
        result = "refused",
        status = status.as_u16(),
        "admin override"
    );
}
