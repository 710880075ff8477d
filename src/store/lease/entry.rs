//! One key's state in the lease table: its meter (hits per lease time), its lease (tokens
//! held, until when, on which Redis answer), the refill in flight and the hint of what still
//! fits; and the table's lock rule. No I/O, no clock: callers pass `now`.

use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::algorithm::{Decision, Params, MAX_VALUE};

/// Hits of one key in the current and the previous lease time.
#[derive(Debug, Clone, Copy)]
pub(super) struct Meter {
    pub(super) start: Instant,
    pub(super) current: u64,
    pub(super) previous: u64,
}

impl Meter {
    pub(super) fn count(&mut self, hits: u64, now: Instant, period: Duration) {
        let elapsed = now.saturating_duration_since(self.start);
        if elapsed >= period {
            self.previous = if elapsed < period * 2 { self.current } else { 0 };
            self.current = 0;
            self.start = now;
        }
        self.current = self.current.saturating_add(hits);
    }

    /// Hits per lease time.
    pub(super) fn rate(&self) -> u64 {
        self.current.max(self.previous)
    }
}

/// Tokens this instance holds for one key.
#[derive(Debug, Clone, Copy)]
pub(super) struct Lease {
    pub(super) tokens: u64,
    pub(super) expires: Instant,
    /// Window leases: the window's end, as seen from the block's send time.
    pub(super) window_end: Option<Instant>,
    /// Redis's answer to the block, and when it came.
    pub(super) basis: Decision,
    pub(super) basis_at: Instant,
}

impl Lease {
    /// The answer for a charge served at `now`, the lease holding `tokens` after it:
    /// Redis's remaining when the block was granted plus what the lease still holds, and
    /// Redis's reset less the time since.
    pub(super) fn served(&self, now: Instant) -> Decision {
        let since = now.saturating_duration_since(self.basis_at).as_micros();
        let since = u64::try_from(since).unwrap_or(u64::MAX);
        Decision {
            allowed: true,
            remaining: self.basis.remaining.saturating_add(self.tokens).min(MAX_VALUE),
            reset_us: self.basis.reset_us.saturating_sub(since),
        }
    }
}

/// What the last Redis answer said about a key.
#[derive(Debug, Clone, Copy)]
pub(super) struct Hint {
    pub(super) fits: u64,
    pub(super) at: Instant,
    pub(super) window_end: Option<Instant>,
}

/// One key the table tracks.
#[derive(Debug)]
pub(super) struct Entry {
    pub(super) params: Params,
    pub(super) meter: Meter,
    pub(super) lease: Option<Lease>,
    pub(super) refill: Option<(u64, watch::Receiver<bool>)>,
    pub(super) hint: Option<Hint>,
}

/// Every mutation under the table's locks is one map or queue operation: a poisoned lock
/// still holds a consistent value.
pub(super) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}
