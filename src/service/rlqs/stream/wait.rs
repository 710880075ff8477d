//! What a stream's task waits on besides its reports (the shutdown signal, an instant that
//! may not be set), and the budget that bounds how fast its reports are answered.

use tokio::sync::watch;
use tokio::time::Instant;

/// Resolves once the shutdown signal is set (never while it is not).
pub(super) async fn stopped(shutdown: &mut watch::Receiver<bool>) {
    if shutdown.wait_for(|stop| *stop).await.is_err() {
        std::future::pending::<()>().await;
    }
}

pub(super) async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Bucket usages one stream may send per second (a burst of as many): Envoy sends each
/// bucket once per 5 s, so 10,000 buckets are 2,000 a second. A report past it is not
/// answered (counted as `too_many_reports`).
pub const MAX_USAGES_PER_SECOND: usize = 10_000;

/// A token bucket of bucket usages: [`MAX_USAGES_PER_SECOND`] a second, as many at once.
#[derive(Debug)]
pub(super) struct Budget {
    tokens: f64,
    at: Instant,
}

impl Budget {
    pub(super) fn new(now: Instant) -> Budget {
        Budget { tokens: MAX_USAGES_PER_SECOND as f64, at: now }
    }

    /// Takes `n` usages at `now` if they fit (all or none).
    pub(super) fn take(&mut self, n: usize, now: Instant) -> bool {
        let most = MAX_USAGES_PER_SECOND as f64;
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * most).min(most);
        self.at = now;
        if n as f64 > self.tokens {
            return false;
        }
        self.tokens -= n as f64;
        true
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn the_budget_refills_at_its_rate_and_refuses_past_it() {
        let start = Instant::now();
        let mut budget = Budget::new(start);
        assert!(budget.take(10_000, start));
        assert!(!budget.take(1, start), "empty");
        assert!(budget.take(2_000, start + Duration::from_millis(200)), "refilled 2,000 in 200 ms");
        assert!(!budget.take(20_001, start + Duration::from_secs(60)), "never more than a second's worth");
    }
}
