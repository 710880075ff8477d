//! One return: a lease's unused tokens to give back (a `Refund`), and when sending it would
//! come too late (`returns`' module doc gives the rule). Plain values; no state.

use std::time::Duration;

use tokio::time::Instant;

use crate::algorithm::Params;

/// Unused tokens to give back to a bucket (a `Refund`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Return {
    pub key: String,
    pub params: Params,
    pub tokens: u64,
    /// Window leases: the last moment the refund may be sent (and its deadline).
    pub by: Option<Instant>,
    /// When its lease ended (its tokens stopped being spendable). Without `by` (GCRA), the
    /// refund is sent only until `tokens × unit / limit` after this: by then the bucket has
    /// refilled as many at the limit's rate, and a refund would only credit live traffic.
    pub since: Instant,
}

/// Why a return was given up: the index of its counter in `LeaseTable::dropped`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum GiveUp {
    Full = 0,
    Refilled = 1,
    WindowEnd = 2,
    Failed = 3,
}

impl Return {
    /// Why sending it at `now` would come too late, if it would.
    pub(super) fn late(&self, now: Instant) -> Option<GiveUp> {
        match self.by {
            Some(by) => (now >= by).then_some(GiveUp::WindowEnd),
            None => (now >= self.since + refill_time(&self.params, self.tokens)).then_some(GiveUp::Refilled),
        }
    }
}

/// How long the bucket takes to refill `tokens` at its limit's rate (`unit / limit` each);
/// zero under a limit of 0, whose refund gives nothing back.
pub(super) fn refill_time(params: &Params, tokens: u64) -> Duration {
    if params.limit == 0 {
        return Duration::ZERO;
    }
    let us = u128::from(tokens) * u128::from(params.unit_us) / u128::from(params.limit);
    Duration::from_micros(u64::try_from(us).unwrap_or(u64::MAX))
}

/// The last moment a window lease's tokens may be sent back: a quarter of a lease time
/// before the window's end.
pub(super) fn return_by(window_end: Instant, time: Duration) -> Instant {
    window_end.checked_sub(time / 4).unwrap_or(window_end)
}
