//! Joint groups on a Redis Cluster: a group is cut into *parts*, one per slot its keys hash
//! to, each part one script call (`joint.lua`, or the algorithm's script for one charge);
//! a group one of whose parts is denied has the parts that were applied refunded, and
//! their members answer as their buckets stand after the refund: allowed, nothing charged
//! — what a group on one slot answers (`algorithm::joint`).
//!
//! Only consumes can be undone. A part holding a refund or an overdraw is *deferred*: sent
//! in a second round trip once every other part of its group has passed, and not sent at
//! all when one was denied (its members answer `NOT_EVALUATED`), so a denied group leaves
//! no refund applied — as on one slot. Only groups that have such a part pay that trip.
//!
//! Why charge-then-refund rather than check-then-charge: the common case (every part
//! passes) then costs one round trip, the same as a group on one slot; a check first would
//! cost two on every request, and still race — another request can take the tokens
//! between the check and the charge — so it would need the same refunds. The price is
//! bounded and in the safe direction: between a part's charge and its refund (one round
//! trip) other requests may see those tokens taken (under-admission by at most the group's
//! hits, for one round trip); a refund that fails or times out leaves them taken until the
//! bucket refills. Never over-admission.

use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::algorithm::{Decision, Hits};

use super::super::super::charge::{Charge, Groups, StoreError, NOT_EVALUATED};
use super::super::slots::key_slot;
use super::shared::Shared;

/// How long the refunds of a denied group may take, whatever the request's deadline (they
/// run in their own task: a request that gives up does not leave tokens taken); also how
/// long past the request's deadline a spanning group's parts' replies are waited for, so
/// that a part applied late is refunded when another was denied.
pub(super) const REFUND_TIMEOUT: Duration = Duration::from_secs(1);

/// A batch cut into parts: runs of charges of one slot that go as one script call.
#[derive(Debug)]
pub(super) struct Parts {
    /// Batch indices, part after part (each part's members in batch order).
    order: Vec<usize>,
    /// The exclusive end of each part in `order`.
    ends: Vec<usize>,
    /// The groups cut into more than one part: their parts (a range of part indices).
    spanning: Vec<Range<usize>>,
    /// The groups are coalesced batches (`Groups::coalesced`): each part is a `joint.lua`
    /// call in its `each` mode. Their members share one key, so they never span slots.
    pub(super) coalesced: bool,
}

impl Parts {
    /// Every charge alone, or each group cut by slot (parts in order of their first
    /// member; a group on one slot is one part).
    pub(super) fn of(batch: &[Charge], groups: &Groups) -> Parts {
        let len = batch.len();
        if groups.is_each() {
            return Parts {
                order: (0..len).collect(),
                ends: (1..=len).collect(),
                spanning: Vec::new(),
                coalesced: false,
            };
        }
        let mut parts = Parts {
            order: Vec::with_capacity(len),
            ends: Vec::new(),
            spanning: Vec::new(),
            coalesced: groups.is_coalesced(),
        };
        for range in groups.ranges(len) {
            let first_part = parts.ends.len();
            let slots: Vec<u16> = range.clone().map(|i| key_slot(batch[i].key.as_bytes())).collect();
            for (j, slot) in slots.iter().enumerate() {
                if slots[..j].contains(slot) {
                    continue;
                }
                parts.order.extend(range.clone().zip(&slots).filter(|(_, s)| *s == slot).map(|(i, _)| i));
                parts.ends.push(parts.order.len());
            }
            if !parts.coalesced && parts.ends.len() - first_part > 1 {
                parts.spanning.push(first_part..parts.ends.len());
            }
        }
        parts
    }

    pub(super) fn len(&self) -> usize {
        self.ends.len()
    }

    /// Whether some group is cut into several parts (then denied groups are undone).
    pub(super) fn spans(&self) -> bool {
        !self.spanning.is_empty()
    }

    /// The batch indices of part `p`.
    pub(super) fn members(&self, p: usize) -> &[usize] {
        let start = if p == 0 { 0 } else { self.ends[p - 1] };
        &self.order[start..self.ends[p]]
    }

    /// Per part, whether it waits for the other parts of its group: a part of a group cut
    /// into several that holds a refund or an overdraw. Only consumes can be undone (by a
    /// refund of their hits); a refund or an overdraw, once applied, cannot (a refund stops
    /// at an empty bucket, an overdraw at the limit), so such a part is sent only once
    /// every other part of its group has passed — a group denied meanwhile leaves it unsent,
    /// as a denied group on one slot applies nothing.
    pub(super) fn deferred(&self, batch: &[Charge]) -> Vec<bool> {
        let mut deferred = vec![false; self.len()];
        for group in &self.spanning {
            for p in group.clone() {
                deferred[p] = self
                    .members(p)
                    .iter()
                    .any(|&i| matches!(batch[i].hits, Hits::Refund(_) | Hits::Overdraw(_)));
            }
        }
        deferred
    }
}

impl Shared {
    /// Charges every part: first the parts that can be undone (sent by `deadline`, their
    /// replies waited for until `replies_by`), then (a second round trip, only for groups
    /// that have one, and only before `deadline`) the `deferred` parts of the groups that no
    /// part has denied so far. A deferred part left unsent answers [`NOT_EVALUATED`] for
    /// each of its members (allowed, nothing charged), or `Timeout` past the deadline.
    pub(super) async fn charge_phased(
        self: &Arc<Self>,
        batch: &[Charge],
        parts: &Parts,
        (deadline, replies_by): (Instant, Instant),
    ) -> Vec<Result<Decision, StoreError>> {
        let deferred = parts.deferred(batch);
        let mut results = self.charge_parts(batch, parts, |p| !deferred[p], (deadline, replies_by)).await;
        if !deferred.contains(&true) {
            return results;
        }
        let denied = |p: usize| parts.members(p).iter().any(|&i| matches!(results[i], Ok(d) if !d.allowed));
        let mut send = vec![false; parts.len()];
        for group in &parts.spanning {
            let go = !group.clone().filter(|&p| !deferred[p]).any(denied);
            group.clone().filter(|&p| deferred[p]).for_each(|p| send[p] = go);
        }
        if Instant::now() >= deadline {
            // The request gave up: what it was not sent does not run.
            deferred.iter().enumerate().filter(|(_, &d)| d).for_each(|(p, _)| {
                parts.members(p).iter().for_each(|&i| results[i] = Err(StoreError::Timeout));
            });
            return results;
        }
        let later = self.charge_parts(batch, parts, |p| send[p], (deadline, deadline)).await;
        for (p, _) in deferred.iter().enumerate().filter(|(_, &d)| d) {
            for &i in parts.members(p) {
                results[i] = if send[p] { later[i].clone() } else { Ok(NOT_EVALUATED) };
            }
        }
        results
    }

    /// For every group cut into several parts and denied by one: refunds each consume of
    /// the parts that were applied (all their members allowed), in a task of its own,
    /// waited for until `deadline`. A refunded member then answers as its refund found the
    /// bucket (allowed, nothing charged: what a denied group on one slot answers); one whose
    /// refund failed keeps its charge's answer (its tokens stay taken). The denied part's
    /// members answer as they were answered. Returns the refunds sent with their results
    /// (`Timeout` for those not answered by `deadline`).
    pub(super) async fn undo_denied(
        self: &Arc<Self>,
        batch: &[Charge],
        parts: &Parts,
        results: &mut [Result<Decision, StoreError>],
        deadline: Instant,
    ) -> Vec<(Charge, Result<Decision, StoreError>)> {
        let denied = |p: usize| parts.members(p).iter().any(|&i| matches!(results[i], Ok(d) if !d.allowed));
        // A deferred part left unsent (`NOT_EVALUATED`) charged nothing.
        let applied = |p: usize| {
            parts.members(p).iter().all(|&i| matches!(results[i], Ok(d) if d.allowed && d != NOT_EVALUATED))
        };
        let (mut refunds, mut refunded) = (Vec::new(), Vec::new());
        for group in &parts.spanning {
            if !group.clone().any(denied) {
                continue;
            }
            for p in group.clone().filter(|&p| applied(p)) {
                for &i in parts.members(p) {
                    if let Hits::Consume(n @ 1..) = batch[i].hits {
                        refunds.push(Charge { hits: Hits::Refund(n), ..batch[i].clone() });
                        refunded.push(i);
                    }
                }
            }
        }
        if refunds.is_empty() {
            return Vec::new();
        }
        let task = {
            let (shared, refunds) = (self.clone(), refunds.clone());
            tokio::spawn(async move {
                let parts = Parts::of(&refunds, &Groups::each());
                let by = Instant::now() + REFUND_TIMEOUT;
                shared.charge_parts(&refunds, &parts, |_| true, (by, by)).await
            })
        };
        let answers = match tokio::time::timeout_at(deadline, task).await {
            Ok(Ok(answers)) => answers,
            Ok(Err(join)) => {
                vec![Err(StoreError::Unavailable(format!("cluster refund: {join}"))); refunds.len()]
            }
            Err(_) => vec![Err(StoreError::Timeout); refunds.len()],
        };
        for (&i, answer) in refunded.iter().zip(&answers) {
            if let (Ok(after), Ok(charged)) = (answer, &mut results[i]) {
                *charged = Decision { allowed: true, ..*after };
            }
        }
        refunds.into_iter().zip(answers).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::{Algorithm, Params};

    fn batch(keys: &[&str]) -> Vec<Charge> {
        let params = Params {
            algorithm: Algorithm::Gcra,
            limit: 5,
            unit_us: 1_000_000,
            burst: 5,
            penalty_us: 0,
            period: None,
        };
        keys.iter().map(|k| Charge { key: (*k).into(), params, hits: Hits::Consume(1) }).collect()
    }

    fn all(parts: &Parts) -> Vec<Vec<usize>> {
        (0..parts.len()).map(|p| parts.members(p).to_vec()).collect()
    }

    #[test]
    fn each_charge_is_its_own_part() {
        let parts = Parts::of(&batch(&["a", "b", "c"]), &Groups::each());
        assert_eq!(all(&parts), [[0], [1], [2]]);
        assert!(parts.spanning.is_empty());
    }

    #[test]
    fn a_group_is_cut_by_slot_in_order_of_first_member() {
        // {x} keys share a slot; "a" and "b" hash elsewhere (and apart from each other).
        let keys = ["{x}1", "a", "{x}2", "b", "solo", "{y}1", "{y}2"];
        assert_ne!(key_slot(b"a"), key_slot(b"{x}1"));
        assert_ne!(key_slot(b"a"), key_slot(b"b"));
        let parts = Parts::of(&batch(&keys), &Groups::from_ends(vec![4, 5, 7]));
        assert_eq!(all(&parts), [vec![0, 2], vec![1], vec![3], vec![4], vec![5, 6]]);
        assert_eq!(parts.spanning, vec![Range { start: 0, end: 3 }], "only the first group spans slots");
    }

    #[test]
    fn parts_of_spanning_groups_holding_a_refund_or_an_overdraw_are_deferred() {
        let mut charges = batch(&["{x}1", "a", "{x}2", "b", "c", "{y}1", "{y}2"]);
        charges[2].hits = Hits::Refund(1);
        charges[3].hits = Hits::Overdraw(2);
        charges[6].hits = Hits::Refund(1);
        let parts = Parts::of(&charges, &Groups::from_ends(vec![4, 5, 7]));
        assert_eq!(all(&parts), [vec![0, 2], vec![1], vec![3], vec![4], vec![5, 6]]);
        // The {y} group is on one slot: one atomic call, nothing to defer.
        assert_eq!(parts.deferred(&charges), [true, false, true, false, false]);
    }
}
