//! A circuit breaker for the Redis store.
//!
//! **Opening.** The breaker counts the calls that finished in a sliding window (`window`,
//! kept as a ring of ten sub-windows) and opens when, in that window, at least `failures`
//! calls failed (timeouts or connection errors) *and* they are at least `failure_rate` of
//! all calls. A rate, not consecutive failures: one short stall (a busy core, a Redis fork,
//! another client's slow command) fails every call in flight at once, and counting those as
//! "N in a row" turned a 15 ms stall into seconds of failure-policy answers. With the
//! default rate 0.5, calls arriving at a steady pace only open it once Redis has failed for
//! about half the window.
//!
//! **How fast it opens** (the stated time), with the defaults (`--breaker-failures 5`,
//! rate 0.5, window 1 s, `--store-timeout-ms 10`):
//! - *High traffic* (hundreds of calls per second or more). A call that was admitted before
//!   the fault still counts as a success, so the failures must outweigh the successes that
//!   remain in the window. Frozen Redis (SIGSTOP: every call waits out its store deadline
//!   T): with calls arriving at a steady rate it opens ≈ T + rate × (window − T) after the
//!   freeze, ≈ 0.5 s; under closed-loop load (a fixed number in flight, so failures arrive
//!   far more slowly than the successes did) it opens at the latest when the successes
//!   from before the freeze have left the window: ≤ window + T after the freeze, ≤ 1.01 s.
//!   Killed Redis (connections refused at once): the same bound, usually sooner because
//!   failures come fast.
//!
//!   Measured (release build, 2 shared cores, local Redis, 16 in flight, 1 descriptor,
//!   ~20,000 requests/s): frozen, open after 905–910 ms (meanwhile ≈ 1,250 requests waited
//!   out their 10 ms deadline and were answered by policy); killed, after 404–606 ms. On a
//!   healthy Redis, 15 runs of 10 s: never opened (the consecutive-failure breaker it
//!   replaces opened in 3 of the 15 and answered 6,000–62,000 decisions by policy).
//! - *Low traffic*: it opens on the `failures`-th failed call within one window, i.e. after
//!   `failures` calls. Below `failures` calls per window it never opens — each call then
//!   just waits out its own store deadline, which is what the breaker would save.
//!
//! **Open and half-open.** Open, calls are refused at once and domains answer by their
//! failure policy. After the cool-down one call is let through as a probe (half-open):
//! success closes the breaker, failure opens it again for twice as long (capped), with
//! ±20 % jitter so that a fleet of instances does not probe in lock-step.
//!
//! **Cancellation.** Every admitted call holds a [`Call`]. The future running a call may be
//! dropped at any `.await` (hyper drops the handler when the client resets the stream; Envoy
//! does at its timeout), so nothing here waits for a result: a probe dropped without a
//! result re-opens the breaker (see [`Call`]'s `Drop`), and a dropped ordinary call counts
//! for nothing. Results of calls admitted in an earlier phase (before the breaker opened,
//! or before it last closed) change nothing.
//!
//! A state machine over `Instant`s passed in; no I/O. The only clock it reads is in `Drop`
//! of a cancelled probe, which has no caller to pass one.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rand::Rng;

pub use super::redis::settings::BreakerSettings;

/// Longest cool-down, however often probes fail (a longer `--breaker-cooldown-ms` is kept
/// as it is). Limiting resumes at the first probe after Redis is back, so the cap bounds
/// the recovery after any outage: with 30 s it was up to 36 s after a long outage that
/// every decision of a fail-closed domain stayed denied (of a fail-open one, unlimited)
/// with Redis healthy (found by the soak, `tests/soak`). A probe is one call: backing off
/// further protects Redis from nothing.
const MAX_COOLDOWN: Duration = Duration::from_secs(2);

/// Sub-windows of the sliding window: failures leave it in steps of a tenth of the window.
const SLOTS: usize = 10;

/// Where the breaker is. The numbers are the `tollgate_breaker_state` gauge values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakerState {
    Closed = 0,
    Open = 1,
    HalfOpen = 2,
}

/// One call the breaker let through. Report its result with [`Call::record`].
///
/// Dropped without a result (its future was cancelled): an ordinary call counts for
/// nothing, and a probe re-opens the breaker with the *same* cool-down. Not closed: a call
/// that never answered proves nothing about Redis. Not the doubled cool-down of a failed
/// probe: the client gave up (Envoy at its own timeout, or its caller went away), which is
/// no evidence that Redis is down, and doubling on every cancel would keep a healthy Redis
/// shunned for longer. Not left half-open: with no probe in flight, every later call
/// would be refused until a restart.
#[derive(Debug)]
#[must_use = "a call must be recorded, or it counts for nothing"]
pub struct Call<'a> {
    breaker: &'a Breaker,
    /// The phase (`Breaker::phase_id`) the call was admitted in.
    phase_id: u64,
    probe: bool,
    recorded: bool,
}

impl Call<'_> {
    /// Whether this call decides if the breaker closes.
    pub fn is_probe(&self) -> bool {
        self.probe
    }

    /// Reports how the call went. `failed` means unreachable or too slow.
    pub fn record(mut self, failed: bool, now: Instant) {
        self.recorded = true;
        self.breaker.record(self.phase_id, self.probe, failed, now);
    }
}

impl Drop for Call<'_> {
    fn drop(&mut self) {
        if self.probe && !self.recorded {
            self.breaker.probe_dropped(self.phase_id, Instant::now());
        }
    }
}

#[derive(Debug)]
enum Phase {
    Closed,
    /// `cooldown` is the one this opening drew its jittered `until` from (no jitter).
    Open {
        until: Instant,
        cooldown: Duration,
    },
    HalfOpen {
        cooldown: Duration,
    },
}

/// Calls and failures of one sub-window.
#[derive(Debug, Clone, Copy, Default)]
struct Slot {
    /// Which sub-window (time since `origin` / slot width) the counts belong to.
    index: u64,
    calls: u32,
    failures: u32,
}

#[derive(Debug)]
struct Inner {
    phase: Phase,
    slots: [Slot; SLOTS],
    /// Sub-window 0 starts at the first call counted (the breaker reads no clock itself).
    origin: Option<Instant>,
    /// The newest sub-window seen: a call recorded a little late (it took the lock after a
    /// later one) counts in it instead of a slot that already moved on.
    newest: u64,
}

/// A circuit breaker shared by every request of one store.
#[derive(Debug)]
pub struct Breaker {
    settings: BreakerSettings,
    slot_width: Duration,
    inner: Mutex<Inner>,
    /// `phase number × 4 + state`: read without the lock on every call; the phase number
    /// grows at each transition, so a result can tell whether its phase is still current.
    phase_id: AtomicU64,
    opened: AtomicU64,
}

impl Breaker {
    /// A closed breaker. `failures: 0` gives one that never opens.
    pub fn new(settings: BreakerSettings) -> Breaker {
        Breaker {
            settings,
            slot_width: (settings.window / SLOTS as u32).max(Duration::from_micros(100)),
            inner: Mutex::new(Inner {
                phase: Phase::Closed,
                slots: [Slot::default(); SLOTS],
                origin: None,
                newest: 0,
            }),
            phase_id: AtomicU64::new(BreakerState::Closed as u64),
            opened: AtomicU64::new(0),
        }
    }

    /// Lets a call through at `now`, or refuses it (`None`: do not call the store).
    pub fn admit(&self, now: Instant) -> Option<Call<'_>> {
        let phase_id = self.phase_id.load(Ordering::Acquire);
        if state_of(phase_id) == BreakerState::Closed {
            return Some(Call { breaker: self, phase_id, probe: false, recorded: false });
        }
        let mut inner = self.lock();
        match inner.phase {
            Phase::Open { until, cooldown } if now >= until => {
                inner.phase = Phase::HalfOpen { cooldown };
                let phase_id = self.advance(BreakerState::HalfOpen);
                tracing::info!("redis circuit breaker half-open: probing");
                Some(Call { breaker: self, phase_id, probe: true, recorded: false })
            }
            _ => None,
        }
    }

    fn record(&self, phase_id: u64, probe: bool, failed: bool, now: Instant) {
        if self.settings.failures == 0 {
            return;
        }
        let mut inner = self.lock();
        // A call from an earlier phase (admitted before the breaker opened, or before it
        // closed again) says nothing about Redis now.
        if self.phase_id.load(Ordering::Acquire) != phase_id {
            return;
        }
        let cooldown = match inner.phase {
            Phase::Closed => {
                if self.count(&mut inner, failed, now) {
                    self.open(&mut inner, self.settings.cooldown, now);
                }
                return;
            }
            Phase::HalfOpen { cooldown } if probe => cooldown,
            Phase::HalfOpen { .. } | Phase::Open { .. } => return,
        };
        if failed {
            let doubled = cooldown.saturating_mul(2).min(MAX_COOLDOWN.max(self.settings.cooldown));
            self.open(&mut inner, doubled, now);
        } else {
            inner.phase = Phase::Closed;
            // The failures that opened it are history: start counting afresh.
            inner.slots = [Slot::default(); SLOTS];
            self.advance(BreakerState::Closed);
            tracing::info!("redis circuit breaker closed: store reachable");
        }
    }

    /// The probe of phase `phase_id` was dropped without a result: open again, same cool-down.
    fn probe_dropped(&self, phase_id: u64, now: Instant) {
        let mut inner = self.lock();
        if self.phase_id.load(Ordering::Acquire) != phase_id {
            return;
        }
        if let Phase::HalfOpen { cooldown } = inner.phase {
            tracing::info!("redis circuit breaker probe cancelled by the client: open again");
            self.open(&mut inner, cooldown, now);
        }
    }

    /// Counts a finished call in the window; whether the breaker must open.
    fn count(&self, inner: &mut Inner, failed: bool, now: Instant) -> bool {
        let origin = *inner.origin.get_or_insert(now);
        let elapsed = now.saturating_duration_since(origin);
        let index = (elapsed.as_nanos() / self.slot_width.as_nanos()) as u64;
        let index = index.max(inner.newest);
        inner.newest = index;
        let slot = &mut inner.slots[(index % SLOTS as u64) as usize];
        if slot.index != index {
            *slot = Slot { index, calls: 0, failures: 0 };
        }
        slot.calls = slot.calls.saturating_add(1);
        if !failed {
            return false;
        }
        slot.failures = slot.failures.saturating_add(1);
        let (calls, failures) = inner
            .slots
            .iter()
            .filter(|s| s.index + SLOTS as u64 > index)
            .fold((0u64, 0u64), |(c, f), s| (c + u64::from(s.calls), f + u64::from(s.failures)));
        failures >= u64::from(self.settings.failures)
            && failures as f64 >= self.settings.failure_rate * calls as f64
    }

    /// Opens for `cooldown` (± 20 % jitter) from `now`.
    fn open(&self, inner: &mut Inner, cooldown: Duration, now: Instant) {
        let jittered = cooldown.mul_f64(rand::rng().random_range(0.8..=1.2));
        inner.phase = Phase::Open { until: now + jittered, cooldown };
        inner.slots = [Slot::default(); SLOTS];
        self.advance(BreakerState::Open);
        self.opened.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(
            cooldown_ms = jittered.as_millis() as u64,
            "redis circuit breaker open: answering by failure policy"
        );
    }

    /// Enters a new phase in `state` (called with the lock held); its phase id.
    fn advance(&self, state: BreakerState) -> u64 {
        let current = self.phase_id.load(Ordering::Acquire);
        let next = ((current >> 2) + 1) << 2 | state as u64;
        self.phase_id.store(next, Ordering::Release);
        next
    }

    /// Where the breaker is now.
    pub fn state(&self) -> BreakerState {
        state_of(self.phase_id.load(Ordering::Acquire))
    }

    /// How many times the breaker has opened.
    pub fn opened_total(&self) -> u64 {
        self.opened.load(Ordering::Relaxed)
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn state_of(phase_id: u64) -> BreakerState {
    match phase_id & 3 {
        1 => BreakerState::Open,
        2 => BreakerState::HalfOpen,
        _ => BreakerState::Closed,
    }
}

#[cfg(test)]
mod tests;
