//! Where buckets live: the `Store` dispatch over its implementations.
//!
//! `memory` (embedded default: sharded map, capped) and `redis` (Lua scripts over a pipeline).
//! Both take a whole request's charges at once and answer one result per charge, in order,
//! within a deadline. This module knows nothing of gRPC or of policies: it receives bucket
//! keys and algorithm parameters already computed.
//!
//! Every Redis topology is a client (`redis`, `cluster`, `sentinel`) behind `guarded`:
//! the over-limit cache (`overlimit`: buckets Redis has just denied are answered locally
//! until they can pass, so a flood from one abusive key does not load Redis), load
//! shedding and the circuit breaker (`breaker`), and optionally leases of hot buckets
//! (`lease`: blocks of tokens taken in one charge and spent locally).
//!
//! The layers of `store/`, top to bottom; a file imports only from layers below its own:
//! 1. `leasing`, `approximating`, `syncing`, `reset`, `reserving`, `shared`, `rlqs`: what
//!    runs over the whole store (charging through leases and the lease sweeper, an
//!    approximate domain's request and approximate mode's sync task, an operator's reset,
//!    calls naming a reservation, the state an operator shares with the fleet, the RLQS
//!    claims ledger);
//! 2. this file: `Store`, the dispatch over the memory store and the guarded topologies;
//! 3. `guarded`: the guards in front of a Redis client, in the order a charge meets them;
//! 4. the guards: `approx`, `coalesce`, `breaker`, `lease`, `overlimit`;
//! 5. the stores: `memory`, and `redis` (its own layers in `redis`'s comment: the
//!    topologies over one connection lifecycle, the scripts and what a reply means);
//! 6. `remote`: the seam the guards call and the topologies implement (`Remote`,
//!    `Reset`, `Charged`);
//! 7. the vocabulary: `charge` (`Charge`, `Groups`, `StoreError`), `key` (bucket keys),
//!    `deadline`, `probe` (what the store did for a traced request).

pub mod approx;
pub mod approximating;
pub mod breaker;
pub mod charge;
pub mod coalesce;
pub mod deadline;
pub mod guarded;
pub mod key;
pub mod lease;
pub mod leasing;
pub mod memory;
pub mod overlimit;
pub mod probe;
pub mod redis;
pub mod remote;
pub mod reserving;
pub mod reset;
pub mod rlqs;
pub mod shared;
pub mod syncing;

pub use self::redis::{cluster, scripts, sentinel};

use tokio::time::Instant;

use crate::algorithm::Decision;

pub use self::charge::{Charge, Groups, Reservation, Reserved, StoreError, NOT_EVALUATED};
pub use self::guarded::Guarded;
pub use self::memory::MemoryStore;
pub use self::overlimit::OverLimitCache;
pub use self::redis::{RedisSettings, RedisStore};
pub use self::remote::{Charged, Remote, Reset};

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
    /// Each charge is decided alone: [`charge_groups`](Self::charge_groups) with
    /// [`Groups::each`].
    pub async fn charge(&self, batch: &[Charge], deadline: Instant) -> Vec<Result<Decision, StoreError>> {
        self.charge_groups(batch, &Groups::each(), deadline).await
    }

    /// Charges a batch whose `groups` stand or fall together (see [`Groups`]); answers one
    /// result per charge, in order, by `deadline`. Groups of one take exactly the path of
    /// a single charge. Per store: memory locks every shard a group touches
    /// (`memory`); one Redis node or Sentinel sends a group as one `joint.lua` call in the
    /// request's pipeline; a cluster sends the part of a group on each slot as one call and
    /// refunds the applied parts when another part is denied (`cluster`).
    pub async fn charge_groups(
        &self,
        batch: &[Charge],
        groups: &Groups,
        deadline: Instant,
    ) -> Vec<Result<Decision, StoreError>> {
        if batch.is_empty() {
            return Vec::new();
        }
        match self {
            Store::Memory(m) => m.charge_groups(batch, groups).into_iter().map(Ok).collect(),
            Store::Redis(r) => r.charge(batch, groups, deadline).await,
            Store::Cluster(c) => c.charge(batch, groups, deadline).await,
            Store::Sentinel(s) => s.charge(batch, groups, deadline).await,
        }
    }

    /// The local estimates of approximate domains, where this store syncs them (every
    /// Redis topology).
    pub fn approx(&self) -> Option<&std::sync::Arc<approx::Approx>> {
        match self {
            Store::Redis(r) => r.approx(),
            Store::Cluster(c) => c.approx(),
            Store::Sentinel(s) => s.approx(),
            Store::Memory(_) => None,
        }
    }

    /// Where approximate mode syncs: a connection of its own to the Redis node or the
    /// Sentinel master, or one per cluster master (one call per slot): a sync of many
    /// buckets never holds up the charges of exact domains. `None` for the memory store (local
    /// already): there approximate domains are charged exactly.
    pub fn sync_via(&self) -> Option<approx::sync::Via<'_>> {
        match self {
            Store::Redis(r) => Some(approx::sync::Via::Link(r.client().sync_link())),
            Store::Cluster(c) => Some(approx::sync::Via::Cluster(c.client(), cluster::Lane::Sync)),
            Store::Sentinel(s) => Some(approx::sync::Via::Link(s.client().sync_link())),
            Store::Memory(_) => None,
        }
    }

    /// Where approximate mode reads a bucket on a request's path (its first read): the
    /// connections exact charges ride, not the sync's (a long sync must not hold it up).
    pub fn read_via(&self) -> Option<approx::sync::Via<'_>> {
        match self {
            Store::Redis(r) => Some(approx::sync::Via::Link(r.client().link())),
            Store::Cluster(c) => Some(approx::sync::Via::Cluster(c.client(), cluster::Lane::Charges)),
            Store::Sentinel(s) => Some(approx::sync::Via::Link(s.client().link())),
            Store::Memory(_) => None,
        }
    }

    /// Before the instance reports ready: every connection of the charges made and every
    /// script loaded on each server this store calls (`redis::prepare`), by `deadline`.
    /// Answers how many servers were prepared (0 for memory); an error is logged by the
    /// caller and is not fatal (the store connects when Redis answers, as it always does).
    pub async fn prepare(&self, deadline: Instant) -> Result<usize, StoreError> {
        match self {
            Store::Memory(_) => Ok(0),
            Store::Redis(r) => redis::prepare::prepare_link(r.client().link(), deadline).await.map(|()| 1),
            Store::Sentinel(s) => redis::prepare::prepare_link(s.client().link(), deadline).await.map(|()| 1),
            Store::Cluster(c) => c.client().prepare(deadline).await,
        }
    }

    /// Which path decides window consumes (`--redis-windows`); `None` on the memory store.
    pub fn windows(&self) -> Option<redis::Windows> {
        match self {
            Store::Memory(_) => None,
            Store::Redis(r) => Some(r.client().windows()),
            Store::Cluster(c) => Some(c.client().windows()),
            Store::Sentinel(s) => Some(s.client().windows()),
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
