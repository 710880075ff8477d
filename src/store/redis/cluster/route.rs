//! Routing a batch by slot: the parts of a batch (`groups::Parts`) owned by one master go
//! as one pipeline, every master's at once; a part whose slot has no known owner, or whose
//! entry was redirected (it did not run), goes alone through `redirect`.

use std::sync::Arc;

use futures_util::future::join_all;
use redis::{Pipeline, Value};
use tokio::time::Instant;

use crate::algorithm::Decision;

use super::super::super::charge::{Charge, StoreError};
use super::super::scripts::{parse_part, Call};
use super::super::slots::{key_slot, Node, Redirect};
use super::groups::Parts;
use super::shared::{Lane, Shared};

impl Shared {
    /// Charges the parts `send` selects (see `groups::Parts`): the parts owned by one
    /// master as one pipeline, every master's at once, sent by `deadline` and answered by
    /// `replies_by` (later than `deadline` only where a late answer is still acted on). One
    /// result per charge of `batch`; a charge of a part not sent answers `Timeout` (the
    /// caller replaces it).
    pub(super) async fn charge_parts(
        self: &Arc<Self>,
        batch: &[Charge],
        parts: &Parts,
        send: impl Fn(usize) -> bool,
        (deadline, replies_by): (Instant, Instant),
    ) -> Vec<Result<Decision, StoreError>> {
        let map = self.map.load_full();
        let mut by_node: Vec<(Node, Vec<usize>)> = Vec::new();
        let mut unrouted = Vec::new();
        for p in (0..parts.len()).filter(|&p| send(p)) {
            let first = parts.members(p).first().map_or(&[][..], |&i| batch[i].key.as_bytes());
            match map.owner(key_slot(first)) {
                Some(node) => match by_node.iter_mut().find(|(n, _)| n == node) {
                    Some((_, owned)) => owned.push(p),
                    None => by_node.push((node.clone(), vec![p])),
                },
                None => unrouted.push(p),
            }
        }
        let routed = by_node
            .iter()
            .map(|(node, owned)| self.charge_on(node, batch, parts, owned, (deadline, replies_by)));
        let alone = unrouted.iter().map(|&p| async move {
            let members = parts.members(p);
            let results = self.charge_part(batch, members, parts.coalesced, None, deadline).await;
            members.iter().copied().zip(results).collect::<Vec<_>>()
        });
        let (routed, alone) = futures_util::future::join(join_all(routed), join_all(alone)).await;
        let mut results: Vec<Result<Decision, StoreError>> = vec![Err(StoreError::Timeout); batch.len()];
        for (i, result) in routed.into_iter().flatten().chain(alone.into_iter().flatten()) {
            results[i] = result;
        }
        results
    }

    /// The parts `owned` (indices into `parts`), owned by `node`, as one pipeline; a
    /// redirected entry (it did not run) then follows its redirect alone.
    async fn charge_on(
        self: &Arc<Self>,
        node: &Node,
        batch: &[Charge],
        parts: &Parts,
        owned: &[usize],
        (deadline, replies_by): (Instant, Instant),
    ) -> Vec<(usize, Result<Decision, StoreError>)> {
        let mut pipe = Pipeline::with_capacity(owned.len());
        for &p in owned {
            pipe.add_command(self.scripts.part(batch, parts.members(p), parts.coalesced, Call::Sha));
        }
        // A coalesced call weighs its charges against `--redis-max-inflight` (see `Link`).
        let weight =
            if parts.coalesced { owned.iter().map(|&p| parts.members(p).len()).sum() } else { owned.len() };
        let sent = self.link(node).send_weighted_until(pipe, owned.len(), weight, deadline, replies_by).await;
        let values = match sent {
            Ok(values) => values,
            Err(e) => {
                self.failed(&e);
                let e = StoreError::from(e);
                return owned.iter().flat_map(|&p| parts.members(p)).map(|&i| (i, Err(e.clone()))).collect();
            }
        };
        let answers = owned.iter().zip(values).map(|(&p, value)| async move {
            let members = parts.members(p);
            let results = match Redirect::of(&value, &node.0) {
                None => parse_part(Ok(value), members.len()),
                Some(_) => {
                    let first = Some((node.clone(), value));
                    self.charge_part(batch, members, parts.coalesced, first, deadline).await
                }
            };
            members.iter().copied().zip(results).collect::<Vec<_>>()
        });
        join_all(answers).await.into_iter().flatten().collect()
    }

    /// One script call of the charges `members` of `batch` (one slot), routed by that slot
    /// — or, with `reply`, starting from a reply `node` already gave it — following
    /// redirects until a node runs it. One result per member. `coalesced`: the members are
    /// a coalesced batch (see `Groups::coalesced`).
    pub(super) async fn charge_part(
        self: &Arc<Self>,
        batch: &[Charge],
        members: &[usize],
        coalesced: bool,
        reply: Option<(Node, Value)>,
        deadline: Instant,
    ) -> Vec<Result<Decision, StoreError>> {
        let slot = members.first().map_or(0, |&i| key_slot(batch[i].key.as_bytes()));
        // A coalesced call weighs its charges against `--redis-max-inflight` (see `Link`).
        let weight = if coalesced { members.len() } else { 1 };
        let build = |pipe: &mut Pipeline, call: Call| {
            pipe.add_command(self.scripts.part(batch, members, coalesced, call));
        };
        let value = self.send_alone(slot, reply, Lane::Charges, weight, deadline, build).await;
        parse_part(value, members.len())
    }
}
