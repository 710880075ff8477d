//! A circuit breaker for the Redis store.
//!
//! After `failures` consecutive failed calls (timeouts or connection errors) the breaker
//! opens: calls are refused at once, and domains answer by their failure policy without
//! waiting for a deadline. After a cool-down one call is let through as a probe
//! (half-open): success closes the breaker, failure opens it again for twice as long
//! (capped), with ±20 % jitter so that a fleet of instances does not probe in lock-step.
//!
//! Pure state machine over `Instant`s passed in; no I/O, no clock of its own.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rand::Rng;

/// Longest cool-down, however often probes fail.
const MAX_COOLDOWN: Duration = Duration::from_secs(30);

/// The breaker's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BreakerSettings {
    /// Consecutive failures that open the breaker (0 disables it).
    pub failures: u32,
    /// First cool-down; doubles after each failed probe.
    pub cooldown: Duration,
}

impl Default for BreakerSettings {
    fn default() -> Self {
        BreakerSettings { failures: 5, cooldown: Duration::from_millis(1000) }
    }
}

/// Where the breaker is. The numbers are the `tollgate_breaker_state` gauge values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakerState {
    Closed = 0,
    Open = 1,
    HalfOpen = 2,
}

/// What the breaker says about one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Go ahead.
    Allowed,
    /// Go ahead: this call decides whether the breaker closes.
    Probe,
    /// Do not call the store.
    Rejected,
}

#[derive(Debug)]
enum Phase {
    Closed { failures: u32 },
    Open { until: Instant, reopened: u32 },
    HalfOpen { reopened: u32 },
}

/// A circuit breaker shared by every request of one store.
#[derive(Debug)]
pub struct Breaker {
    settings: BreakerSettings,
    phase: Mutex<Phase>,
    opened: AtomicU64,
}

impl Breaker {
    pub fn new(settings: BreakerSettings) -> Breaker {
        Breaker { settings, phase: Mutex::new(Phase::Closed { failures: 0 }), opened: AtomicU64::new(0) }
    }

    /// Whether a call may go to the store at `now`.
    pub fn admit(&self, now: Instant) -> Admission {
        let mut phase = self.lock();
        match *phase {
            Phase::Closed { .. } => Admission::Allowed,
            Phase::Open { until, reopened } if now >= until => {
                *phase = Phase::HalfOpen { reopened };
                tracing::info!("redis circuit breaker half-open: probing");
                Admission::Probe
            }
            Phase::Open { .. } | Phase::HalfOpen { .. } => Admission::Rejected,
        }
    }

    /// Reports how an admitted call went. `failed` means unreachable or too slow.
    pub fn record(&self, admission: Admission, failed: bool, now: Instant) {
        if self.settings.failures == 0 || admission == Admission::Rejected {
            return;
        }
        let mut phase = self.lock();
        match (&mut *phase, failed) {
            (Phase::Closed { failures }, false) => *failures = 0,
            (Phase::Closed { failures }, true) => {
                *failures += 1;
                if *failures >= self.settings.failures {
                    self.open(&mut phase, 0, now);
                }
            }
            (Phase::HalfOpen { .. }, false) if admission == Admission::Probe => {
                *phase = Phase::Closed { failures: 0 };
                tracing::info!("redis circuit breaker closed: store reachable");
            }
            (Phase::HalfOpen { reopened }, true) if admission == Admission::Probe => {
                let reopened = reopened.saturating_add(1);
                self.open(&mut phase, reopened, now);
            }
            // Calls admitted before the breaker opened may finish late: they change nothing.
            _ => {}
        }
    }

    fn open(&self, phase: &mut Phase, reopened: u32, now: Instant) {
        let base = self.settings.cooldown.saturating_mul(1 << reopened.min(16)).min(MAX_COOLDOWN);
        let cooldown = base.mul_f64(rand::rng().random_range(0.8..=1.2));
        *phase = Phase::Open { until: now + cooldown, reopened };
        self.opened.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(
            cooldown_ms = cooldown.as_millis() as u64,
            "redis circuit breaker open: answering by failure policy"
        );
    }

    pub fn state(&self) -> BreakerState {
        match *self.lock() {
            Phase::Closed { .. } => BreakerState::Closed,
            Phase::Open { .. } => BreakerState::Open,
            Phase::HalfOpen { .. } => BreakerState::HalfOpen,
        }
    }

    /// How many times the breaker has opened.
    pub fn opened_total(&self) -> u64 {
        self.opened.load(Ordering::Relaxed)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Phase> {
        self.phase.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn breaker(failures: u32) -> Breaker {
        Breaker::new(BreakerSettings { failures, cooldown: Duration::from_millis(1000) })
    }

    #[test]
    fn opens_after_consecutive_failures_only() {
        let b = breaker(3);
        let t = Instant::now();
        for _ in 0..2 {
            b.record(b.admit(t), true, t);
        }
        b.record(b.admit(t), false, t); // a success resets the count
        for _ in 0..2 {
            b.record(b.admit(t), true, t);
        }
        assert_eq!(b.state(), BreakerState::Closed);
        b.record(b.admit(t), true, t);
        assert_eq!(b.state(), BreakerState::Open);
        assert_eq!(b.admit(t), Admission::Rejected);
        assert_eq!(b.opened_total(), 1);
    }

    #[test]
    fn one_probe_after_the_cooldown_closes_on_success() {
        let b = breaker(1);
        let t = Instant::now();
        b.record(b.admit(t), true, t);
        assert_eq!(b.admit(t + Duration::from_millis(700)), Admission::Rejected);
        let later = t + Duration::from_millis(1300);
        let probe = b.admit(later);
        assert_eq!(probe, Admission::Probe);
        assert_eq!(b.state(), BreakerState::HalfOpen);
        assert_eq!(b.admit(later), Admission::Rejected, "one probe at a time");
        b.record(probe, false, later);
        assert_eq!(b.state(), BreakerState::Closed);
        assert_eq!(b.admit(later), Admission::Allowed);
    }

    #[test]
    fn failed_probes_back_off() {
        let b = breaker(1);
        let t = Instant::now();
        b.record(b.admit(t), true, t);
        let t1 = t + Duration::from_millis(1300);
        let probe = b.admit(t1);
        b.record(probe, true, t1);
        assert_eq!(b.state(), BreakerState::Open);
        // Second cool-down is 2 s ± 20 %: still open after 1.5 s, probing after 2.5 s.
        assert_eq!(b.admit(t1 + Duration::from_millis(1500)), Admission::Rejected);
        assert_eq!(b.admit(t1 + Duration::from_millis(2500)), Admission::Probe);
    }

    #[test]
    fn zero_failures_disables_it() {
        let b = breaker(0);
        let t = Instant::now();
        for _ in 0..100 {
            b.record(b.admit(t), true, t);
        }
        assert_eq!(b.admit(t), Admission::Allowed);
    }

    #[test]
    fn late_results_of_calls_admitted_before_opening_change_nothing() {
        let b = breaker(1);
        let t = Instant::now();
        let early = b.admit(t);
        b.record(b.admit(t), true, t);
        b.record(early, false, t);
        assert_eq!(b.state(), BreakerState::Open);
    }
}
