//! The background sync of approximate mode: one task per store, woken every half interval,
//! and the first read of a bucket on a request's path.
//!
//! **Work per wake follows what changed.** A bucket is sent only when this instance has
//! increments for it (admissions or refunds since its last send); each write also answers
//! the bucket's counts, which is its read. A bucket nobody here charges costs nothing,
//! however full it is. Each shard keeps the keys of its buckets with something to send
//! (oldest first), so a wake walks those, not every bucket held. When increments go: hot
//! buckets on every wake (half an interval), low and normal ones every full interval (the
//! grid every instance shares), idle ones once their oldest increment waited 4 intervals,
//! on whichever wake that falls (`bucket::Tier`).
//!
//! **Calls stand alone.** A wake's buckets go as `approx.lua` calls of up to [`CHUNK`]
//! buckets, at most [`CALLS_IN_FLIGHT`] outstanding on the sync's connection, each judged
//! by its own deadline ([`sync_deadline`],
//! not the store timeout) and folded as soon as it answers, with its own clock offset.
//! A call that fails puts its increments back for the next wake; once one fails for want
//! of Redis, the calls not yet sent in that wake are not sent (they certainly did not run).
//! A call that timed out or lost its connection after it was written may have run: its
//! increments are written again with the next wake, so Redis may count them twice — an
//! error toward denying, never toward admitting (README, "Approximate mode").
//!
//! **A bounded wake.** A wake sends at most [`MAX_PER_WAKE`] buckets; the rest wait, oldest
//! first, and are counted as the backlog (`tollgate_approximate_backlog_*`). A bucket that
//! waits keeps deciding within its share, so a backlog costs admissions, never the bound.
//!
//! On a Redis Cluster a script call may only hold keys of one slot: the buckets go as one
//! call per slot touched (still at most [`CHUNK`] each), each sent to its master
//! ([`Via::Cluster`]); a `MOVED`/`ASK` entry did not run and follows its redirect alone.
//!
//! **The heartbeat**, every full interval: this instance's id scored with Redis's time in
//! a sorted set, entries older than the liveness span dropped, the live count read back —
//! the `N` of the share rule (on a cluster, on the master of that key's slot). Plain
//! commands, sent as a call of their own, only where an approximate domain is configured
//! or buckets are held: an exact-only deployment sends Redis nothing more. The first beat
//! goes at start (after a `TIME`, so its score is Redis's clock too).
//!
//! **First reads.** A bucket this instance has never read is read on the request's path
//! before it is decided (`read_unread`): a new instance, or a new key, cannot spend
//! counts other instances wrote. A read that does not answer by the request's deadline
//! leaves the bucket held to a share of the whole limit until its first sync.
//!
//! The task owns everything in flight: no request waits for it, and stopping it sends the
//! increments still waiting once and takes this instance out of the heartbeat set.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures_util::future::{join, join_all};
use redis::{Pipeline, Value};
use tokio::sync::Semaphore;
use tokio::time::Instant;

use crate::algorithm::{Algorithm, Params};
use crate::store::charge::{Charge, StoreError};
use crate::store::memory::now_us;
use crate::store::redis::cluster::{key_slot, ClusterStore, Lane};
use crate::store::redis::link::Link;
use crate::store::redis::scripts::{send_entries, Call, APPROX_LUA};

use super::bucket::{Counts, Tier, Unsent};
use super::{lock, queue, Approx, Orphan};

/// What a wake of the sync sends: the grid of half intervals, every second wake a full one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wake {
    /// Hot buckets' increments, and idle ones' that waited 4 intervals.
    Half,
    /// Also low and normal buckets' increments, and the heartbeat.
    Full,
    /// Everything (the last wake, when the instance stops).
    Last,
}

impl Wake {
    /// Whether a bucket of `tier` whose oldest increment waited `waited` µs is sent on
    /// this wake (`interval`: the sync interval, µs). Hot, low and normal buckets go on the
    /// grid every instance shares, so that their views are about equally old; idle ones
    /// (below a tenth of their limit, where a delay costs nothing of the bound) once they
    /// waited 4 intervals, on whichever wake that falls — spread over the wakes, not all on
    /// one.
    fn sends(self, tier: Tier, waited: u64, interval: u64) -> bool {
        match (self, tier) {
            (Wake::Last, _) | (_, Tier::Hot) => true,
            (Wake::Full, Tier::Low | Tier::Normal) => true,
            (_, Tier::Idle) => waited.saturating_add(interval / 2) >= Tier::Idle.send_after(interval),
            (Wake::Half, _) => false,
        }
    }
}

/// A spent bucket (its counts expired, nothing to send) synced within this long stays: it
/// is an idle bucket whose next charge needs no first read. Older, it is dropped.
pub const FORGET_AFTER_US: u64 = 30_000_000;

/// How long a sync call may take before it counts as failed: 4 intervals, at least 1 s.
pub fn sync_deadline(interval: Duration) -> Duration {
    (interval * 4).max(Duration::from_secs(1))
}

/// Buckets per script call: a call runs alone on the server, so it is kept short (~1 ms).
pub const CHUNK: usize = 512;

/// Sync calls outstanding at once per connection: one runs while the next travels, and
/// Redis serves other clients between them.
pub const CALLS_IN_FLIGHT: usize = 8;

/// Most buckets one wake sends (32 calls); the rest wait for the next wake, oldest first.
pub const MAX_PER_WAKE: usize = 32 * CHUNK;

/// One bucket sent in a tick.
#[derive(Debug, Clone)]
pub struct Item {
    pub key: Box<str>,
    pub params: Params,
    /// Increments to add, by window (empty: a read).
    pub unsent: Unsent,
    /// An evicted bucket's increments: written, its answer not folded anywhere.
    pub orphan: bool,
}

/// What the task needs besides the table: where to send, and how to name things there.
#[derive(Debug, Clone)]
pub struct SyncTarget {
    /// The sorted set of live instances (`<prefix>tg:approx:instances`).
    pub instances_key: String,
    /// This instance's member in it (random per process).
    pub id: String,
}

impl SyncTarget {
    pub fn new(key_prefix: &str) -> SyncTarget {
        SyncTarget {
            instances_key: format!("{key_prefix}tg:approx:instances"),
            id: format!("{:016x}", rand::random::<u64>()),
        }
    }
}

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
    pub(super) fn chunks<'i>(&self, items: &'i mut [Item]) -> Vec<&'i [Item]> {
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
    fn calls_in_flight(&self) -> usize {
        match self {
            Via::Link(_) => CALLS_IN_FLIGHT,
            Via::Cluster(..) => 3 * CALLS_IN_FLIGHT,
        }
    }

    /// Sends `count` commands of `slot` as one pipeline (`add` appends command `i`);
    /// a `NOSCRIPT` entry goes again once with `EVAL`. One reply per command.
    async fn send(
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

impl Approx {
    /// Takes what a wake sends (see [`Wake`]), at most `budget` buckets, oldest first:
    /// buckets with increments due, and evicted buckets' increments. Moves their
    /// increments to `inflight`. On full wakes also sweeps one shard (in turn) of buckets
    /// with nothing left to say that were not synced within [`FORGET_AFTER_US`].
    pub fn collect(&self, now: u64, wake: Wake, budget: usize) -> Vec<Item> {
        let shards = self.shards.len();
        let interval = self.settings.interval_us();
        let first = self.next_shard.fetch_add(1, Ordering::Relaxed) % shards;
        let (mut items, mut waiting, mut oldest) = (Vec::new(), 0u64, u64::MAX);
        for k in 0..shards {
            let mut shard = lock(&self.shards[(first + k) % shards]);
            if k == 0 && wake != Wake::Half {
                shard.map.retain(|_, b| {
                    !b.is_spent(b.redis_now(now))
                        || b.queued
                        || now.saturating_sub(b.read_at) < FORGET_AFTER_US
                });
            }
            let orphans = std::mem::take(&mut shard.orphans);
            items.extend(orphans.into_iter().map(|o| Item {
                key: o.key,
                params: o.params,
                unsent: o.unsent,
                orphan: true,
            }));
            let dirty = std::mem::take(&mut shard.dirty);
            let mut keep = Vec::new();
            for key in dirty {
                let Some(bucket) = shard.map.get_mut(&*key) else { continue };
                if bucket.pending.is_empty() {
                    bucket.queued = false;
                    continue;
                }
                let due = wake.sends(bucket.tier, now.saturating_sub(bucket.dirty_since), interval);
                if !due || items.len() >= budget {
                    waiting += u64::from(due);
                    oldest = oldest.min(bucket.dirty_since);
                    keep.push(key);
                    continue;
                }
                bucket.queued = false;
                let unsent = bucket.send();
                items.push(Item { key, params: bucket.params, unsent, orphan: false });
            }
            shard.dirty = keep;
        }
        self.backlog.store(waiting, Ordering::Relaxed);
        self.oldest_unsent.store(if oldest == u64::MAX { 0 } else { oldest }, Ordering::Relaxed);
        items
    }

    /// Folds a call's answer (`counts` per item, in order): Redis ran it at `redis_now`;
    /// we sent it at local `sent` and had the answer at `answered`.
    pub(super) fn settle_ok(
        &self,
        items: &[Item],
        counts: &[Counts],
        redis_now: u64,
        sent: u64,
        answered: u64,
    ) {
        let offset = self.clock(redis_now, sent + answered.saturating_sub(sent) / 2);
        for (item, counts) in items.iter().zip(counts) {
            if item.orphan {
                continue;
            }
            let mut shard = lock(&self.shards[self.shard_of(&item.key)]);
            if let Some(bucket) = shard.map.get_mut(&*item.key) {
                bucket.fold(*counts, redis_now, answered, offset);
            }
        }
        self.answered(answered);
        self.counters.syncs_ok.fetch_add(1, Ordering::Relaxed);
    }

    /// Puts a failed call's increments back, for the next wake: into the bucket (the one
    /// that sent them, or its successor if it was evicted and made anew meanwhile), else
    /// as an orphan's.
    pub(super) fn settle_failed(&self, items: Vec<Item>, now: u64) {
        for item in items {
            let mut shard = lock(&self.shards[self.shard_of(&item.key)]);
            let shard = &mut *shard;
            match shard.map.get_full_mut(&*item.key) {
                Some((_, key, bucket)) if !item.orphan => {
                    bucket.unsend(item.unsent, now);
                    queue(key, bucket, &mut shard.dirty);
                }
                _ if item.unsent.is_empty() => {}
                _ => self.orphan(shard, Orphan { key: item.key, params: item.params, unsent: item.unsent }),
            }
        }
        self.failed(now);
    }

    /// One wake: collect, send, fold; on full wakes (see [`Wake`]) the heartbeat is beaten
    /// too, when `heartbeat` (an approximate domain is configured) or buckets are held.
    /// `leave`: this is the last wake — take this instance out of the heartbeat set.
    /// Returns how many buckets were sent.
    pub async fn tick(
        &self,
        via: Via<'_>,
        target: &SyncTarget,
        wake: Wake,
        heartbeat: bool,
        budget: usize,
    ) -> usize {
        let beat = wake == Wake::Full && (heartbeat || !self.is_empty());
        let deadline = sync_deadline(self.settings.interval);
        if beat && !self.offset_known.load(Ordering::Relaxed) {
            self.learn_clock(via, target, Instant::now() + deadline).await;
        }
        let mut items = self.collect(now_us(), wake, budget);
        if items.is_empty() && !beat {
            return 0;
        }
        let writes = items.iter().filter(|i| !i.unsent.is_empty()).count() as u64;
        self.counters.keys_written.fetch_add(writes, Ordering::Relaxed);
        let chunks = via.chunks(&mut items);
        let permits = Semaphore::new(via.calls_in_flight());
        let gone = AtomicBool::new(false);
        let calls = chunks.iter().map(|chunk| async {
            let _permit = permits.acquire().await;
            if gone.load(Ordering::Relaxed) {
                // Redis did not answer this wake's earlier call: this one was not sent.
                self.settle_failed(chunk.to_vec(), now_us());
                return;
            }
            let sent = now_us();
            let slot = key_slot(chunk[0].key.as_bytes());
            let mut replies =
                via.send(1, slot, Instant::now() + deadline, |pipe, _, call| {
                pipe.add_command(command(chunk, call));
            }).await;
            let answered = now_us();
            let reply = replies.pop().unwrap_or(Err(StoreError::Server("no reply for a sync call".into())));
            match reply.and_then(|value| parse(value, chunk.len())) {
                Ok((redis_now, counts)) => self.settle_ok(chunk, &counts, redis_now, sent, answered),
                Err(error) => {
                    if error.is_unreachable() {
                        gone.store(true, Ordering::Relaxed);
                    }
                    if self.failing_since.load(Ordering::Relaxed) == 0 {
                        tracing::warn!(%error, buckets = chunk.len(), "approximate sync call failed: increments kept for the next wake");
                    }
                    self.settle_failed(chunk.to_vec(), answered);
                }
            }
        });
        let heartbeat = async {
            if beat {
                self.beat(via, target, Instant::now() + deadline).await;
            }
        };
        let started = Instant::now();
        join(heartbeat, join_all(calls)).await;
        tracing::trace!(
            buckets = items.len(),
            elapsed_ms = started.elapsed().as_millis() as u64,
            "approximate sync wake"
        );
        items.len()
    }

    /// Beats the heartbeat (see the module doc) and takes its answer: the live count.
    async fn beat(&self, via: Via<'_>, target: &SyncTarget, deadline: Instant) {
        let at = self.redis_now(now_us());
        let liveness = liveness_us(self.settings.interval_us());
        let slot = key_slot(target.instances_key.as_bytes());
        let add = |pipe: &mut Pipeline, i: usize, _: Call| {
            pipe.add_command(beat_command(target, i, at, liveness));
        };
        let replies = via.send(BEAT.len(), slot, deadline, add).await;
        let now = now_us();
        match replies.last() {
            Some(Ok(Value::Int(live))) => {
                self.beaten(u64::try_from(*live).unwrap_or(1), now);
                self.counters.syncs_ok.fetch_add(1, Ordering::Relaxed);
            }
            other => {
                // N stays what it was: a heartbeat key's master down must not make this
                // instance believe itself alone.
                let error = match other {
                    Some(Err(e)) => e.to_string(),
                    other => format!("unexpected heartbeat reply {other:?}"),
                };
                tracing::debug!(%error, "approximate heartbeat failed");
                self.failed(now);
            }
        }
    }

    /// Asks Redis's clock (`TIME`), so that the first heartbeat is scored in it too.
    async fn learn_clock(&self, via: Via<'_>, target: &SyncTarget, deadline: Instant) {
        let slot = key_slot(target.instances_key.as_bytes());
        let sent = now_us();
        let replies = via
            .send(1, slot, deadline, |pipe, _, _| {
                pipe.add_command(redis::cmd("TIME"));
            })
            .await;
        let answered = now_us();
        if let Some(Ok(Value::Array(parts))) = replies.first() {
            let number = |v: Option<&Value>| match v {
                Some(Value::BulkString(b)) => std::str::from_utf8(b).ok().and_then(|s| s.parse::<u64>().ok()),
                Some(Value::Int(i)) => u64::try_from(*i).ok(),
                _ => None,
            };
            if let (Some(secs), Some(micros)) = (number(parts.first()), number(parts.get(1))) {
                self.clock(
                    secs.saturating_mul(1_000_000).saturating_add(micros),
                    sent + (answered - sent) / 2,
                );
            }
        }
    }

    /// Takes this instance out of the heartbeat set (it is stopping: the others' `N`
    /// drops at their next beat instead of after the liveness span).
    pub async fn leave(&self, via: Via<'_>, target: &SyncTarget, deadline: Instant) {
        let slot = key_slot(target.instances_key.as_bytes());
        let add = |pipe: &mut Pipeline, _: usize, _: Call| {
            pipe.add_command(redis::cmd("ZREM").arg(&target.instances_key).arg(&target.id).clone());
        };
        via.send(1, slot, deadline, add).await;
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
                pipe.add_command(command(chunk, call));
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

/// The heartbeat: four commands in one call (plain commands, not a script: `INFO
/// commandstats` tells them from syncs). The last answers the live instances.
const BEAT: [&str; 4] = ["ZADD", "ZREMRANGEBYSCORE", "PEXPIRE", "ZCARD"];

/// Command `i` of the heartbeat at `now` (Redis clock, µs).
fn beat_command(target: &SyncTarget, i: usize, now: u64, liveness: u64) -> redis::Cmd {
    let mut cmd = redis::cmd(BEAT[i]);
    cmd.arg(&target.instances_key);
    match i {
        0 => cmd.arg(now).arg(&target.id),
        1 => cmd.arg("-inf").arg(now.saturating_sub(liveness + 1)),
        2 => cmd.arg(liveness.div_ceil(1000).saturating_mul(2)),
        _ => &mut cmd,
    };
    cmd
}

/// How long after its last beat an instance counts as live: 4 intervals, at least 1 s.
fn liveness_us(interval: u64) -> u64 {
    interval.saturating_mul(4).max(1_000_000)
}

/// One `approx.lua` call for `items` (see the script for the layout).
fn command(items: &[Item], call: Call) -> redis::Cmd {
    let (name, body) = match call {
        Call::Sha => ("EVALSHA", APPROX_LUA.sha()),
        Call::Source => ("EVAL", APPROX_LUA.source()),
    };
    let mut cmd = redis::cmd(name);
    cmd.arg(body).arg(items.len());
    for item in items {
        cmd.arg(&*item.key);
    }
    cmd.arg("").arg("").arg("").arg("").arg("").arg("");
    for item in items {
        let algorithm = if item.params.algorithm == Algorithm::SlidingWindow { 1 } else { 2 };
        let u = item.unsent;
        cmd.arg(algorithm).arg(item.params.unit_us).arg(u.start).arg(u.delta).arg(u.carry);
    }
    cmd
}

/// [`command`] by SHA, for the unit tests of the call's layout.
#[cfg(test)]
pub(super) fn command_for_tests(items: &[Item]) -> redis::Cmd {
    command(items, Call::Sha)
}

/// `{now, (s, c, p)×n}`.
fn parse(value: Value, n: usize) -> Result<(u64, Vec<Counts>), StoreError> {
    let int = |v: &Value| match v {
        Value::Int(i) => Some((*i).max(0) as u64),
        _ => None,
    };
    match value {
        Value::Array(items) if items.len() == 1 + 3 * n => {
            let numbers: Option<Vec<u64>> = items.iter().map(int).collect();
            let numbers = numbers.ok_or_else(|| StoreError::Server("unexpected approx.lua reply".into()))?;
            let counts = numbers[1..]
                .chunks_exact(3)
                .map(|c| Counts { start: c[0], current: c[1], previous: c[2] })
                .collect();
            Ok((numbers[0], counts))
        }
        Value::ServerError(e) => {
            Err(StoreError::Server(format!("{}: {}", e.code(), e.details().unwrap_or(""))))
        }
        other => Err(StoreError::Server(format!("unexpected approx.lua reply {other:?}"))),
    }
}
