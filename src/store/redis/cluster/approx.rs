//! Approximate mode's calls on a Redis Cluster (`store::approx::sync`): entries routed by
//! slot, the entries of one master as one pipeline, every master's at once — the sync on
//! its own connections (`Lane::Sync`), a first read on a request's path on the charges'
//! (`Lane::Charges`).
//!
//! An entry is one command of one slot: an `approx.lua` call over buckets of one slot (the
//! caller groups them: a script's keys must share a slot) or one of the heartbeat's plain
//! commands. As for charges, each entry of a pipeline stands alone: one answered `MOVED`,
//! `ASK`, `TRYAGAIN` or `READONLY` did not run and follows its redirect alone, the others
//! are answered once; one answered `NOSCRIPT` goes again, once, with `EVAL`. A timeout or a
//! failed connection is never re-sent here: the sync puts those increments back for its
//! next wake.

use std::sync::Arc;

use futures_util::future::{join, join_all};
use redis::{Pipeline, Value};
use tokio::time::Instant;

use super::super::super::charge::StoreError;
use super::super::scripts::Call;
use super::super::slots::{Node, Redirect};
use super::shared::{ClusterStore, Lane, Shared};

impl ClusterStore {
    /// Sends entry `i` (appended by `add` to a pipeline, called by `Call`) to the master of
    /// `slots[i]`, for every `i`: one pipeline per master, all at once, by `deadline`. One
    /// reply per entry, in order; a server error that is not a redirect is an `Ok` value
    /// (the caller reads it), as from `Link::send`.
    pub(crate) async fn send_entries(
        &self,
        slots: &[u16],
        lane: Lane,
        deadline: Instant,
        add: impl Fn(&mut Pipeline, usize, Call),
    ) -> Vec<Result<Value, StoreError>> {
        let shared = &self.shared;
        let map = shared.map.load_full();
        let mut by_node: Vec<(Node, Vec<usize>)> = Vec::new();
        let mut unrouted = Vec::new();
        for (i, &slot) in slots.iter().enumerate() {
            match map.owner(slot) {
                Some(node) => match by_node.iter_mut().find(|(n, _)| n == node) {
                    Some((_, owned)) => owned.push(i),
                    None => by_node.push((node.clone(), vec![i])),
                },
                None => unrouted.push(i),
            }
        }
        let add = &add;
        let routed =
            by_node.iter().map(|(node, owned)| shared.entries_on(node, owned, slots, lane, deadline, add));
        let alone = async {
            let mut replies = Vec::with_capacity(unrouted.len());
            for &i in &unrouted {
                replies.push((i, shared.entry_alone(slots[i], i, None, lane, deadline, add).await));
            }
            replies
        };
        let (routed, alone) = join(join_all(routed), alone).await;
        let mut replies: Vec<Result<Value, StoreError>> = (0..slots.len())
            .map(|_| Err(StoreError::Server("no reply for a pipeline entry".into())))
            .collect();
        for (i, reply) in routed.into_iter().flatten().chain(alone) {
            replies[i] = reply;
        }
        replies
    }
}

impl Shared {
    /// The entries `owned`, owned by `node`, as one pipeline; a redirected entry then
    /// follows its redirect alone, in order (the heartbeat's commands keep theirs).
    async fn entries_on(
        self: &Arc<Self>,
        node: &Node,
        owned: &[usize],
        slots: &[u16],
        lane: Lane,
        deadline: Instant,
        add: &impl Fn(&mut Pipeline, usize, Call),
    ) -> Vec<(usize, Result<Value, StoreError>)> {
        let mut pipe = Pipeline::with_capacity(owned.len());
        owned.iter().for_each(|&i| add(&mut pipe, i, Call::Sha));
        let link = match lane {
            Lane::Charges | Lane::Aside => self.link(node),
            Lane::Sync => self.sync_link(node),
        };
        let values = match link.send(pipe, owned.len(), deadline).await {
            Ok(values) => values,
            Err(e) => {
                self.failed(&e);
                let e = StoreError::from(e);
                return owned.iter().map(|&i| (i, Err(e.clone()))).collect();
            }
        };
        let mut replies = Vec::with_capacity(owned.len());
        for (&i, value) in owned.iter().zip(values) {
            let reply = match Redirect::of(&value, &node.0) {
                None => Ok(value),
                Some(_) => {
                    self.entry_alone(slots[i], i, Some((node.clone(), value)), lane, deadline, add).await
                }
            };
            replies.push((i, reply));
        }
        replies
    }

    /// Entry `i`, of `slot`, sent alone on `lane`'s connections — or, with `reply`,
    /// starting from a reply `node` already gave it — following redirects until a node
    /// runs it (`Shared::send_alone`).
    async fn entry_alone(
        self: &Arc<Self>,
        slot: u16,
        i: usize,
        reply: Option<(Node, Value)>,
        lane: Lane,
        deadline: Instant,
        add: &impl Fn(&mut Pipeline, usize, Call),
    ) -> Result<Value, StoreError> {
        self.send_alone(slot, reply, lane, 1, deadline, |pipe, call| add(pipe, i, call)).await
    }
}
