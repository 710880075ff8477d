//! Calls naming a reservation (`reservations:` in a domain), over the whole store: one
//! descriptor's limits reserved, settled or charged plain together with the reservation's
//! record (`algorithm::reservation`), exactly, in every store and topology.
//!
//! Memory: one locked decision (`memory::reserve`). Redis (one node, Sentinel, Cluster):
//! one `reserve.lua` call on the master of the first bucket's slot, which holds the records
//! too (`charge::record_keys`). Such a call passes the breaker (admitted and recorded as any
//! call) but never the over-limit cache, coalescing, batching or leases: a reservation's
//! record must change with its charge, and a cached or leased answer would change neither.
//! A settle may give hits back, so the over-limit cache forgets the group's buckets after
//! one (a denial it holds may no longer be true).

use tokio::time::Instant;

use super::charge::{Charge, Reservation, Reserved, StoreError};
use super::guarded::Guarded;
use super::probe;
use super::remote::Remote;
use super::Store;
use crate::algorithm::reservation::Phase;

impl Store {
    /// The call of `group` (one descriptor's limits, never empty) naming `reservation`, by
    /// `deadline`: its answers and what it did, or why there is none (answered by the
    /// domain's failure policy; a call that timed out may have run).
    pub async fn reserve(
        &self,
        group: &[Charge],
        reservation: &Reservation,
        deadline: Instant,
    ) -> Result<Reserved, StoreError> {
        match self {
            Store::Memory(m) => Ok(m.reserve(group, reservation)),
            Store::Redis(r) => r.reserve(group, reservation, deadline).await,
            Store::Cluster(c) => c.reserve(group, reservation, deadline).await,
            Store::Sentinel(s) => s.reserve(group, reservation, deadline).await,
        }
    }
}

impl<C: Remote + Send + Sync + 'static> Guarded<C> {
    /// One `reserve.lua` call through the breaker (see the module doc).
    pub async fn reserve(
        &self,
        group: &[Charge],
        reservation: &Reservation,
        deadline: Instant,
    ) -> Result<Reserved, StoreError> {
        let sent_at = Instant::now();
        if sent_at >= deadline {
            return Err(StoreError::Timeout);
        }
        // Held across the await: dropped unrecorded (a cancelled call), it tells the breaker.
        let call = match self.breaker() {
            Some(breaker) => match breaker.admit(sent_at.into_std()) {
                Some(call) => Some(call),
                None => {
                    probe::note(|seen| seen.breaker = Some("open"));
                    return Err(StoreError::CircuitOpen);
                }
            },
            None => None,
        };
        let result = self.client().reserve(group, reservation, deadline).await;
        // A traced request's store span counts the call (`probe`).
        probe::note(|seen| seen.calls += 1);
        if let (Some(breaker), Some(call)) = (self.breaker(), call) {
            let opened = breaker.opened_total();
            call.record(matches!(&result, Err(e) if e.is_unreachable()), Instant::now().into_std());
            if breaker.opened_total() != opened {
                self.client().renew();
            }
        }
        if matches!(&result, Ok(r) if r.phase == Phase::Settled) {
            for charge in group {
                self.over_limit().forget(&charge.key);
            }
        }
        result
    }
}
