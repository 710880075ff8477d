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
use super::scripts::{
    APPROX_LUA, BATCH_LUA, CALENDAR_LUA, FIXED_LUA, GCRA_LUA, GIVE_BACK_LUA, JOINT_LUA, RESERVE_LUA,
    SLIDING_LUA,
};

/// Every script a request or approximate mode's sync calls by SHA.
pub fn scripts() -> [&'static str; 9] {
    [
        GCRA_LUA,
        SLIDING_LUA,
        FIXED_LUA,
        CALENDAR_LUA,
        JOINT_LUA,
        BATCH_LUA,
        APPROX_LUA.source(),
        RESERVE_LUA,
        GIVE_BACK_LUA.source(),
    ]
}

/// Starts every connection of `link` and loads [`scripts`] on its server, by `deadline`.
pub async fn prepare_link(link: &Link, deadline: Instant) -> Result<(), StoreError> {
    link.warm();
    let sources = scripts();
    let mut pipe = Pipeline::with_capacity(sources.len());
    for source in sources {
        pipe.add_command(redis::cmd("SCRIPT").arg("LOAD").arg(source).clone());
    }
    let replies = link.send(pipe, sources.len(), deadline).await.map_err(StoreError::from)?;
    match replies.iter().find(|v| !matches!(v, Value::BulkString(_) | Value::SimpleString(_))) {
        None => Ok(()),
        Some(other) => Err(StoreError::Unavailable(format!("SCRIPT LOAD answered {other:?}"))),
    }
}
