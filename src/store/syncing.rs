//! Approximate mode's sync task (`approx::sync`) run against the whole store: it finds
//! the store's sync connection (`Store::sync_via`) and wakes on the grid of half
//! intervals every instance shares. Above the dispatch, as the lease sweeper
//! (`leasing`) is.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::approx::sync::{SyncTarget, Wake, MAX_PER_WAKE};
use super::approx::Approx;
use super::memory::now_us;
use super::Store;

/// Runs the sync of `table` against `store` until `stop` resolves, then writes the
/// increments still waiting, once, and leaves the heartbeat set. The memory store (nothing
/// to sync with) returns at once: approximate domains are charged exactly there.
pub async fn run(
    table: Arc<Approx>,
    store: Arc<Store>,
    target: SyncTarget,
    approximate_configured: impl Fn() -> bool,
    stop: impl Future<Output = ()>,
) {
    let Some(via) = store.sync_via() else { return };
    let interval = table.settings().interval;
    let half = u64::try_from((interval / 2).as_micros()).unwrap_or(u64::MAX).max(1_000);
    tokio::pin!(stop);
    // The first heartbeat at once: the warm-up (decided exactly) ends one interval after it.
    let mut first = approximate_configured();
    loop {
        let wake = if first {
            first = false;
            Wake::Full
        } else {
            // Wake on the wall-clock grid of half intervals, as every other instance does:
            // a wake on an even multiple is a full one.
            let now = now_us();
            let next = (now / half + 1) * half;
            tokio::select! {
                () = tokio::time::sleep(Duration::from_micros(next - now)) => {}
                () = &mut stop => break,
            }
            if (next / half).is_multiple_of(2) {
                Wake::Full
            } else {
                Wake::Half
            }
        };
        // A sync slower than a wake delays the next one (the grid skips what passed): each
        // call's deadline is for a Redis that does not answer, not for a busy one. A tick is
        // never cut short (its increments in flight are settled by it).
        let beat = approximate_configured();
        table.tick(via, &target, wake, beat, MAX_PER_WAKE).await;
    }
    let deadline = Instant::now() + Duration::from_secs(1);
    let last = async {
        table.tick(via, &target, Wake::Last, false, usize::MAX).await;
        table.leave(via, &target, deadline).await;
    };
    let _ = tokio::time::timeout_at(deadline, last).await;
}
