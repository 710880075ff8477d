//! What a Redis reply or client error means to the store, whoever sent the command: a
//! script's `NOSCRIPT`, a demoted master's `READONLY`, a transport failure, a `DEL`'s
//! answer.
//!
//! Owns only that reading. It sits below both the connection lifecycle (`link`, which takes
//! a `READONLY` connection out and classifies the errors of a call) and the scripts
//! (`redis::scripts`, which re-sends `NOSCRIPT` entries), so neither imports the other for
//! it. It sends nothing and holds no state.

use redis::{RedisError, ServerErrorKind, Value};

use super::super::charge::StoreError;

/// Whether a reply is `NOSCRIPT` (the node does not have the script cached).
pub fn is_noscript(value: &Value) -> bool {
    matches!(value, Value::ServerError(e) if e.kind() == Some(ServerErrorKind::NoScript))
}

/// Whether a reply is `READONLY` (the node is a replica now: a failover happened).
pub fn is_readonly(value: &Value) -> bool {
    matches!(value, Value::ServerError(e) if e.kind() == Some(ServerErrorKind::ReadOnly))
}

/// A client-side error as a store error: transport problems are `Unavailable`.
pub fn classify(e: &RedisError) -> StoreError {
    if e.is_io_error() || e.is_connection_dropped() || e.is_timeout() || e.is_connection_refusal() {
        StoreError::Unavailable(e.to_string())
    } else {
        StoreError::Server(e.to_string())
    }
}

/// The reply of a `DEL` (an operator's reset): a count, or the server's error.
pub fn deleted(value: Value) -> Result<(), StoreError> {
    match value {
        Value::Int(_) => Ok(()),
        Value::ServerError(e) => Err(StoreError::Server(format!("DEL: {e:?}"))),
        other => Err(StoreError::Server(format!("DEL: unexpected reply {other:?}"))),
    }
}
