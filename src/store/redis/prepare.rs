//! Before an instance reports ready: its Redis connections made and every script it calls
//! loaded on each server it will call (one node, the Sentinel master, every cluster
//! master), so that the first request a load balancer sends pays neither a connect nor a
//! `NOSCRIPT` round trip inside its store timeout (10 ms by default). Without this, an
//! instance started into load answered its first requests by its `failure_mode`, and on a
//! cluster the first charge on each master did (a connect, then `NOSCRIPT`, then `EVAL`).
//!
//! Best effort, bounded by the caller's deadline: Redis not answering is not an error at
//! startup (the store connects when it can, as before); the caller logs what was done.

use redis::{Pipeline, Value};
use tokio::time::Instant;

use super::super::charge::StoreError;
use super::link::Link;
use super::scripts::{APPROX_LUA, GIVE_BACK_LUA, WITHOUT_WINDOW_KEYS, WITH_WINDOW_KEYS};

/// Every script a request or approximate mode's sync calls by SHA: the request scripts
/// built without and with window keys (`--redis-windows` chooses; both are loaded, so that
/// a store's choice never meets `NOSCRIPT`).
pub fn scripts() -> Vec<&'static str> {
    let mut all = Vec::with_capacity(16);
    for set in [WITHOUT_WINDOW_KEYS, WITH_WINDOW_KEYS] {
        all.extend([set.gcra, set.sliding, set.fixed, set.calendar, set.joint, set.batch, set.reserve]);
    }
    all.extend([APPROX_LUA.source(), GIVE_BACK_LUA.source()]);
    all
}

/// Starts every connection of `link` and loads [`scripts`] on its server, by `deadline`.
pub async fn prepare_link(link: &Link, deadline: Instant) -> Result<(), StoreError> {
    link.warm();
    let sources = scripts();
    let mut pipe = Pipeline::with_capacity(sources.len());
    for source in &sources {
        pipe.add_command(redis::cmd("SCRIPT").arg("LOAD").arg(source).clone());
    }
    let replies = link.send(pipe, sources.len(), deadline).await.map_err(StoreError::from)?;
    match replies.iter().find(|v| !matches!(v, Value::BulkString(_) | Value::SimpleString(_))) {
        None => Ok(()),
        Some(other) => Err(StoreError::Unavailable(format!("SCRIPT LOAD answered {other:?}"))),
    }
}
