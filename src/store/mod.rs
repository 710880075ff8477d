//! Where buckets live: the `Store` seam with its two implementations.
//!
//! `memory` (embedded default: sharded map, capped) and `redis` (Lua scripts over a pipeline).
//! Both take a whole request's charges at once and answer one result per charge, in order,
//! within a deadline. This module knows nothing of gRPC or of policies: it receives bucket
//! keys and algorithm parameters already computed.
//!
//! `RedisStore` here is the Redis client (`redis::RedisStore`) fronted by the over-limit
//! cache (`overlimit`): buckets Redis has just denied are answered locally until they can
//! pass, so a flood from one abusive key does not load Redis.

pub mod breaker;
pub mod cluster;
pub(crate) mod kept;
pub mod key;
pub mod memory;
pub mod overlimit;
pub mod redis;
pub(crate) mod scripts;
pub mod sentinel;

use std::fmt;

use tokio::time::Instant;

use crate::algorithm::{Decision, Hits, Params};

pub use self::memory::MemoryStore;
pub use self::overlimit::OverLimitCache;
pub use self::redis::RedisSettings;

/// Buckets the over-limit cache of one Redis store may hold (≈ 100 bytes each).
pub const OVER_LIMIT_CACHE_ENTRIES: usize = 100_000;

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
}

impl StoreError {
    /// A short, bounded label for metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            StoreError::Timeout => "timeout",
            StoreError::Unavailable(_) => "unavailable",
            StoreError::Server(_) => "server_error",
            StoreError::CircuitOpen => "circuit_open",
        }
    }
}

/// The store a server runs with. An enum: there are exactly two, chosen at startup.
#[derive(Debug)]
pub enum Store {
    Memory(MemoryStore),
    Redis(RedisStore),
    /// Redis Cluster: one command per charge, routed by slot (`cluster`).
    Cluster(cluster::ClusterStore),
    /// A master found through Redis Sentinel (`sentinel`).
    Sentinel(sentinel::SentinelStore),
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

/// The Redis store as the service uses it: the Redis client behind the over-limit cache.
pub struct RedisStore {
    redis: self::redis::RedisStore,
    over_limit: OverLimitCache,
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("redis", &self.redis)
            .field("over_limit_entries", &self.over_limit.len())
            .finish()
    }
}

impl RedisStore {
    /// Builds the store. Connects lazily: Redis being down at startup is not an error.
    pub fn new(settings: &RedisSettings) -> Result<RedisStore, StoreError> {
        Ok(RedisStore {
            redis: self::redis::RedisStore::new(settings)?,
            over_limit: OverLimitCache::new(OVER_LIMIT_CACHE_ENTRIES),
        })
    }

    /// The Redis URL without its password.
    pub fn redacted_url(&self) -> String {
        self.redis.redacted_url()
    }

    /// Whether the last call reached Redis.
    pub fn is_healthy(&self) -> bool {
        self.redis.is_healthy()
    }

    /// The circuit breaker in front of Redis (for metrics).
    pub fn breaker(&self) -> &breaker::Breaker {
        self.redis.breaker()
    }

    /// The over-limit cache (for metrics and tests).
    pub fn over_limit(&self) -> &OverLimitCache {
        &self.over_limit
    }

    /// Charges the batch: charges of buckets known to be denied are answered locally, the
    /// rest go to Redis in one pipeline (one round trip) by `deadline`.
    pub async fn charge(&self, batch: &[Charge], deadline: Instant) -> Vec<Result<Decision, StoreError>> {
        if self.over_limit.is_empty() {
            return self.remote(batch, deadline).await;
        }
        let now = Instant::now();
        let mut results: Vec<Option<Result<Decision, StoreError>>> = Vec::with_capacity(batch.len());
        for charge in batch {
            if let Hits::Refund(_) = charge.hits {
                self.over_limit.forget(&charge.key);
            }
            results.push(self.over_limit.answer(charge, now).map(Ok));
        }
        let missing: Vec<usize> = (0..batch.len()).filter(|&i| results[i].is_none()).collect();
        if missing.len() == batch.len() {
            return self.remote(batch, deadline).await;
        }
        if !missing.is_empty() {
            let remote: Vec<Charge> = missing.iter().map(|&i| batch[i].clone()).collect();
            for (i, result) in missing.into_iter().zip(self.remote(&remote, deadline).await) {
                results[i] = Some(result);
            }
        }
        // Every slot is filled: answered locally or by Redis.
        results.into_iter().map(|r| r.unwrap_or(Err(StoreError::Timeout))).collect()
    }

    /// One pipeline to Redis, whose answers teach the over-limit cache.
    async fn remote(&self, batch: &[Charge], deadline: Instant) -> Vec<Result<Decision, StoreError>> {
        let sent_at = Instant::now();
        let results = self.redis.charge(batch, deadline).await;
        for (charge, result) in batch.iter().zip(&results) {
            self.over_limit.learn(charge, result, sent_at);
        }
        results
    }
}
