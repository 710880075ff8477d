//! Descriptors that name a reservation (`reservations:` in their domain): the entry that
//! names it is taken off before matching and keying, and the descriptor's limits go to the
//! store as one reservation call (`Store::reserve`) beside the request's other charges —
//! never through the over-limit cache, coalescing, batching or leases. A domain without
//! `reservations` takes none of this (no allocation, the store call as before).

use std::ops::Range;

use prost::bytes::Bytes;
use tokio::time::Instant;

use crate::algorithm::Decision;
use crate::config::Domain;
use crate::store::{key, Charge, Groups, Reservation, StoreError};

use super::super::plan::Plan;
use super::super::wire::RateLimitRequest;
use super::RateLimiter;

/// Why a request naming reservations is invalid: a descriptor whose only entry names one
/// (it would have no bucket). `None`: valid, or its domain has no reservations.
pub fn invalid(request: &RateLimitRequest, domain: &Domain) -> Option<String> {
    let key = domain.reservations.as_ref()?.key.as_bytes();
    request.descriptors.iter().position(|d| d.entries.len() == 1 && &d.entries[0].key[..] == key).map(|i| {
        format!(
            "descriptor {i} has only the reservation entry {:?}: a reservation needs the entries \
             of a bucket before it",
            domain.reservations.as_ref().map_or("", |r| r.key.as_str())
        )
    })
}

/// `request` without the entries that name reservations, and the reservation each
/// descriptor names (its value), in order; `None` when no descriptor names one (the request
/// is used as it is).
pub fn split(request: &RateLimitRequest, domain: &Domain) -> Option<(RateLimitRequest, Vec<Option<Bytes>>)> {
    let key = domain.reservations.as_ref()?.key.as_bytes();
    let names = |d: &super::super::wire::RateLimitDescriptor| {
        d.entries.len() > 1 && d.entries.last().is_some_and(|e| &e.key[..] == key)
    };
    if !request.descriptors.iter().any(names) {
        return None;
    }
    let mut stripped = request.clone();
    let ids = stripped
        .descriptors
        .iter_mut()
        .map(|d| if names(d) { d.entries.pop().map(|e| e.value) } else { None })
        .collect();
    Some((stripped, ids))
}

/// The reservation groups of a request: the charges of each limited descriptor that names
/// a reservation (its id as stored: `key::reservation_id` of the keyed value).
pub(super) fn groups(plans: &[Plan<'_>], ids: &[Option<Bytes>]) -> Vec<(Range<usize>, String)> {
    plans
        .iter()
        .zip(ids)
        .filter_map(|(plan, id)| match (plan, id) {
            (Plan::Limited(limit), Some(id)) if !limit.charges.is_empty() => {
                Some((limit.charges.clone(), key::reservation_id(id)))
            }
            _ => None,
        })
        .collect()
}

impl RateLimiter {
    /// Charges `charges` (grouped by `groups`) whose `reserved` ranges are reservation
    /// calls: those each as one `Store::reserve`, the rest as one store call, at once. One
    /// result per charge, in order. The phases and expired counts are recorded as metrics.
    pub(super) async fn charge_reserving(
        &self,
        domain: &Domain,
        charges: &[Charge],
        groups: &Groups,
        reserved: &[(Range<usize>, String)],
        deadline: Instant,
    ) -> Vec<Result<Decision, StoreError>> {
        let ttl_us = domain.reservations.as_ref().map_or(0, |r| r.ttl_us);
        let inside = |i: usize| reserved.iter().any(|(range, _)| range.contains(&i));
        let plain: Vec<usize> = (0..charges.len()).filter(|&i| !inside(i)).collect();
        let batch: Vec<Charge> = plain.iter().map(|&i| charges[i].clone()).collect();
        let mut ends = Vec::new();
        for range in groups.ranges(charges.len()) {
            if !inside(range.start) {
                ends.push(ends.last().copied().unwrap_or(0) + range.len());
            }
        }
        let plain_call = async {
            if batch.is_empty() {
                return Vec::new();
            }
            // As any request's store call (counted), without leases: none in such a domain.
            self.charge(&batch, &Groups::from_ends(ends), &[], deadline, false).await.0
        };
        let calls = reserved.iter().map(|(range, id)| {
            let reservation = Reservation { id: id.clone(), ttl_us };
            let group = &charges[range.clone()];
            async move {
                let started = Instant::now();
                let result = self.store.reserve(group, &reservation, deadline).await;
                let outcome = result.as_ref().err().map_or("ok", StoreError::kind);
                self.metrics.observe_store(self.store.name(), outcome, started.elapsed().as_secs_f64());
                result
            }
        });
        let (plain_results, reserves) = tokio::join!(plain_call, futures_util::future::join_all(calls));
        let mut results: Vec<Result<Decision, StoreError>> = vec![Err(StoreError::Timeout); charges.len()];
        for (i, result) in plain.into_iter().zip(plain_results) {
            results[i] = result;
        }
        for ((range, _), answer) in reserved.iter().zip(reserves) {
            match answer {
                Ok(answer) => {
                    self.metrics.reservation(&domain.name, answer.phase.as_str(), answer.expired);
                    for (slot, decision) in results[range.clone()].iter_mut().zip(answer.decisions) {
                        *slot = Ok(decision);
                    }
                }
                Err(e) => results[range.clone()].fill(Err(e)),
            }
        }
        results
    }
}
