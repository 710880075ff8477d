//! What every part of the cluster store shares: its settings, the store itself
//! (`ClusterStore`, whose calls are `cluster`'s and its files'), and `Shared`, the state
//! the store's calls and its background refresh share — the seeds, one link per master
//! (and approximate mode's own, `Lane`), the slot map, the scripts, health. Made here: a
//! master's link, on first use. No routing: that is `route`'s and `redirect`'s.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

use arc_swap::ArcSwap;
use redis::ConnectionInfo;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::super::connect::{address, connect_to, redact_url, with_address};
use super::super::health::Health;
use super::super::link::{Link, LinkSettings};
use super::super::scripts::Scripts;
use super::super::slots::{Node, SlotMap};
use super::super::tls::Tls;

/// How to reach a Redis Cluster.
#[derive(Clone)]
pub struct ClusterSettings {
    /// Seed nodes: `host:port` or `redis://[user:password@]host:port` (`rediss://` for TLS).
    /// Any reachable node is enough: the others are discovered, and reached with the first
    /// seed's credentials and TLS mode.
    pub nodes: Vec<String>,
    /// The CA and client certificate for `rediss://` nodes (every node, discovered ones too).
    pub tls: Tls,
    /// How connections to each master are kept.
    pub link: LinkSettings,
}

impl fmt::Debug for ClusterSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClusterSettings")
            .field("nodes", &redacted(&self.nodes))
            .field("link", &self.link)
            .finish()
    }
}

/// Redis-Cluster-backed store.
pub struct ClusterStore {
    pub(super) shared: Arc<Shared>,
    /// Which path decides window consumes (`--redis-windows`).
    pub(super) windows: super::super::plain::Windows,
}

/// Which connections of a master a command rides: the charges' shared ones, or
/// approximate mode's own (see `Shared::sync_links`); `Aside`: the charges' first live one
/// without taking a turn of their round robin (an operator's command, `Link::send_aside`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lane {
    Charges,
    Sync,
    Aside,
}

/// The state a cluster store's calls and its background map refresh share.
pub(super) struct Shared {
    pub(super) seeds: Vec<ConnectionInfo>,
    /// The TLS files every new connection reads again.
    pub(super) tls: Tls,
    pub(super) settings: LinkSettings,
    /// One lifecycle per master, by `host:port`.
    pub(super) links: Mutex<HashMap<Node, Arc<Link>>>,
    /// Approximate mode's own connection per master (a sync of many buckets must not hold
    /// up the charges pipelined behind it).
    pub(super) sync_links: Mutex<HashMap<Node, Arc<Link>>>,
    pub(super) map: ArcSwap<SlotMap>,
    pub(super) refresh: Mutex<RefreshState>,
    pub(super) refreshed: Notify,
    pub(super) scripts: Scripts,
    pub(super) health: Health,
    pub(super) shown: Vec<String>,
}

/// Whether a map refresh is running, and when the last one started.
#[derive(Default)]
pub(super) struct RefreshState {
    pub(super) running: bool,
    pub(super) started: Option<Instant>,
}

impl fmt::Debug for ClusterStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClusterStore").field("nodes", &self.shared.shown).finish_non_exhaustive()
    }
}

impl Shared {
    pub(super) fn links(&self) -> MutexGuard<'_, HashMap<Node, Arc<Link>>> {
        self.links.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The lifecycle of `node`, made on first use (with the first seed's credentials and TLS).
    pub(super) fn link(&self, node: &Node) -> Arc<Link> {
        self.link_in(&self.links, node, self.settings)
    }

    /// Approximate mode's own connection to `node` (see `sync_links`).
    pub(super) fn sync_link(&self, node: &Node) -> Arc<Link> {
        self.link_in(&self.sync_links, node, self.settings.for_sync())
    }

    /// The link of `node` in `links`, made with `settings` if there is none yet.
    fn link_in(
        &self,
        links: &Mutex<HashMap<Node, Arc<Link>>>,
        node: &Node,
        settings: LinkSettings,
    ) -> Arc<Link> {
        let mut links = links.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(link) = links.get(node) {
            return link.clone();
        }
        let info = with_address(&self.seeds[0], &node.0, node.1);
        let link = Arc::new(Link::new(settings, address(&info), connect_to(info, self.tls.clone())));
        links.insert(node.clone(), link.clone());
        link
    }
}

/// The nodes as shown: without passwords.
pub(super) fn redacted(nodes: &[String]) -> Vec<String> {
    nodes.iter().map(|n| redact_url(n)).collect()
}
