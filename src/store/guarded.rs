//! What every Redis topology gets in front of it: the over-limit cache, the circuit
//! breaker and load shedding.
//!
//! `Guarded<C>` wraps a Redis client (`Remote`: single node, Cluster or Sentinel). Charges
//! of buckets Redis has just denied are answered locally until they can pass (so a flood
//! from one abusive key does not load Redis); a request already past its deadline is not
//! sent; a breaker, when configured, stops calling a Redis that keeps failing. The client
//! itself only talks to Redis.
//!
//! Joint groups (`Groups`: charges that stand or fall together). A group with a member the
//! over-limit cache denies is denied as a whole without Redis: that member answers its
//! cached denial, the others [`NOT_EVALUATED`]. A group holding a refund always goes to
//! Redis (refunds always do). The cache learns a denial only from the first member of a
//! bucket in its group: a later one was decided after the earlier member's hits, which a
//! denied group never applied, so its denial says nothing about the bucket alone. Refunds
//! a client sent on its own (the cluster undoing the parts of a group that another part
//! denied) are learned as refunds, so no denial they overtook is cached.
//!
//! Coalescing (`coalesce`, on unless `--no-coalesce`) sits between the guards and the
//! client: a charge that passed them waits for a call in flight on its key and rides the
//! next one. The breaker records such a call once (see [`Charged::shared`]).

use std::fmt;
use std::sync::Arc;

use tokio::time::Instant;

use crate::algorithm::{Decision, Hits};

use super::approx::{Approx, ApproxSettings};
use super::breaker::{Breaker, BreakerSettings};
use super::charge::{Charge, Groups, StoreError, NOT_EVALUATED};
use super::coalesce::{self, Coalescer};
use super::lease::{LeaseSettings, LeaseTable};
use super::overlimit::OverLimitCache;
use super::probe::{self, Answered};
use super::remote::{Charged, Remote};

/// Buckets the over-limit cache of one Redis store may hold (≈ 100 bytes each).
pub const OVER_LIMIT_CACHE_ENTRIES: usize = 100_000;

/// A Redis client behind the over-limit cache, load shedding and (optionally) a breaker.
pub struct Guarded<C> {
    /// Shared with the tasks that send coalesced batches.
    client: Arc<C>,
    over_limit: OverLimitCache,
    breaker: Option<Breaker>,
    /// `None`: `--no-coalesce`.
    coalescer: Option<Arc<Coalescer>>,
    /// Leases of hot buckets (`lease`), when enabled; `Store::charge_leasing` uses them.
    leases: Option<LeaseTable>,
    /// Local estimates of approximate domains' buckets (`approx`), synced through this
    /// client's connections; `None` when built without (`with_approx`).
    approx: Option<Arc<Approx>>,
}

impl<C: fmt::Debug> fmt::Debug for Guarded<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Guarded")
            .field("client", &self.client)
            .field("over_limit_entries", &self.over_limit.len())
            .field("breaker", &self.breaker.as_ref().map(Breaker::state))
            .field("coalescing", &self.coalescer.is_some())
            .field("leases", &self.leases)
            .finish()
    }
}

impl<C: Remote + Send + Sync + 'static> Guarded<C> {
    /// `breaker: None` for topologies where one breaker would stop healthy nodes too.
    /// Coalescing is off; see [`coalescing`](Self::coalescing).
    pub fn new(client: C, breaker: Option<BreakerSettings>) -> Guarded<C> {
        Guarded {
            client: Arc::new(client),
            over_limit: OverLimitCache::new(OVER_LIMIT_CACHE_ENTRIES),
            breaker: breaker.filter(|b| b.failures > 0).map(Breaker::new),
            coalescer: None,
            leases: None,
            approx: None,
        }
    }

    /// The store with per-key coalescing on, each call carrying at most `max_batch`
    /// charges (`--redis-max-inflight`), or off (`None`: `--no-coalesce`); see `coalesce`.
    pub fn coalescing(mut self, max_batch: Option<usize>) -> Guarded<C> {
        self.coalescer = max_batch.map(|n| Arc::new(Coalescer::new(n)));
        self
    }

    /// The coalescer, when coalescing is on (for tests).
    pub fn coalescer(&self) -> Option<&Coalescer> {
        self.coalescer.as_deref()
    }

    /// With a lease table (`Store::charge_leasing` serves leasable charges from it).
    pub fn with_leases(mut self, settings: LeaseSettings) -> Guarded<C> {
        self.leases = Some(LeaseTable::new(settings));
        self
    }

    /// With a table of approximate estimates (`approx`).
    pub fn with_approx(mut self, settings: ApproxSettings) -> Guarded<C> {
        self.approx = Some(Arc::new(Approx::new(settings)));
        self
    }

    /// The approximate estimates, if this store has them.
    pub fn approx(&self) -> Option<&Arc<Approx>> {
        self.approx.as_ref()
    }

    /// The lease table, if this store has one.
    pub fn leases(&self) -> Option<&LeaseTable> {
        self.leases.as_ref()
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

    /// Charges the batch: groups with a bucket known to be denied are answered locally (see
    /// the module doc), the rest go to Redis together by `deadline`.
    pub async fn charge(
        &self,
        batch: &[Charge],
        groups: &Groups,
        deadline: Instant,
    ) -> Vec<Result<Decision, StoreError>> {
        if self.over_limit.is_empty() {
            return self.remote(batch, groups, deadline).await;
        }
        let now = Instant::now();
        let mut results: Vec<Option<Result<Decision, StoreError>>> = vec![None; batch.len()];
        let mut missing: Vec<usize> = Vec::with_capacity(batch.len());
        let mut ends = Vec::new();
        for range in groups.ranges(batch.len()) {
            if self.answer_locally(&batch[range.clone()], &mut results[range.clone()], now) {
                probe::note(|seen| {
                    let keys = batch[range.clone()].iter().map(|c| (c.key.clone(), Answered::OverLimitCache));
                    seen.answered.extend(keys);
                });
                continue;
            }
            missing.extend(range);
            ends.push(missing.len());
        }
        if missing.len() == batch.len() {
            return self.remote(batch, groups, deadline).await;
        }
        if !missing.is_empty() {
            let remote: Vec<Charge> = missing.iter().map(|&i| batch[i].clone()).collect();
            let answers = self.remote(&remote, &Groups::from_ends(ends), deadline).await;
            for (i, result) in missing.into_iter().zip(answers) {
                results[i] = Some(result);
            }
        }
        // Every slot is filled: answered locally or by Redis.
        results.into_iter().map(|r| r.unwrap_or(Err(StoreError::Timeout))).collect()
    }

    /// Answers `group` from the over-limit cache into `answers` if it can: a single charge
    /// with a cached denial; a group without refunds, one of whose members has one (its
    /// cached denial; the others [`NOT_EVALUATED`]). False: the group goes to Redis.
    fn answer_locally(
        &self,
        group: &[Charge],
        answers: &mut [Option<Result<Decision, StoreError>>],
        now: Instant,
    ) -> bool {
        let refunds = group.iter().filter(|c| matches!(c.hits, Hits::Refund(_)));
        let mut refunded = false;
        for charge in refunds {
            self.over_limit.forget(&charge.key);
            refunded = true;
        }
        if refunded {
            return false;
        }
        if let ([charge], [answer]) = (group, &mut *answers) {
            *answer = self.over_limit.answer(charge, now).map(Ok);
            return answer.is_some();
        }
        let cached: Vec<Option<Decision>> = group.iter().map(|c| self.over_limit.answer(c, now)).collect();
        if cached.iter().all(Option::is_none) {
            return false;
        }
        for (answer, cached) in answers.iter_mut().zip(cached) {
            *answer = Some(Ok(cached.unwrap_or(NOT_EVALUATED)));
        }
        true
    }

    /// One call to Redis (unless shed or stopped by the breaker), whose answers teach the
    /// over-limit cache.
    async fn remote(
        &self,
        batch: &[Charge],
        groups: &Groups,
        deadline: Instant,
    ) -> Vec<Result<Decision, StoreError>> {
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
                Some(call) => {
                    if call.is_probe() {
                        probe::note(|seen| seen.breaker = Some("half_open"));
                    }
                    Some(call)
                }
                None => {
                    probe::note(|seen| seen.breaker = Some("open"));
                    return vec![Err(StoreError::CircuitOpen); batch.len()];
                }
            },
            None => None,
        };
        let Charged { results, refunds, shared } = match &self.coalescer {
            Some(table) => coalesce::charge(table, &self.client, batch, groups, deadline).await,
            None => self.client.charge(batch, groups, deadline).await,
        };
        probe::note(|seen| {
            seen.calls += 1;
            seen.shared |= shared;
        });
        // A coalesced call another request counts: this one's `Call` counts for nothing
        // (dropped unrecorded), unless it is the probe, which must decide.
        let call = call.filter(|c| !shared || c.is_probe());
        if let (Some(breaker), Some(call)) = (&self.breaker, call) {
            let opened = breaker.opened_total();
            call.record(unreachable(&results), Instant::now().into_std());
            if breaker.opened_total() != opened {
                // Its probe will ride a connection made after the outage began.
                self.client.renew();
            }
        }
        for range in groups.ranges(batch.len()) {
            let (Some(group), Some(answers)) = (batch.get(range.clone()), results.get(range)) else {
                continue;
            };
            for (j, (charge, result)) in group.iter().zip(answers).enumerate() {
                let later = group[..j].iter().any(|c| c.key == charge.key);
                if later && matches!(result, Ok(d) if !d.allowed) {
                    continue;
                }
                self.over_limit.learn(charge, result, sent_at, epoch);
            }
        }
        for (charge, result) in &refunds {
            self.over_limit.learn(charge, result, sent_at, epoch);
        }
        results
    }
}

/// Every charge failed for want of Redis (not because a script answered an error).
fn unreachable(results: &[Result<Decision, StoreError>]) -> bool {
    !results.is_empty() && results.iter().all(|r| matches!(r, Err(e) if e.is_unreachable()))
}

#[cfg(test)]
mod tests;
