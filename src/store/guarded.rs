//! What every Redis topology gets in front of it: the over-limit cache, the circuit
//! breaker and load shedding.
//!
//! `Guarded<C>` wraps a Redis client (`Remote`: single node, Cluster or Sentinel). Charges
//! of buckets Redis has just denied are answered locally until they can pass (so a flood
//! from one abusive key does not load Redis); a request already past its deadline is not
//! sent; a breaker, when configured, stops calling a Redis that keeps failing. The client
//! itself only talks to Redis.

use std::fmt;
use std::future::Future;

use tokio::time::Instant;

use crate::algorithm::{Decision, Hits};

use super::breaker::{Breaker, BreakerSettings};
use super::{Charge, OverLimitCache, StoreError};

/// Buckets the over-limit cache of one Redis store may hold (≈ 100 bytes each).
pub const OVER_LIMIT_CACHE_ENTRIES: usize = 100_000;

/// A Redis client: charges a batch by a deadline, one result per charge, in order.
pub trait Remote {
    fn charge(
        &self,
        batch: &[Charge],
        deadline: Instant,
    ) -> impl Future<Output = Vec<Result<Decision, StoreError>>> + Send;

    /// Replaces the client's connections by new ones, made in the background (the breaker
    /// opened: its probe must not ride a connection from before the outage).
    fn renew(&self) {}
}

/// A Redis client behind the over-limit cache, load shedding and (optionally) a breaker.
pub struct Guarded<C> {
    client: C,
    over_limit: OverLimitCache,
    breaker: Option<Breaker>,
}

impl<C: fmt::Debug> fmt::Debug for Guarded<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Guarded")
            .field("client", &self.client)
            .field("over_limit_entries", &self.over_limit.len())
            .field("breaker", &self.breaker.as_ref().map(Breaker::state))
            .finish()
    }
}

impl<C: Remote + Sync> Guarded<C> {
    /// `breaker: None` for topologies where one breaker would stop healthy nodes too.
    pub fn new(client: C, breaker: Option<BreakerSettings>) -> Guarded<C> {
        Guarded {
            client,
            over_limit: OverLimitCache::new(OVER_LIMIT_CACHE_ENTRIES),
            breaker: breaker.filter(|b| b.failures > 0).map(Breaker::new),
        }
    }

    /// The Redis client (health and description for operators).
    pub fn client(&self) -> &C {
        &self.client
    }

    /// The circuit breaker, if this store has one.
    pub fn breaker(&self) -> Option<&Breaker> {
        self.breaker.as_ref()
    }

    /// The over-limit cache (for metrics and tests).
    pub fn over_limit(&self) -> &OverLimitCache {
        &self.over_limit
    }

    /// Charges the batch: charges of buckets known to be denied are answered locally, the
    /// rest go to Redis together by `deadline`.
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

    /// One call to Redis (unless shed or stopped by the breaker), whose answers teach the
    /// over-limit cache.
    async fn remote(&self, batch: &[Charge], deadline: Instant) -> Vec<Result<Decision, StoreError>> {
        let sent_at = Instant::now();
        let epoch = self.over_limit.epoch();
        // It waited longer than its grpc-timeout allows: answer by policy, don't queue.
        if sent_at >= deadline {
            return vec![Err(StoreError::Timeout); batch.len()];
        }
        // `call` lives across the await: if this future is dropped there (the client reset
        // the stream), its `Drop` tells the breaker, so a cancelled probe cannot leave it
        // half-open for good.
        let call = match &self.breaker {
            Some(breaker) => match breaker.admit(sent_at.into_std()) {
                Some(call) => Some(call),
                None => return vec![Err(StoreError::CircuitOpen); batch.len()],
            },
            None => None,
        };
        let results = self.client.charge(batch, deadline).await;
        if let (Some(breaker), Some(call)) = (&self.breaker, call) {
            let opened = breaker.opened_total();
            call.record(unreachable(&results), Instant::now().into_std());
            if breaker.opened_total() != opened {
                // Its probe will ride a connection made after the outage began.
                self.client.renew();
            }
        }
        for (charge, result) in batch.iter().zip(&results) {
            self.over_limit.learn(charge, result, sent_at, epoch);
        }
        results
    }
}

/// Every charge failed for want of Redis (not because a script answered an error).
fn unreachable(results: &[Result<Decision, StoreError>]) -> bool {
    !results.is_empty() && results.iter().all(|r| matches!(r, Err(e) if e.is_unreachable()))
}
