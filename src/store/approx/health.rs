//! What this instance knows of Redis and of the other instances: the clock offset, the
//! live instance count (the share rule's `N`, over `peak`) and the warm-up, when a call last
//! answered, and so whether an estimate is too stale to decide on; and what a sync task that
//! died leaves behind (`sync_lost`).
//!
//! Times here are local wall-clock µs (`now_us`), which an operator or NTP may step either
//! way: every difference of two of them saturates, and a call's duration is taken from the
//! monotonic clock ([`sent_before`]), never from two wall-clock readings.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::bucket::Bucket;
use super::table::{lock, queue, Approx, Shard};

pub use super::peak::PEAK_SPAN_US;

impl Approx {
    /// The `N` the share rule divides by: the largest instance count a heartbeat answered
    /// within [`PEAK_SPAN_US`] (1 before any).
    pub fn instances(&self) -> u64 {
        self.instances.load(Ordering::Relaxed).max(1)
    }

    /// Instances the last heartbeat counted (1 before any).
    pub fn live_instances(&self) -> u64 {
        self.live.load(Ordering::Relaxed).max(1)
    }

    /// Whether this instance decides approximate domains locally: its heartbeat has
    /// answered twice, an interval apart, since the sync task (re)started (until then they
    /// are decided exactly).
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
    }

    /// Resolves once this instance decides approximate domains locally ([`is_ready`]):
    /// startup waits for it, bounded, before it reports ready (`app::spawn`).
    ///
    /// [`is_ready`]: Self::is_ready
    pub async fn warmed_up(&self) {
        let warmed = self.warmed.notified();
        tokio::pin!(warmed);
        // Registered before the check: a warm-up that ends between the two still wakes it.
        warmed.as_mut().enable();
        if !self.is_ready() {
            warmed.await;
        }
    }

    /// A heartbeat answered `live` instances at local `now`: the share rule's `N` is the
    /// largest count of the last [`PEAK_SPAN_US`] of samples, and the second answer an
    /// interval after the first ends the warm-up.
    pub(crate) fn beaten(&self, live: u64, now: u64) {
        let live = live.max(1);
        self.live.store(live, Ordering::Relaxed);
        let peak = self.peaks.lock().unwrap_or_else(|e| e.into_inner()).record(live, now);
        self.instances.store(live.max(peak), Ordering::Relaxed);
        let first = self.first_beat.load(Ordering::Relaxed);
        if first == 0 || now < first {
            // The first beat, or the clock stepped back since it: the interval the warm-up
            // waits is counted from this one, not from a time the clock may not reach for
            // hours.
            self.first_beat.store(now.max(1), Ordering::Relaxed);
        } else if now >= first.saturating_add(self.settings.interval_us())
            && !self.ready.swap(true, Ordering::Relaxed)
        {
            tracing::info!(instances = self.instances(), "approximate mode ready: deciding locally");
            self.warmed.notify_waiters();
        }
        self.answered(now);
    }

    /// Redis answered a call at local `now`.
    pub(super) fn answered(&self, now: u64) {
        self.last_sync.store(now, Ordering::Relaxed);
        self.failing_since.store(0, Ordering::Relaxed);
    }

    /// A call failed at local `now`.
    pub(super) fn failed(&self, now: u64) {
        let _ = self.failing_since.compare_exchange(0, now.max(1), Ordering::Relaxed, Ordering::Relaxed);
        self.counters.syncs_failed.fetch_add(1, Ordering::Relaxed);
    }

    /// Learned Redis's clock: `redis` (µs) at local `mid`.
    pub(super) fn clock(&self, redis: u64, mid: u64) -> i64 {
        let offset = i64::try_from(redis).unwrap_or(i64::MAX).saturating_sub(i64::try_from(mid).unwrap_or(0));
        self.offset.store(offset, Ordering::Relaxed);
        self.clock_read_at.store(self.monotonic_us().max(1), Ordering::Relaxed);
        offset
    }

    /// Whether the clock offset was measured within the last interval (by the monotonic
    /// clock): the heartbeat is scored with it, so a beat without a fresh one asks `TIME`
    /// first — a wall clock stepped since the last call would otherwise score it ahead
    /// (its `ZREMRANGEBYSCORE` dropping every other instance) or behind (the others
    /// dropping this one).
    pub(super) fn clock_is_fresh(&self) -> bool {
        let at = self.clock_read_at.load(Ordering::Relaxed);
        at > 0 && self.monotonic_us().saturating_sub(at) < self.settings.interval_us()
    }

    /// Whether every sync call has been failing for longer than the staleness limit (a
    /// bucket this instance has never synced is then too stale to start on).
    pub(super) fn is_stale(&self, now: u64) -> bool {
        let since = self.failing_since.load(Ordering::Relaxed);
        since > 0 && now.saturating_sub(since) > self.settings.staleness_us()
    }

    /// Whether a bucket's estimate is too old to decide on: its own sync has been failing
    /// for longer than the staleness limit (per bucket: on a cluster one master may be down
    /// while the others answer), or it was never synced and no call has answered for that
    /// long. A bucket with nothing to send does not fail: it decides on, within its share.
    pub(super) fn bucket_stale(&self, bucket: &Bucket, now: u64) -> bool {
        let own = bucket.failing_since > 0
            && now.saturating_sub(bucket.failing_since) > self.settings.staleness_us();
        own || bucket.read_at == 0 && self.is_stale(now)
    }

    /// The sync task ended or panicked at local `now` (its supervisor restarts it,
    /// `store::syncing`): nothing synced or beat meanwhile, so until the new task's
    /// heartbeat answers twice an interval apart approximate domains are decided exactly
    /// (a warm-up, as at start), and its first beat asks Redis's clock again. Every
    /// bucket's increments in flight go back to be written again (the dead call may have
    /// run: counted twice, an error toward denying), each shard's send list is rebuilt
    /// (oldest first), and every bucket is read again before its next local decision: the
    /// exact charges meanwhile went to Redis, not into the estimates.
    pub fn sync_lost(&self, now: u64) {
        self.ready.store(false, Ordering::Relaxed);
        self.first_beat.store(0, Ordering::Relaxed);
        self.clock_read_at.store(0, Ordering::Relaxed);
        self.counters.sync_restarts.fetch_add(1, Ordering::Relaxed);
        for shard in self.shards.iter() {
            let mut shard = lock(shard);
            let Shard { map, dirty, .. } = &mut *shard;
            let mut waiting = Vec::new();
            for (key, bucket) in map.iter_mut() {
                if !bucket.inflight.is_empty() {
                    let sent = bucket.inflight;
                    bucket.unsend(sent, now);
                }
                bucket.read_at = 0;
                bucket.queued = false;
                if !bucket.pending.is_empty() {
                    waiting.push((bucket.dirty_since, key.clone()));
                }
            }
            waiting.sort_unstable();
            dirty.clear();
            for (_, key) in waiting {
                if let Some((_, key, bucket)) = map.get_full_mut(&*key) {
                    queue(key, bucket, dirty);
                }
            }
        }
    }
}

/// Local µs at which a call that answered at local `answered` was sent, `took` (monotonic)
/// before: `answered` and `sent` then stand in the same wall clock even if it stepped while
/// the call was in flight.
pub(super) fn sent_before(answered: u64, took: Duration) -> u64 {
    answered.saturating_sub(u64::try_from(took.as_micros()).unwrap_or(u64::MAX))
}

/// Local µs at which a call sent at `sent` and answered at `answered` most likely ran:
/// halfway. A clock stepped back between the two readings (`answered` before `sent`) takes
/// `answered`, the reading in the clock that now runs; no difference of the two underflows.
pub(super) fn midpoint(sent: u64, answered: u64) -> u64 {
    match answered.checked_sub(sent) {
        Some(took) => sent.saturating_add(took / 2),
        None => answered,
    }
}
