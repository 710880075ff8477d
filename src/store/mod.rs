//! Where buckets live: the `Store` seam with its two implementations.
//!
//! `memory` (embedded default: sharded map, capped) and `redis` (Lua scripts over a pipeline).
//! Both take a whole request's charges at once and answer one result per charge, in order,
//! within a deadline. This module knows nothing of gRPC or of policies: it receives bucket
//! keys and algorithm parameters already computed.

pub mod key;
pub mod memory;
pub mod redis;

use tokio::time::Instant;

use crate::algorithm::{Decision, Hits, Params};

pub use self::memory::MemoryStore;
pub use self::redis::{RedisSettings, RedisStore};

/// One bucket to charge: built by the service from a matched rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Charge {
    /// The bucket key (see `key`), unique per bucket identity.
    pub key: String,
    pub params: Params,
    pub hits: Hits,
}

/// Why a charge got no decision. Every variant is answered by the domain's failure policy.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The deadline passed before Redis answered (the script may still have run).
    #[error("store deadline exceeded")]
    Timeout,
    /// No connection could be had, or the connection failed.
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// Redis answered this charge with an error.
    #[error("store error: {0}")]
    Server(String),
}

impl StoreError {
    /// A short, bounded label for metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            StoreError::Timeout => "timeout",
            StoreError::Unavailable(_) => "unavailable",
            StoreError::Server(_) => "server_error",
        }
    }
}

/// The store a server runs with. An enum: there are exactly two, chosen at startup.
#[derive(Debug)]
pub enum Store {
    Memory(MemoryStore),
    Redis(RedisStore),
}

impl Store {
    /// Charges every bucket of one request together and answers in the same order.
    /// Never waits past `deadline`; a failure is a `StoreError` per charge, never a panic.
    pub async fn charge(&self, batch: &[Charge], deadline: Instant) -> Vec<Result<Decision, StoreError>> {
        if batch.is_empty() {
            return Vec::new();
        }
        match self {
            Store::Memory(m) => m.charge(batch).into_iter().map(Ok).collect(),
            Store::Redis(r) => r.charge(batch, deadline).await,
        }
    }

    /// `memory` or `redis`: the `store` label of metrics.
    pub fn name(&self) -> &'static str {
        match self {
            Store::Memory(_) => "memory",
            Store::Redis(_) => "redis",
        }
    }
}
