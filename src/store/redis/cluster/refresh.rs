//! The slot map of a cluster store, kept fresh: refreshed in a background task after a
//! `MOVED`, a `READONLY` or a failed call (the master may have failed over), and awaited
//! by a charge whose slot has no known owner.

use std::sync::Arc;
use std::time::Duration;

use rand::seq::SliceRandom;
use redis::Pipeline;
use tokio::time::Instant;

use super::super::super::charge::StoreError;
use super::super::connect::host_port;
use super::super::link::SendError;
use super::super::slots::{Node, SlotMap};
use super::shared::Shared;

/// Longest one `CLUSTER SLOTS` question may take.
const REFRESH_TIMEOUT: Duration = Duration::from_secs(1);
/// Fewest time between two map refreshes started by failures (not by `MOVED`/`READONLY`).
const REFRESH_GAP: Duration = Duration::from_millis(200);

impl Shared {
    /// A call failed: the master may have failed over, so learn the map again soon.
    pub(super) fn failed(self: &Arc<Self>, e: &SendError) {
        if matches!(e, SendError::NotSent(_) | SendError::MaybeRan(StoreError::Unavailable(_))) {
            self.start_refresh(false);
        }
    }

    /// The owner of `slot` after a map refresh (waited for until `deadline`).
    pub(super) async fn refreshed_owner(
        self: &Arc<Self>,
        slot: u16,
        deadline: Instant,
    ) -> Result<Node, StoreError> {
        let refreshed = self.refreshed.notified();
        tokio::pin!(refreshed);
        refreshed.as_mut().enable();
        self.start_refresh(true);
        if tokio::time::timeout_at(deadline, refreshed).await.is_err() {
            return Err(StoreError::Timeout);
        }
        self.map
            .load()
            .owner(slot)
            .cloned()
            .ok_or_else(|| StoreError::Unavailable(format!("no redis cluster master known for slot {slot}")))
    }

    /// Starts a map refresh in a background task (never inside a request: a cancelled
    /// request must not leave a refresh half done), unless one runs; `urgent` skips the
    /// minimum gap between refreshes.
    pub(super) fn start_refresh(self: &Arc<Self>, urgent: bool) {
        {
            let mut state = self.refresh.lock().unwrap_or_else(|e| e.into_inner());
            let recent = state.started.is_some_and(|t| t.elapsed() < REFRESH_GAP);
            if state.running || (recent && !urgent) {
                return;
            }
            state.running = true;
            state.started = Some(Instant::now());
        }
        tokio::spawn(self.clone().refresh());
    }

    /// Asks the known masters (in random order), then the seeds, for `CLUSTER SLOTS`; the
    /// first answer becomes the map, and lifecycles of nodes no longer masters are dropped.
    async fn refresh(self: Arc<Self>) {
        let mut candidates: Vec<Node> = self.map.load().nodes().to_vec();
        candidates.shuffle(&mut rand::rng());
        for seed in &self.seeds {
            if let Some(node) = host_port(seed) {
                candidates.push(node);
            }
        }
        for node in candidates {
            let mut pipe = Pipeline::with_capacity(1);
            pipe.add_command(redis::cmd("CLUSTER").arg("SLOTS").to_owned());
            let reply = self.link(&node).send(pipe, 1, Instant::now() + REFRESH_TIMEOUT).await;
            let Ok(mut values) = reply else { continue };
            let Some(map) = values.pop().and_then(|v| SlotMap::from_cluster_slots(&v, &node.0)) else {
                continue;
            };
            if map.is_empty() {
                continue;
            }
            if **self.map.load() != map {
                tracing::info!(masters = map.nodes().len(), "redis cluster slot map updated");
            }
            self.links().retain(|node, _| map.nodes().contains(node));
            self.sync_links
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .retain(|node, _| map.nodes().contains(node));
            self.map.store(Arc::new(map));
            break;
        }
        self.refresh.lock().unwrap_or_else(|e| e.into_inner()).running = false;
        self.refreshed.notify_waiters();
    }
}
