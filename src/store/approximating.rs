//! An approximate domain's request against the whole store: its unread buckets read first,
//! each group decided on the estimates — and a group claimed for a consume larger than a
//! share (`approx::claim`) decided against Redis: the claimed buckets' increments written,
//! the group charged through the exact scripts (the domain's `failure_mode` answers a store
//! error, as for an exact charge), the buckets read back and folded into the estimates.
//! Above the dispatch, as the sync (`syncing`) is: it needs both the estimates and the
//! store's exact path.

use tokio::time::Instant;

use crate::algorithm::Decision;

use super::approx::{Approx, Claim, Local};
use super::charge::{Charge, Groups, StoreError};
use super::memory::now_us;
use super::Store;

impl Store {
    /// Charges a batch of an approximate domain (every charge [`Approx::serves`]) on
    /// `approx`'s estimates, by `deadline`: one result per charge, in order. Redis is on
    /// the path only for buckets this instance has not read and for claimed groups.
    pub async fn charge_approximate(
        &self,
        approx: &Approx,
        batch: &[Charge],
        groups: &Groups,
        deadline: Instant,
    ) -> Vec<Result<Decision, StoreError>> {
        if let Some(via) = self.read_via() {
            approx.read_unread(via, batch, deadline).await;
        }
        let mut results = Vec::with_capacity(batch.len());
        for range in groups.ranges(batch.len()) {
            results.extend(self.charge_approximate_group(approx, &batch[range], deadline).await);
        }
        results
    }

    /// One group: decided locally, or claimed and decided against Redis; a group whose
    /// bucket another call holds waits for a call to settle, then decides again (a
    /// store timeout at the deadline).
    async fn charge_approximate_group(
        &self,
        approx: &Approx,
        group: &[Charge],
        deadline: Instant,
    ) -> Vec<Result<Decision, StoreError>> {
        let claims = self.read_via().is_some();
        loop {
            // Registered before deciding: a call that settles in between still wakes it.
            let settled = approx.settled.notified();
            tokio::pin!(settled);
            settled.as_mut().enable();
            match approx.decide_group_at(group, now_us(), claims) {
                Local::Decided(results) => return results,
                Local::Exact(claim) => return self.charge_claimed(claim, group, deadline).await,
                Local::Busy => {
                    if tokio::time::timeout_at(deadline, settled).await.is_err() {
                        return vec![Err(StoreError::Timeout); group.len()];
                    }
                }
            }
        }
    }

    /// A claimed group against Redis (see the module doc). Whatever fails, or if this
    /// future is dropped, the claim's `Drop` gives its buckets back to be read again.
    async fn charge_claimed(
        &self,
        mut claim: Claim<'_>,
        group: &[Charge],
        deadline: Instant,
    ) -> Vec<Result<Decision, StoreError>> {
        let Some(via) = self.read_via() else {
            return vec![Err(StoreError::Server("no Redis to decide a claimed group".into())); group.len()];
        };
        let approx = claim.approx();
        let writes = claim.writes();
        if !writes.is_empty() {
            if let Err(e) = approx.exchange(via, writes, deadline).await {
                return vec![Err(e); group.len()];
            }
            claim.written();
        }
        let joint = Groups::from_ends(vec![group.len()]);
        let results = self.charge_groups(group, &joint, deadline).await;
        if results.iter().any(Result::is_err) {
            return results;
        }
        if let Ok(reads) = approx.exchange(via, claim.reads(), deadline).await {
            claim.settle(&reads);
        }
        results
    }
}
