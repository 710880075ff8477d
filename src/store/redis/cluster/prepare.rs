//! A cluster store before its instance reports ready: the slot map learnt and every
//! master prepared as one server is (`redis::prepare`).

use futures_util::future::join_all;
use tokio::time::Instant;

use super::super::super::charge::StoreError;
use super::super::prepare::prepare_link;
use super::shared::ClusterStore;

impl ClusterStore {
    /// Learns the slot map if none is known, then prepares every master's charge
    /// connections ([`prepare_link`]). Answers how many masters were prepared; an error
    /// names the first that was not.
    pub async fn prepare(&self, deadline: Instant) -> Result<usize, StoreError> {
        let shared = &self.shared;
        if shared.map.load().is_empty() {
            shared.refreshed_owner(0, deadline).await?;
        }
        let map = shared.map.load_full();
        let links: Vec<_> = map.nodes().iter().map(|node| shared.link(node)).collect();
        let done = join_all(links.iter().map(|link| prepare_link(link, deadline))).await;
        done.into_iter().find_map(Result::err).map_or(Ok(links.len()), Err)
    }
}
