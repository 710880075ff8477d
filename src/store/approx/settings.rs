//! Approximate mode's settings (`--sync-interval-ms`, `--sync-staleness-ms`) and the check
//! that they can keep the mode's promises. Plain values; no state.

use std::time::Duration;

/// Settings of approximate mode (`--sync-interval-ms`, `--sync-staleness-ms`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApproxSettings {
    /// How often the background task syncs (hot buckets: every half of it).
    pub interval: Duration,
    /// After how long without a good sync a bucket's estimate is too old to decide on.
    pub staleness: Duration,
    /// Cap on buckets (`--memory-max-keys`).
    pub max_keys: usize,
    /// Whether `approx.lua` adds the window keys plain window commands keep
    /// (`--redis-windows plain` on this instance: a domain that was exact, with plain
    /// consumes, before a reload made it approximate).
    pub window_keys: bool,
}

impl Default for ApproxSettings {
    fn default() -> Self {
        ApproxSettings {
            interval: Duration::from_millis(250),
            staleness: Duration::from_secs(10),
            max_keys: 1_000_000,
            window_keys: false,
        }
    }
}

impl ApproxSettings {
    pub(super) fn interval_us(&self) -> u64 {
        u64::try_from(self.interval.as_micros()).unwrap_or(u64::MAX).max(2)
    }

    pub(super) fn staleness_us(&self) -> u64 {
        u64::try_from(self.staleness.as_micros()).unwrap_or(u64::MAX)
    }

    /// Refuses settings the mode cannot keep its promises with: a staleness limit below
    /// the sync interval would hand every bucket to the failure policy between two syncs.
    pub fn validate(&self) -> Result<(), String> {
        if self.interval.is_zero() {
            return Err("--sync-interval-ms must be at least 1".into());
        }
        if self.staleness < self.interval {
            return Err(format!(
                "--sync-staleness-ms ({} ms) must be at least --sync-interval-ms ({} ms)",
                self.staleness.as_millis(),
                self.interval.as_millis()
            ));
        }
        Ok(())
    }
}
