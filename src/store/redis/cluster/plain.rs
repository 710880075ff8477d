//! `--redis-windows plain` on a Redis Cluster (`redis::plain`): the plain charges owned by
//! one master go as one pipeline of plain commands (each charge's on its bucket's slot), every master's at once. A charge whose commands were redirected, whose slot has
//! no known owner, or whose bucket is stale is decided by its script alone (`route`'s
//! `charge_part`, which follows redirects), after its increment — if one ran — is given
//! back. Denials' increments are given back, slot by slot, by a task of its own.

use std::sync::Arc;

use futures_util::future::join_all;
use redis::{Pipeline, Value};
use tokio::time::Instant;

use crate::algorithm::Decision;

use super::super::super::charge::{Charge, StoreError};
use super::super::plain::{now_us, pipeline, GiveBack, Sorted, GIVE_BACK_TIMEOUT};
use super::super::scripts::Call;
use super::super::slots::{key_slot, Node, Redirect};
use super::shared::{Lane, Shared};

/// A charge to decide by its script: its position and index, the increment to give back
/// first (if one ran), and the redirect its commands got (the script follows it).
type Redo = (usize, usize, Option<GiveBack>, Option<(Node, Value)>);

impl Shared {
    /// Charges `batch[i]` for each `i` of `plain` (all `plain::eligible`) by `deadline`:
    /// one result per index, in order.
    pub(super) async fn charge_plain(
        self: &Arc<Self>,
        batch: &[Charge],
        plain: &[usize],
        deadline: Instant,
    ) -> Vec<Result<Decision, StoreError>> {
        let now = now_us();
        let map = self.map.load_full();
        let mut by_node: Vec<(Node, Vec<usize>)> = Vec::new();
        let mut redo: Vec<Redo> = Vec::new();
        for (k, &i) in plain.iter().enumerate() {
            match map.owner(key_slot(batch[i].key.as_bytes())) {
                Some(node) => match by_node.iter_mut().find(|(n, _)| n == node) {
                    Some((_, owned)) => owned.push(k),
                    None => by_node.push((node.clone(), vec![k])),
                },
                None => redo.push((k, i, None, None)),
            }
        }
        let sent =
            by_node.iter().map(|(node, owned)| self.plain_on(node, batch, plain, owned, now, deadline));
        let mut results = vec![Err(StoreError::Timeout); plain.len()];
        let mut denied = Vec::new();
        for (keyed, redirected) in join_all(sent).await {
            for (k, result) in keyed.results {
                results[k] = result;
            }
            redo.extend(keyed.stale.into_iter().map(|(k, i, back)| (k, i, back, None)));
            denied.extend(keyed.denied);
            redo.extend(redirected);
        }
        self.give_back(denied);
        let again = redo.into_iter().map(|(k, i, back, first)| async move {
            if let Some(back) = back {
                let _ = self.give_back_one(&back, deadline).await;
            }
            (k, self.charge_part(batch, &[i], false, first, deadline).await.pop())
        });
        for (k, result) in join_all(again).await {
            results[k] = result.unwrap_or(Err(StoreError::Timeout));
        }
        results
    }

    /// The plain charges at positions `owned` (of `plain`) as one pipeline on `node`: what
    /// their replies say, by position, beside the charges whose commands were redirected.
    async fn plain_on(
        self: &Arc<Self>,
        node: &Node,
        batch: &[Charge],
        plain: &[usize],
        owned: &[usize],
        now: u64,
        deadline: Instant,
    ) -> (Keyed, Vec<Redo>) {
        let (pipe, at) = pipeline(owned.iter().map(|&k| &batch[plain[k]]), now);
        let count = at.last().map_or(0, |r| r.end);
        let values = match self.link(node).send_weighted(pipe, count, count, deadline).await {
            Ok(values) => values,
            Err(e) => {
                self.failed(&e);
                let e = StoreError::from(e);
                let results = owned.iter().map(|&k| (k, Err(e.clone()))).collect();
                return (Keyed { results, ..Keyed::default() }, Vec::new());
            }
        };
        let (mut keyed, mut redirected) = (Keyed::default(), Vec::new());
        for (&k, range) in owned.iter().zip(at) {
            let i = plain[k];
            let replies = values.get(range).unwrap_or(&[]);
            if let Some(first) = replies.iter().find(|v| Redirect::of(v, &node.0).is_some()) {
                let back = GiveBack::of_replies(&batch[i], now, replies);
                redirected.push((k, i, back, Some((node.clone(), first.clone()))));
                continue;
            }
            let mut sorted = Sorted::default();
            sorted.push(k, i, &batch[i], now, replies);
            keyed.absorb(k, sorted);
        }
        (keyed, redirected)
    }

    /// Gives `backs` back in a task of its own, each alone on its slot (redirects followed).
    fn give_back(self: &Arc<Self>, backs: Vec<GiveBack>) {
        if backs.is_empty() {
            return;
        }
        let shared = self.clone();
        tokio::spawn(async move {
            let deadline = Instant::now() + GIVE_BACK_TIMEOUT;
            join_all(backs.iter().map(|back| shared.give_back_one(back, deadline))).await;
        });
    }

    async fn give_back_one(
        self: &Arc<Self>,
        back: &GiveBack,
        deadline: Instant,
    ) -> Result<Value, StoreError> {
        let build = |pipe: &mut Pipeline, call: Call| {
            pipe.add_command(back.command(call));
        };
        self.send_alone(key_slot(back.key.as_bytes()), None, Lane::Charges, 1, deadline, build).await
    }
}

/// The results of one master's plain charges by position, the stale ones' give-backs and
/// the denials'.
#[derive(Default)]
struct Keyed {
    results: Vec<(usize, Result<Decision, StoreError>)>,
    stale: Vec<(usize, usize, Option<GiveBack>)>,
    denied: Vec<GiveBack>,
}

impl Keyed {
    fn absorb(&mut self, k: usize, sorted: Sorted) {
        self.results.extend(sorted.results.into_iter().map(|r| (k, r)));
        self.stale.extend(sorted.stale);
        self.denied.extend(sorted.denied);
    }
}
