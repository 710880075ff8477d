//! The background sync of approximate mode: one task per store, one pipeline per tick.
//!
//! The task wakes every half `--sync-interval-ms`. Each wake it takes, under the shard
//! locks, the buckets that have something to say: on every other wake (a full interval)
//! every bucket with increments, and on every wake the buckets whose read is due (hot ones
//! every half interval; see `bucket::Tier`). It sends them as `approx.lua` calls of up to
//! [`CHUNK`] buckets in one pipeline (so a tick costs a few commands whatever the traffic)
//! and folds the answers into the estimates. A call that fails puts its increments back
//! (they go with the next tick; after a timeout the script may have run, so they may be
//! counted twice: that errs toward denying, never toward admitting). Idle buckets with
//! nothing to write are not sent: they cost Redis nothing.
//!
//! On a Redis Cluster a script call may only hold keys of one slot: the buckets go as one
//! call per slot touched (still at most [`CHUNK`] each), the calls of one master as one
//! pipeline, all masters at once ([`Via::Cluster`]); a wake then costs one call per slot
//! touched, so a domain with `hash_tag: domain` is one call per [`CHUNK`] buckets.
//!
//! Every full interval the same pipeline beats this instance's heartbeat: its id scored
//! with the time in a sorted set, entries older than the liveness span dropped, the live
//! count read back — the `N` of the share rule (on a cluster, on the master of that key's
//! slot). Plain commands, so that even an instance with nothing to sync is counted from
//! its first interval (a new instance that believed itself alone would spend more of the
//! headroom); only where an approximate domain is configured or buckets are held, so an
//! exact-only deployment sends Redis nothing more.
//!
//! The task owns everything in flight: no request waits for it, and stopping it sends the
//! increments still waiting once, within a second.

use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use redis::{Pipeline, Value};
use tokio::time::Instant;

use crate::algorithm::{Algorithm, Params};
use crate::store::cluster::{key_slot, ClusterStore};
use crate::store::memory::now_us;
use crate::store::redis::link::Link;
use crate::store::scripts::{send_entries, Call, APPROX_LUA};
use crate::store::{Store, StoreError};

use super::bucket::{Counts, Tier};
use super::{lock, Approx};

/// What a wake of the sync sends: the grid of half intervals, every second wake a full one,
/// every eighth a long one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wake {
    /// The reads due (hot buckets every half interval), with their increments.
    Half,
    /// Also every bucket's increments but idle ones', and the heartbeat.
    Full,
    /// Also idle buckets' increments (every 4 intervals), and at shutdown everything.
    Long,
}

/// A spent bucket (its counts expired, nothing to send) synced within this long stays: it
/// is an idle bucket whose next charge needs no first read. Older, it is dropped.
pub const FORGET_AFTER_US: u64 = 30_000_000;

/// How long a sync may take before it counts as failed: 4 intervals, at least 1 s.
fn sync_deadline(interval: Duration) -> Duration {
    (interval * 4).max(Duration::from_secs(1))
}

/// Buckets per script call: a call runs alone on the server, so it is kept short (~0.5 ms).
pub const CHUNK: usize = 512;

/// One bucket sent in a tick.
#[derive(Debug, Clone)]
pub struct Item {
    pub key: Box<str>,
    pub params: Params,
    /// Increments to add (negative: refunds); 0 for a read.
    pub delta: i64,
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

/// Where a store's sync is sent.
#[derive(Clone, Copy)]
pub enum Via<'a> {
    /// One connection lifecycle (one Redis node, the Sentinel master): a wake is one
    /// pipeline, one round trip.
    Link(&'a Link),
    /// A Redis Cluster: a script call may only hold keys of one slot, so a wake's buckets
    /// go as one call per slot touched (up to [`CHUNK`] buckets each), the calls of one
    /// master as one pipeline, every master's at once (`cluster::approx`).
    Cluster(&'a ClusterStore),
}

impl Via<'_> {
    /// A wake's buckets cut into calls: runs of at most [`CHUNK`]; on a cluster, of one
    /// slot each (`items` sorted by slot first).
    pub(super) fn chunks<'i>(&self, items: &'i mut [Item]) -> Vec<&'i [Item]> {
        match self {
            Via::Link(_) => items.chunks(CHUNK).collect(),
            Via::Cluster(_) => {
                items.sort_by_cached_key(|item| key_slot(item.key.as_bytes()));
                let items: &'i [Item] = items;
                items
                    .chunk_by(|a, b| key_slot(a.key.as_bytes()) == key_slot(b.key.as_bytes()))
                    .flat_map(|run| run.chunks(CHUNK))
                    .collect()
            }
        }
    }

    /// Sends `count` entries (`add` appends entry `i`; on a cluster it goes to the master
    /// of `slot(i)`); `NOSCRIPT` entries go again once with `EVAL`. One reply per entry.
    async fn send(
        self,
        count: usize,
        slot: impl Fn(usize) -> u16,
        deadline: Instant,
        add: impl Fn(&mut Pipeline, usize, Call),
    ) -> Vec<Result<Value, StoreError>> {
        match self {
            Via::Link(link) => send_entries(link, count, count, deadline, add).await,
            Via::Cluster(cluster) => {
                let slots: Vec<u16> = (0..count).map(slot).collect();
                cluster.send_entries(&slots, deadline, add).await
            }
        }
    }
}

impl Approx {
    /// Takes what a wake sends (see [`Wake`]): buckets with increments to write or a read
    /// due, and evicted buckets' increments. Moves their increments to `inflight`. On
    /// full wakes also drops buckets with nothing left to say that were not synced within
    /// [`FORGET_AFTER_US`] (a spent bucket synced since is an idle one: it needs no read).
    pub fn collect(&self, now: u64, wake: Wake) -> Vec<Item> {
        let redis_now = self.redis_now(now);
        let full = wake != Wake::Half;
        let mut items = Vec::new();
        for shard in self.shards.iter() {
            let mut shard = lock(shard);
            if full {
                shard
                    .map
                    .retain(|_, b| !b.is_spent(redis_now) || now.saturating_sub(b.read_at) < FORGET_AFTER_US);
            }
            for (key, bucket) in shard.map.iter_mut() {
                // Idle buckets' increments wait for a long wake (a fourth of the full
                // ones): below a tenth of the limit a delay costs nothing of the bound
                // (shares cap what is unwritten) and a busy bucket is written once for
                // many charges.
                let write = bucket.pending != 0 && full && (wake == Wake::Long || bucket.tier != Tier::Idle);
                if !(write || bucket.next_read <= now) {
                    continue;
                }
                bucket.inflight = bucket.pending;
                bucket.pending = 0;
                items.push(Item {
                    key: key.clone(),
                    params: bucket.params,
                    delta: bucket.inflight,
                    orphan: false,
                });
            }
            items.extend(shard.orphans.drain(..).map(|(key, params, delta)| Item {
                key,
                params,
                delta,
                orphan: true,
            }));
        }
        items
    }

    /// Folds a chunk's answer (`counts` per item, in order) taken at `redis_now`, ours
    /// `now`.
    pub(super) fn settle_ok(&self, items: &[Item], counts: &[Counts], redis_now: u64, now: u64) {
        let interval = self.settings.interval_us();
        for (item, counts) in items.iter().zip(counts) {
            if item.orphan {
                continue;
            }
            let mut shard = lock(&self.shards[self.shard_of(&item.key)]);
            if let Some(bucket) = shard.map.get_mut(&*item.key) {
                bucket.fold(*counts, redis_now, now, interval);
            }
        }
        self.offset.store(i64::try_from(redis_now).unwrap_or(i64::MAX) - now as i64, Ordering::Relaxed);
        self.beaten(now);
        self.counters.syncs_ok.fetch_add(1, Ordering::Relaxed);
    }

    /// Redis answered at `now`: the sync is healthy.
    fn beaten(&self, now: u64) {
        self.last_sync.store(now, Ordering::Relaxed);
        self.failing_since.store(0, Ordering::Relaxed);
    }

    /// Puts a failed chunk's increments back, for the next tick.
    pub(super) fn settle_failed(&self, items: Vec<Item>, now: u64) {
        for item in items {
            let mut shard = lock(&self.shards[self.shard_of(&item.key)]);
            if item.orphan {
                if shard.orphans.len() < self.shard_cap {
                    shard.orphans.push((item.key, item.params, item.delta));
                } else {
                    self.counters.dropped_increments.fetch_add(item.delta.unsigned_abs(), Ordering::Relaxed);
                }
                continue;
            }
            if let Some(bucket) = shard.map.get_mut(&*item.key) {
                bucket.pending = bucket.pending.saturating_add(bucket.inflight);
                bucket.inflight = 0;
                if bucket.failing_since == 0 {
                    bucket.failing_since = now.max(1);
                }
            } else if item.delta != 0 {
                // Evicted while in flight: its increments become an orphan's.
                if shard.orphans.len() < self.shard_cap {
                    shard.orphans.push((item.key, item.params, item.delta));
                } else {
                    self.counters.dropped_increments.fetch_add(item.delta.unsigned_abs(), Ordering::Relaxed);
                }
            }
        }
        let _ = self.failing_since.compare_exchange(0, now.max(1), Ordering::Relaxed, Ordering::Relaxed);
        self.counters.syncs_failed.fetch_add(1, Ordering::Relaxed);
    }

    /// One wake: collect, send, fold; on full wakes (see [`Wake`]) the heartbeat is beaten
    /// too, when `heartbeat` (an approximate domain is configured) or buckets are held.
    /// Returns how many buckets were sent.
    pub async fn tick(
        &self,
        via: Via<'_>,
        target: &SyncTarget,
        wake: Wake,
        heartbeat: bool,
        deadline: Instant,
    ) -> usize {
        let full = wake != Wake::Half && (heartbeat || !self.is_empty());
        let sent_at = now_us();
        let mut items = self.collect(sent_at, wake);
        if items.is_empty() && !full {
            return 0;
        }
        let writes = items.iter().filter(|i| i.delta != 0).count() as u64;
        self.counters.keys_written.fetch_add(writes, Ordering::Relaxed);
        self.counters.keys_read.fetch_add(items.len() as u64 - writes, Ordering::Relaxed);
        let liveness = liveness_us(self.settings.interval_us());
        let beat = if full { BEAT.len() } else { 0 };
        let chunks = via.chunks(&mut items);
        let beat_at = self.redis_now(sent_at);
        let add = |pipe: &mut Pipeline, i: usize, call: Call| {
            if i < beat {
                pipe.add_command(beat_command(target, i, beat_at, liveness));
            } else {
                pipe.add_command(command(chunks[i - beat], call));
            }
        };
        // On a cluster each entry goes to the master of its slot.
        let slot = |i: usize| match i.checked_sub(beat) {
            Some(c) => key_slot(chunks[c][0].key.as_bytes()),
            None => key_slot(target.instances_key.as_bytes()),
        };
        let mut replies = via.send(beat + chunks.len(), slot, deadline, add).await;
        let now = now_us();
        let mid = sent_at + now.saturating_sub(sent_at) / 2;
        let beats: Vec<_> = replies.drain(..beat).collect();
        if let Some(Ok(Value::Int(live))) = beats.last() {
            self.instances.store((*live).max(1) as u64, Ordering::Relaxed);
        }
        let mut failed = Vec::new();
        let mut first_error = beats.into_iter().find_map(Result::err);
        for (chunk, reply) in chunks.iter().zip(replies) {
            match reply.and_then(|value| parse(value, chunk.len())) {
                Ok((redis_now, counts)) => self.settle_ok(chunk, &counts, redis_now, mid),
                Err(e) => {
                    first_error.get_or_insert(e);
                    failed.extend(chunk.iter().cloned());
                }
            }
        }
        match first_error {
            Some(error) => {
                if self.failing_since.load(Ordering::Relaxed) == 0 {
                    tracing::warn!(%error, buckets = failed.len(), "approximate sync failed: increments kept for the next tick");
                }
                self.settle_failed(failed, now);
            }
            None if chunks.is_empty() => self.beaten(now),
            None => {}
        }
        items.len()
    }
}

/// The heartbeat: four commands in the sync's pipeline (plain commands, not a script:
/// `INFO commandstats` tells them from syncs). The last answers the live instances.
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
        cmd.arg(algorithm).arg(item.params.unit_us).arg(item.delta);
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

/// Runs the sync of `table` against `store` until `stop` resolves, then writes the
/// increments still waiting, once. The memory store (nothing to sync with) returns at
/// once: approximate domains are charged exactly there.
pub async fn run(
    table: Arc<Approx>,
    store: Arc<Store>,
    target: SyncTarget,
    approximate_configured: impl Fn() -> bool,
    stop: impl Future<Output = ()>,
) {
    let Some(via) = store.sync_via() else { return };
    let interval = table.settings().interval;
    let half = u64::try_from((interval / 2).as_micros()).unwrap_or(u64::MAX).max(1_000);
    tokio::pin!(stop);
    loop {
        // Wake on the wall-clock grid of half intervals, as every other instance does: a
        // wake on an even multiple is a full one.
        let now = now_us();
        let next = (now / half + 1) * half;
        tokio::select! {
            () = tokio::time::sleep(Duration::from_micros(next - now)) => {}
            () = &mut stop => break,
        }
        let wake = match next / half % 8 {
            0 => Wake::Long,
            n if n % 2 == 0 => Wake::Full,
            _ => Wake::Half,
        };
        // A sync slower than a wake delays the next one (the grid skips what passed): the
        // deadline is for a Redis that does not answer, not for a busy one.
        let beat = approximate_configured();
        table.tick(via, &target, wake, beat, Instant::now() + sync_deadline(interval)).await;
    }
    table.tick(via, &target, Wake::Long, false, Instant::now() + Duration::from_secs(1)).await;
}
