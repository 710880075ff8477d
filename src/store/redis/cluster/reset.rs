//! `DEL` on a Redis Cluster: one command per key, on the master of its slot, following
//! redirects as charges do. Unlike a charge, a `DEL` may be sent again after a timeout
//! (deleting twice is deleting once), but it is not: the caller answers the failure and the
//! operator may reset again.

use std::sync::Arc;

use futures_util::future::join_all;
use redis::{Pipeline, Value};
use tokio::time::Instant;

use super::{key_slot, Redirect, Shared, StoreError, MAX_REDIRECTS};
use crate::store::reset::deleted;

impl super::ClusterStore {
    /// Deletes every key, each on its own master, all at once; the first failure, if any.
    pub(crate) async fn delete(&self, keys: &[String], deadline: Instant) -> Result<(), StoreError> {
        let results = join_all(keys.iter().map(|key| self.shared.del_one(key, deadline))).await;
        results.into_iter().collect()
    }
}

impl Shared {
    async fn del_one(self: &Arc<Self>, key: &str, deadline: Instant) -> Result<(), StoreError> {
        let slot = key_slot(key.as_bytes());
        let mut node = match self.map.load().owner(slot) {
            Some(node) => node.clone(),
            None => self.refreshed_owner(slot, deadline).await?,
        };
        let mut asking = false;
        for _ in 0..=MAX_REDIRECTS {
            let mut pipe = Pipeline::with_capacity(2);
            if asking {
                pipe.add_command(redis::cmd("ASKING"));
            }
            pipe.add_command(redis::cmd("DEL").arg(key).to_owned());
            let count = 1 + usize::from(asking);
            let value = match self.link(&node).send(pipe, count, deadline).await {
                Ok(mut values) => values.pop().unwrap_or(Value::Nil),
                Err(e) => {
                    self.failed(&e);
                    return Err(e.into());
                }
            };
            match Redirect::of(&value, &node.0) {
                None | Some(Redirect::NoScript) => return deleted(value),
                Some(redirect) => self.follow(redirect, slot, &mut node, &mut asking, deadline).await?,
            }
        }
        Err(StoreError::Server(format!("more than {MAX_REDIRECTS} cluster redirects for slot {slot}")))
    }
}
