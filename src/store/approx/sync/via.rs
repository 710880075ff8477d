//! Where a store's approximate calls are sent ([`Via`]): one connection lifecycle, or a
//! Redis Cluster's masters by slot; a wake's buckets cut into calls, and how many may be
//! outstanding at once.

use redis::{Pipeline, Value};
use tokio::time::Instant;

use crate::store::charge::StoreError;
use crate::store::redis::cluster::{key_slot, ClusterStore, Lane};
use crate::store::redis::link::Link;
use crate::store::redis::scripts::{send_entries, Call};

use super::call::{Item, CHUNK};

/// Sync calls outstanding at once per connection: one runs while the next travels, and
/// Redis serves other clients between them.
pub const CALLS_IN_FLIGHT: usize = 8;

/// Where a store's approximate calls are sent.
#[derive(Clone, Copy)]
pub enum Via<'a> {
    /// One connection lifecycle (one Redis node, the Sentinel master).
    Link(&'a Link),
    /// A Redis Cluster: a script call may only hold keys of one slot, so buckets go as one
    /// call per slot touched (up to [`CHUNK`] buckets each), each to its master, on the
    /// lane's connections (`cluster::approx`).
    Cluster(&'a ClusterStore, Lane),
}

impl Via<'_> {
    /// A wake's buckets cut into calls: runs of at most [`CHUNK`]; on a cluster, of one
    /// slot each (`items` sorted by slot first).
    pub(in crate::store::approx) fn chunks<'i>(&self, items: &'i mut [Item]) -> Vec<&'i [Item]> {
        match self {
            Via::Link(_) => items.chunks(CHUNK).collect(),
            Via::Cluster(..) => {
                items.sort_by_cached_key(|item| key_slot(item.key.as_bytes()));
                let items: &'i [Item] = items;
                items
                    .chunk_by(|a, b| key_slot(a.key.as_bytes()) == key_slot(b.key.as_bytes()))
                    .flat_map(|run| run.chunks(CHUNK))
                    .collect()
            }
        }
    }

    /// Calls outstanding at once: [`CALLS_IN_FLIGHT`] per connection, a few masters' worth
    /// on a cluster.
    pub(super) fn calls_in_flight(&self) -> usize {
        match self {
            Via::Link(_) => CALLS_IN_FLIGHT,
            Via::Cluster(..) => 3 * CALLS_IN_FLIGHT,
        }
    }

    /// Sends `count` commands of `slot` as one pipeline (`add` appends command `i`);
    /// a `NOSCRIPT` entry goes again once with `EVAL`. One reply per command.
    pub(super) async fn send(
        self,
        count: usize,
        slot: u16,
        deadline: Instant,
        add: impl Fn(&mut Pipeline, usize, Call),
    ) -> Vec<Result<Value, StoreError>> {
        match self {
            Via::Link(link) => send_entries(link, count, count, deadline, add).await,
            Via::Cluster(cluster, lane) => {
                cluster.send_entries(&vec![slot; count], lane, deadline, add).await
            }
        }
    }
}
