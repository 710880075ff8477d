//! The calls of a claim (`approx::claim`) on the request path: its buckets' increments
//! written before the exact charge, and the buckets read back after it — `approx.lua` calls
//! as a sync's, on the request path's connections and by the request's deadline. And the
//! scripts those calls and first reads use, loaded once before the instance is ready: a
//! request's first calls then pay no `NOSCRIPT` round trip within its store timeout.

use futures_util::future::join_all;
use tokio::time::Instant;

use std::sync::atomic::Ordering;

use redis::Value;

use crate::store::charge::StoreError;
use crate::store::memory::now_us;
use crate::store::redis::cluster::key_slot;
use crate::store::redis::scripts::{APPROX_LUA, BATCH_LUA, FIXED_LUA, JOINT_LUA, SLIDING_LUA};

use super::super::claim::Read;
use super::super::table::Approx;
use super::call::{command, Item};
use super::heartbeat::SyncTarget;
use super::reply::parse;
use super::via::Via;

impl Approx {
    /// Sends `items` (writes, or reads when their increments are empty) as `approx.lua`
    /// calls by `deadline`: every bucket's answer, by key, or the first error (a call that
    /// timed out may have run).
    pub async fn exchange(
        &self,
        via: Via<'_>,
        mut items: Vec<Item>,
        deadline: Instant,
    ) -> Result<Vec<(Box<str>, Read)>, StoreError> {
        let chunks = via.chunks(&mut items);
        let window_keys = self.settings.window_keys;
        let calls = chunks.iter().map(|chunk| async move {
            let sent = now_us();
            let slot = key_slot(chunk[0].key.as_bytes());
            let mut replies = via
                .send(1, slot, deadline, |pipe, _, call| {
                    pipe.add_command(command(chunk, call, window_keys));
                })
                .await;
            let answered = now_us();
            let reply =
                replies.pop().unwrap_or(Err(StoreError::Server("no reply for a claim's call".into())));
            let (redis_now, counts) = reply.and_then(|value| parse(value, chunk.len()))?;
            let offset = self.clock(redis_now, sent + answered.saturating_sub(sent) / 2);
            self.answered(answered);
            let read = |counts| Read { counts, redis_now, answered, offset };
            let reads: Vec<(Box<str>, Read)> =
                chunk.iter().zip(counts).map(|(item, counts)| (item.key.clone(), read(counts))).collect();
            Ok::<_, StoreError>(reads)
        });
        let answers =
            tokio::time::timeout_at(deadline, join_all(calls)).await.map_err(|_| StoreError::Timeout)?;
        let mut reads = Vec::with_capacity(items.len());
        for answer in answers {
            reads.extend(answer?);
        }
        Ok(reads)
    }
}

impl Approx {
    /// Loads (`SCRIPT LOAD`) the scripts of first reads and claims — `approx.lua`, the
    /// window scripts, `joint.lua` and `batch.lua` — on the heartbeat's node (on a cluster,
    /// its master; the others load theirs on first use). Tried again next wake if it fails.
    pub(super) async fn load_scripts(&self, via: Via<'_>, target: &SyncTarget, deadline: Instant) {
        let sources = [APPROX_LUA.source(), SLIDING_LUA, FIXED_LUA, JOINT_LUA, BATCH_LUA];
        let slot = key_slot(target.instances_key.as_bytes());
        let replies = via
            .send(sources.len(), slot, deadline, |pipe, i, _| {
                pipe.add_command(redis::cmd("SCRIPT").arg("LOAD").arg(sources[i]).clone());
            })
            .await;
        if replies.iter().all(|r| matches!(r, Ok(Value::BulkString(_) | Value::SimpleString(_)))) {
            self.scripts_loaded.store(true, Ordering::Relaxed);
        }
    }
}
