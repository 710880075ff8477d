//! The lease table's counters since the start (metrics and tests), and the table's
//! `Debug` (its settings and these counters).

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

use super::table::LeaseTable;

/// Counters since the start, for metrics and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LeaseStats {
    /// Charges answered from a lease.
    pub served: u64,
    /// Blocks Redis granted, and their tokens.
    pub blocks: u64,
    pub tokens_taken: u64,
    /// Tokens given back (refund answered), and tokens that could not be (past a window's
    /// end, refund failed).
    pub tokens_returned: u64,
    pub tokens_forfeited: u64,
    /// Returns given up, by why (their tokens are in `tokens_forfeited`).
    pub dropped: Dropped,
    /// Returns queued now (at most [`LeaseTable::max_returns`]).
    pub returns_queued: u64,
}

/// Returns given up since the start, by why.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Dropped {
    /// The queue was full (the oldest went).
    pub full: u64,
    /// GCRA: queued for as long as its tokens take to refill at the limit's rate.
    pub refilled: u64,
    /// Windows: less than a quarter of a lease time left in the window.
    pub window_end: u64,
    /// The refund was sent and failed (it may have run: never sent again).
    pub failed: u64,
}

impl LeaseTable {
    /// Counters since the start.
    pub fn stats(&self) -> LeaseStats {
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        LeaseStats {
            served: load(&self.served),
            blocks: load(&self.blocks),
            tokens_taken: load(&self.taken),
            tokens_returned: load(&self.returned),
            tokens_forfeited: load(&self.forfeited),
            dropped: Dropped {
                full: load(&self.dropped[0]),
                refilled: load(&self.dropped[1]),
                window_end: load(&self.dropped[2]),
                failed: load(&self.dropped[3]),
            },
            returns_queued: self.pending_returns() as u64,
        }
    }
}

impl fmt::Debug for LeaseTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaseTable").field("settings", &self.settings).field("stats", &self.stats()).finish()
    }
}
