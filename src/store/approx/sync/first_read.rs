//! First reads (see `sync`'s module doc): the buckets of a request this instance has
//! never read, read on the request's path before they are decided, and folded in unless a
//! sync answered for them meanwhile.

use std::sync::atomic::Ordering;

use tokio::time::Instant;

use futures_util::future::join_all;

use crate::algorithm::{Hits, Params};
use crate::store::charge::{Charge, StoreError};
use crate::store::memory::now_us;
use crate::store::redis::cluster::key_slot;

use super::super::bucket::Bucket;
use super::super::table::{lock, Approx};
use super::super::window::{Counts, Unsent};
use super::call::{command, Item};
use super::reply::parse;
use super::via::Via;

impl Approx {
    /// The indexes of `batch` whose bucket this instance has never read (not held, never
    /// synced, or reset since): `sync::read_unread` reads them before they are decided.
    /// Peeks too: a peek answers what the bucket holds, so it must not answer an empty
    /// estimate of a bucket the other instances spent — nor an old one: a peek of a bucket
    /// last read a sync interval ago or more reads it again (a peek writes nothing, so a
    /// bucket only peeked is never synced; its reads come from here). Not a consume larger than any share
    /// of its bucket (`⌈limit / 2N⌉`): it is decided against Redis, whose call reads the
    /// bucket (`claim`), or denied without Redis when it is past the limit.
    pub fn unread(&self, batch: &[Charge]) -> Vec<usize> {
        let mut unread = Vec::new();
        let largest_share = |p: &Params| p.limit.div_ceil(self.instances().saturating_mul(2));
        let (now, interval) = (now_us(), self.settings.interval_us());
        for (i, charge) in batch.iter().enumerate() {
            if matches!(charge.hits, Hits::Consume(n) if n > largest_share(&charge.params)) {
                continue;
            }
            let peek = matches!(charge.hits, Hits::Peek);
            let shard = lock(&self.shards[self.shard_of(&charge.key)]);
            let stale = |b: &Bucket| b.read_at == 0 || peek && now.saturating_sub(b.read_at) >= interval;
            if shard.map.get(&*charge.key).is_none_or(stale) {
                unread.push(i);
            }
        }
        unread
    }

    /// Folds a first read of `key` (or a peek's read again: Redis's `counts` at `redis_now`,
    /// local `now`, the call's clock `offset`) into its bucket, made if needed — unless a
    /// newer answer was folded meanwhile, or a call carrying its increments is in flight (its answer folds), or
    /// a request holds it for a charge decided against Redis (its own read folds).
    pub(crate) fn seed(
        &self,
        key: &str,
        params: Params,
        counts: Counts,
        redis_now: u64,
        now: u64,
        offset: i64,
    ) {
        let mut shard = lock(&self.shards[self.shard_of(key)]);
        if !shard.map.contains_key(key) {
            self.make_room(&mut shard, redis_now, &[]);
            shard.map.insert(key.into(), Bucket::new(params, offset));
        }
        if let Some(bucket) = shard.map.get_mut(key) {
            // A first read, or a peek's read newer than what the bucket holds; never over a
            // call carrying its increments (that call's answer folds them).
            let newer = bucket.read_at == 0 || redis_now > bucket.base_at;
            if newer && bucket.inflight.is_empty() && !bucket.claimed {
                bucket.params = params;
                bucket.fold(counts, redis_now, now, offset);
            }
        }
    }

    /// Reads, before they are decided, the buckets of `batch` this instance has never read
    /// (see the module doc), by `deadline`, on the request path's connections (`via`). A
    /// read that fails leaves its bucket unread (held to a share until its first sync).
    pub async fn read_unread(&self, via: Via<'_>, batch: &[Charge], deadline: Instant) {
        let unread = self.unread(batch);
        if unread.is_empty() {
            return;
        }
        let mut items: Vec<Item> = Vec::with_capacity(unread.len());
        for i in unread {
            let charge = &batch[i];
            if items.iter().all(|item| *item.key != *charge.key) {
                items.push(Item {
                    key: charge.key.as_str().into(),
                    params: charge.params,
                    unsent: Unsent::default(),
                    orphan: false,
                });
            }
        }
        self.counters.keys_read.fetch_add(items.len() as u64, Ordering::Relaxed);
        let chunks = via.chunks(&mut items);
        let calls = chunks.iter().map(|chunk| async {
            let sent = now_us();
            let slot = key_slot(chunk[0].key.as_bytes());
            let mut replies = via.send(1, slot, deadline, |pipe, _, call| {
                pipe.add_command(command(chunk, call, self.settings.window_keys));
            }).await;
            let answered = now_us();
            let reply = replies.pop().unwrap_or(Err(StoreError::Server("no reply for a read".into())));
            match reply.and_then(|value| parse(value, chunk.len())) {
                Ok((redis_now, counts)) => {
                    let offset = self.clock(redis_now, sent + answered.saturating_sub(sent) / 2);
                    for (item, counts) in chunk.iter().zip(counts) {
                        self.seed(&item.key, item.params, counts, redis_now, answered, offset);
                    }
                    self.answered(answered);
                    self.counters.first_reads_ok.fetch_add(chunk.len() as u64, Ordering::Relaxed);
                }
                Err(error) => {
                    tracing::debug!(%error, buckets = chunk.len(), "approximate first read failed: held to a share");
                    self.counters.first_reads_failed.fetch_add(chunk.len() as u64, Ordering::Relaxed);
                }
            }
        });
        // The request's own deadline bounds the wait; a call cut short changes nothing
        // shared (its answer, if any, is not folded).
        let _ = tokio::time::timeout_at(deadline, join_all(calls)).await;
    }
}
