//! Where buckets live: the `Store` seam with its two implementations.
//!
//! `memory` (embedded default: sharded map, capped) and `redis` (Lua scripts over a pipeline).
//! Both take a whole request's charges at once and answer one result per charge, in order,
//! within a deadline. This module knows nothing of gRPC or of policies: it receives bucket
//! keys and algorithm parameters already computed.
//!
//! Every Redis topology is a client (`redis`, `cluster`, `sentinel`) behind `guarded`:
//! the over-limit cache (`overlimit`: buckets Redis has just denied are answered locally
//! until they can pass, so a flood from one abusive key does not load Redis), load
//! shedding and the circuit breaker (`breaker`).

pub mod breaker;
pub mod guarded;
pub mod key;
pub mod memory;
pub mod overlimit;
pub mod redis;
pub(crate) mod scripts;

pub use self::redis::{cluster, sentinel};

use tokio::time::Instant;

use crate::algorithm::{Decision, Hits, Params};

pub use self::guarded::{Guarded, Remote};
pub use self::memory::MemoryStore;
pub use self::overlimit::OverLimitCache;
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
    /// The circuit breaker is open: Redis was not called.
    #[error("store circuit breaker open")]
    CircuitOpen,
    /// The connection already has `--redis-max-inflight` commands outstanding: Redis was
    /// not called (a backlog behind a stalled server would charge for answered requests).
    #[error("store overloaded: too many commands in flight")]
    Overloaded,
}

impl StoreError {
    /// A short, bounded label for metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            StoreError::Timeout => "timeout",
            StoreError::Unavailable(_) => "unavailable",
            StoreError::Server(_) => "server_error",
            StoreError::CircuitOpen => "circuit_open",
            StoreError::Overloaded => "overloaded",
        }
    }

    /// The store could not be reached or did not keep up (not an error a script answered):
    /// what the circuit breaker and health reporting count as failures.
    pub fn is_unreachable(&self) -> bool {
        matches!(self, StoreError::Timeout | StoreError::Unavailable(_) | StoreError::Overloaded)
    }
}

/// The store a server runs with. An enum: there are exactly two, chosen at startup.
#[derive(Debug)]
pub enum Store {
    Memory(MemoryStore),
    /// One Redis node (`redis`), with the over-limit cache and the circuit breaker.
    Redis(Guarded<redis::RedisStore>),
    /// Redis Cluster: one command per charge, routed by slot (`cluster`); over-limit cache,
    /// no breaker (one breaker would stop the healthy masters with the failing one).
    Cluster(Guarded<cluster::ClusterStore>),
    /// A master found through Redis Sentinel (`sentinel`), with cache and breaker.
    Sentinel(Guarded<sentinel::SentinelStore>),
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
            Store::Cluster(c) => c.charge(batch, deadline).await,
            Store::Sentinel(s) => s.charge(batch, deadline).await,
        }
    }

    /// `memory`, `redis`, `redis_cluster` or `redis_sentinel`: the `store` label of metrics.
    pub fn name(&self) -> &'static str {
        match self {
            Store::Memory(_) => "memory",
            Store::Redis(_) => "redis",
            Store::Cluster(_) => "redis_cluster",
            Store::Sentinel(_) => "redis_sentinel",
        }
    }
}
