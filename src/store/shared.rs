//! State an operator shares with the whole fleet through the store: one command on one
//! key, beside the charges (`crate::overrides` keeps the incident switch this way). No
//! guard is consulted nor taught (the breaker, the over-limit cache): this is an operator's
//! call, not traffic. The memory store shares nothing: its state is this process's.

use tokio::time::Instant;

use super::charge::StoreError;
use super::remote::Reset;
use super::Store;

impl Store {
    /// Whether other instances see what `command` writes (every Redis topology).
    pub fn is_shared(&self) -> bool {
        !matches!(self, Store::Memory(_))
    }

    /// Sends `command`, whose only key is `key`, by `deadline`. `None` on the memory store.
    pub async fn command(
        &self,
        key: &str,
        command: ::redis::Cmd,
        deadline: Instant,
    ) -> Option<Result<::redis::Value, StoreError>> {
        Some(match self {
            Store::Memory(_) => return None,
            Store::Redis(redis) => redis.client().command(key, command, deadline).await,
            Store::Sentinel(sentinel) => sentinel.client().command(key, command, deadline).await,
            Store::Cluster(cluster) => cluster.client().command(key, command, deadline).await,
        })
    }
}
