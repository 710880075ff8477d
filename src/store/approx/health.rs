//! What this instance knows of Redis and of the other instances: the clock offset, the
//! live instance count (the share rule's `N`) and the warm-up, when a call last answered,
//! and so whether an estimate is too stale to decide on.

use std::sync::atomic::Ordering;

use super::bucket::Bucket;
use super::table::Approx;

/// How long the largest instance count a heartbeat answered is kept as `N` (µs): a rolling
/// restart (one instance leaves, its successor joins) or a brief partition does not widen
/// the shares of the instances that stay.
pub const PEAK_SPAN_US: u64 = 30_000_000;

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
    /// answered twice, an interval apart (until then they are decided exactly).
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
    /// largest count of the last [`PEAK_SPAN_US`], and the second answer an interval after
    /// the first ends the warm-up.
    pub(crate) fn beaten(&self, live: u64, now: u64) {
        let live = live.max(1);
        self.live.store(live, Ordering::Relaxed);
        let peak = self.peak.load(Ordering::Relaxed);
        if live >= peak || now.saturating_sub(self.peak_at.load(Ordering::Relaxed)) > PEAK_SPAN_US {
            self.peak.store(live, Ordering::Relaxed);
            self.peak_at.store(now, Ordering::Relaxed);
        }
        self.instances.store(live.max(self.peak.load(Ordering::Relaxed)), Ordering::Relaxed);
        let first = self.first_beat.load(Ordering::Relaxed);
        if first == 0 {
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
        self.offset_known.store(true, Ordering::Relaxed);
        offset
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
}
