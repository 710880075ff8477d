//! Whether Redis is reachable, as the status page, `/v1/status` and the logs say it: one
//! `WARN` when it starts failing and one `INFO` when it is back, not one per timed-out call.
//!
//! A single call that times out on a healthy Redis (a stall of a busy node) is answered by
//! the failure policy like any other, but it is no outage: before, each one flipped the state
//! and logged "redis is failing" and "reachable again" — dozens of lines a second on a busy
//! machine (found by the soak, `tests/soak`). Failing now means calls failed and none
//! succeeded for [`FAILING_AFTER`]; the first success after that is "reachable again".

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::super::charge::StoreError;

/// How long calls must have failed, with no success, before Redis counts as failing.
pub const FAILING_AFTER: Duration = Duration::from_millis(500);

/// Whether a store reaches Redis; each change is logged once.
pub struct Health {
    up: AtomicBool,
    /// µs since `base` of the first failure since the last success; 0: none.
    failing_since: AtomicU64,
    base: Instant,
    /// What is reachable or failing, as logged (no password).
    what: String,
}

impl Health {
    pub fn new(what: String) -> Health {
        Health { up: AtomicBool::new(true), failing_since: AtomicU64::new(0), base: Instant::now(), what }
    }

    /// False once calls have failed for [`FAILING_AFTER`] without a success, until one
    /// succeeds.
    pub fn is_up(&self) -> bool {
        self.up.load(Ordering::Relaxed)
    }

    /// Records a call's results: a failure if any charge found Redis unreachable (not a
    /// script's own error), else a success.
    pub fn record<T>(&self, results: &[Result<T, StoreError>]) {
        let failed = results.iter().any(|r| matches!(r, Err(e) if e.is_unreachable()));
        self.record_at(!failed, Instant::now());
    }

    fn record_at(&self, reached: bool, now: Instant) {
        if reached {
            self.failing_since.store(0, Ordering::Relaxed);
            if !self.up.swap(true, Ordering::Relaxed) {
                tracing::info!(redis = %self.what, "redis is reachable again");
            }
            return;
        }
        // At least 1 µs, so that 0 keeps meaning "no failure".
        let at = (now.saturating_duration_since(self.base).as_micros() as u64).max(1);
        let since = match self.failing_since.compare_exchange(0, at, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => at,
            Err(earlier) => earlier,
        };
        if at.saturating_sub(since) >= FAILING_AFTER.as_micros() as u64
            && self.up.swap(false, Ordering::Relaxed)
        {
            tracing::warn!(redis = %self.what, "redis is failing; domains apply their failure_mode");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lone_failures_between_successes_never_count_as_failing() {
        let health = Health::new("test".into());
        let start = Instant::now();
        for i in 0..100u64 {
            let at = start + Duration::from_millis(i * 10);
            health.record_at(i % 3 != 0, at);
            assert!(health.is_up(), "a timeout among successes at {i}");
        }
    }

    #[test]
    fn failing_once_no_call_succeeded_for_the_span_and_up_at_the_first_success() {
        let health = Health::new("test".into());
        let start = Instant::now() + Duration::from_secs(1);
        health.record_at(false, start);
        health.record_at(false, start + FAILING_AFTER - Duration::from_millis(1));
        assert!(health.is_up());
        health.record_at(false, start + FAILING_AFTER);
        assert!(!health.is_up());
        health.record_at(false, start + FAILING_AFTER * 3);
        assert!(!health.is_up());
        health.record_at(true, start + FAILING_AFTER * 4);
        assert!(health.is_up());
        // The span starts again from the next failure.
        health.record_at(false, start + FAILING_AFTER * 5);
        assert!(health.is_up());
    }
}
