//! The store side of a decision: plans a request's descriptors, charges the store once
//! under the request's deadline (the approximate estimates for an approximate domain,
//! leases where a rule allows them) and falls back to this instance's memory for
//! `failure_mode: local`. What it did is the [`Charged`] part of the decision record.

use std::future::Future;
use std::time::SystemTime;

use tokio::time::Instant;

use crate::algorithm::Decision;
use crate::config::{Consistency, Domain, FailureMode};
use crate::store::approx::Approx;
use crate::store::{probe, Charge, Groups, StoreError};

use super::super::plan::{self, Plan};
use super::super::traced::StoreCall;
use super::super::wire::RateLimitRequest;
use super::decision::Charged;
use super::{reserving, RateLimiter};

impl RateLimiter {
    /// Plans `request`'s descriptors (matched on its values, keyed on `keyed`'s: see
    /// `plan::plan_keyed`) and charges them. `probe`: also watch the store call (a traced
    /// request; `store::probe`). The verdicts are left to the caller (`respond`).
    pub(super) async fn charge_plans<'a>(
        &self,
        domain: &'a Domain,
        request: &RateLimitRequest,
        keyed: &RateLimitRequest,
        reservations: &[Option<prost::bytes::Bytes>],
        deadline: Instant,
        probe: bool,
    ) -> Charged<'a> {
        let (plans, charges, groups) = plan::plan_keyed(
            domain,
            &request.descriptors,
            &keyed.descriptors,
            request.hits_addend,
            &self.settings.key_prefix,
        );
        // Descriptors naming a reservation: their own store calls (`reserving`).
        let reserved = reserving::groups(&plans, reservations);
        let (mut results, store, approximate) = match self.store.approx() {
            _ if !reserved.is_empty() => {
                let reserving = self.charge_reserving(domain, &charges, &groups, &reserved, deadline);
                let (results, call) = self.watched(charges.len(), reserving, probe).await;
                (results, call, false)
            }
            // No Redis on the request path: the local estimates decide (`store::approx`).
            // A request's own `limit` of an algorithm the mode does not serve (GCRA, the
            // default of `--default-algorithm`) sends the request to the store exactly.
            // Until its heartbeat has counted the other instances (`Approx::is_ready`), an
            // instance decides approximate domains exactly. A bucket it has never read is
            // read first, on this request's path, and a group with a consume larger than a
            // share is decided against Redis (`Store::charge_approximate`).
            Some(approx)
                if domain.consistency == Consistency::Approximate
                    && approx.is_ready()
                    && charges.iter().all(Approx::serves) =>
            {
                (self.store.charge_approximate(approx, &charges, &groups, deadline).await, None, true)
            }
            _ => {
                let leasable = self.leasable(&plans, charges.len());
                let (results, call) = self.charge(&charges, &groups, &leasable, deadline, probe).await;
                (results, call, false)
            }
        };
        let local = if domain.failure_mode == FailureMode::Local {
            self.charge_locally(&domain.name, &charges, &groups, &mut results)
        } else {
            Vec::new()
        };
        Charged { plans, charges, results, verdicts: Vec::new(), local, approximate, store }
    }

    /// One store call for every charge; with `probe`, what the store did for it as well
    /// (boxed: only a traced request allocates it, and the record stays small to move).
    pub(super) async fn charge(
        &self,
        charges: &[Charge],
        groups: &Groups,
        leasable: &[bool],
        deadline: Instant,
        probe: bool,
    ) -> (Vec<Result<Decision, StoreError>>, Option<Box<StoreCall>>) {
        if charges.is_empty() {
            return (Vec::new(), None);
        }
        let started = Instant::now();
        let charging = self.store.charge_leasing(charges, groups, leasable, deadline);
        let (results, call) = self.watched(charges.len(), charging, probe).await;
        let outcome = results.iter().find_map(|r| r.as_ref().err()).map_or("ok", StoreError::kind);
        self.metrics.observe_store(self.store.name(), outcome, started.elapsed().as_secs_f64());
        (results, call)
    }

    /// The results of `work`, the store calls for `charges` charges; with `probe`, what the
    /// store did for them as well (boxed: only a traced request allocates it, and the
    /// record stays small to move).
    async fn watched(
        &self,
        charges: usize,
        work: impl Future<Output = Vec<Result<Decision, StoreError>>>,
        probe: bool,
    ) -> (Vec<Result<Decision, StoreError>>, Option<Box<StoreCall>>) {
        if !probe {
            return (work.await, None);
        }
        let from = SystemTime::now();
        // Boxed, so that the untraced path's future stays the size it was.
        let (results, seen) = Box::pin(probe::observe(work)).await;
        let error = results.iter().find_map(|r| r.as_ref().err()).cloned();
        let times = (from, SystemTime::now());
        let call = StoreCall { topology: self.store.name(), charges, times, seen, error };
        (results, Some(Box::new(call)))
    }

    /// Which charges may be served from leases: those of rules with `lease: true`, or of
    /// every rule with `--lease-hot-keys` (never a request's own `limit`, nor a rule with a
    /// `penalty`, which must see every charge). Empty when the
    /// store has no leases or no charge may use them (the common case: no allocation).
    fn leasable(&self, plans: &[Plan<'_>], len: usize) -> Vec<bool> {
        let Some(every_rule) = self.store.leases().map(|t| t.settings().every_rule) else {
            return Vec::new();
        };
        let mut leasable = Vec::new();
        for plan in plans {
            let Plan::Limited(limit) = plan else { continue };
            if limit.rule.is_some_and(|rule| (every_rule || rule.lease) && !rule.penalized()) {
                leasable.resize(len, false);
                leasable[limit.charges.clone()].fill(true);
            }
        }
        leasable
    }

    /// `failure_mode: local`: a group any of whose charges failed in the store goes, whole,
    /// to this instance's memory (on a Redis Cluster, a part of a group spread over several
    /// masters may have been charged there as well: counted twice, never freed early).
    /// Returns which charges were decided here (empty when none was).
    fn charge_locally(
        &self,
        domain: &str,
        charges: &[Charge],
        groups: &Groups,
        results: &mut [Result<Decision, StoreError>],
    ) -> Vec<bool> {
        let now = crate::store::memory::now_us();
        let mut local = Vec::new();
        for range in groups.ranges(charges.len()) {
            if results[range.clone()].iter().all(Result::is_ok) {
                continue;
            }
            local.resize(charges.len(), false);
            local[range.clone()].fill(true);
            let decisions = self.local.charge_group_at(&charges[range.clone()], now);
            for (result, decision) in results[range].iter_mut().zip(decisions) {
                *result = Ok(decision);
                self.metrics.local_decision(domain);
            }
        }
        local
    }
}
