//! `DEL` on a Redis Cluster, and an operator's one command on one key (`Reset::command`): one command per key, on the master of its slot, following
//! redirects as charges do. Unlike a charge, a `DEL` may be sent again after a timeout
//! (deleting twice is deleting once), but it is not: the caller answers the failure and the
//! operator may reset again.

use std::sync::Arc;

use futures_util::future::join_all;
use redis::{Pipeline, Value};
use tokio::time::Instant;

use super::super::super::charge::StoreError;
use super::super::super::remote::Reset;
use super::super::reply::deleted;
use super::super::scripts::Call;
use super::super::slots::key_slot;
use super::shared::{ClusterStore, Lane, Shared};

impl ClusterStore {
    /// Deletes every key, each on its own master, all at once; the first failure, if any.
    pub(crate) async fn delete(&self, keys: &[String], deadline: Instant) -> Result<(), StoreError> {
        let results = join_all(keys.iter().map(|key| self.shared.del_one(key, deadline))).await;
        results.into_iter().collect()
    }
}

impl Shared {
    async fn del_one(self: &Arc<Self>, key: &str, deadline: Instant) -> Result<(), StoreError> {
        let slot = key_slot(key.as_bytes());
        let build = |pipe: &mut Pipeline, _: Call| {
            pipe.add_command(redis::cmd("DEL").arg(key).to_owned());
        };
        deleted(self.send_alone(slot, None, Lane::Charges, 1, deadline, build).await?)
    }
}

impl Reset for ClusterStore {
    async fn reset(&self, keys: &[String], deadline: Instant) -> Result<(), StoreError> {
        self.delete(keys, deadline).await
    }

    async fn command(&self, key: &str, command: redis::Cmd, deadline: Instant) -> Result<Value, StoreError> {
        let build = |pipe: &mut Pipeline, _: Call| {
            pipe.add_command(command.clone());
        };
        match self.shared.send_alone(key_slot(key.as_bytes()), None, Lane::Aside, 1, deadline, build).await? {
            Value::ServerError(e) => Err(StoreError::Server(format!("{e:?}"))),
            value => Ok(value),
        }
    }
}
