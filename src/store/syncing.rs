//! Approximate mode's sync task (`approx::sync`) run against the whole store: it finds
//! the store's sync connection (`Store::sync_via`) and wakes on the grid of half
//! intervals every instance shares. Above the dispatch, as the lease sweeper
//! (`leasing`) is.
//!
//! **Supervised.** The task (which also beats the heartbeat) runs under a supervisor
//! ([`SyncTask`]): a task that ends or panics before the stop is logged at ERROR, counted
//! (`tollgate_approximate_sync_restarts_total`) and started again — at once after a run
//! that lasted [`RESTART_DELAY_MAX`], else after half an interval doubled per quick death
//! up to that, so a task that panics on every wake does not spin. Until the new task's
//! heartbeat answers twice an interval apart the instance decides approximate domains
//! exactly, as in its warm-up (`Approx::sync_lost`): a dead sync must not leave it deciding
//! from estimates that no longer sync, nor count an `N` nobody beats for.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::{AbortHandle, JoinError, JoinHandle};
use tokio::time::Instant;

use super::approx::sync::{SyncTarget, Wake, MAX_PER_WAKE};
use super::approx::Approx;
use super::memory::now_us;
use super::Store;

/// The longest wait before a dead sync task is started again; a run that lasted this long
/// was healthy, and the next restart is at once.
pub const RESTART_DELAY_MAX: Duration = Duration::from_secs(10);

/// The supervised sync task of one store (see the module doc): what `app` keeps to stop it.
#[derive(Debug)]
pub struct SyncTask {
    stop: watch::Sender<bool>,
    supervisor: JoinHandle<()>,
    /// The task running now (what [`end_running_task`](Self::end_running_task) ends).
    running: Arc<Mutex<Option<AbortHandle>>>,
}

impl SyncTask {
    /// Starts the sync of `table` against `store` under its supervisor; `None` for the
    /// memory store (nothing to sync with: approximate domains are charged exactly there).
    /// `approximate_configured`: whether the heartbeat beats (see [`run`]).
    pub fn spawn(
        table: Arc<Approx>,
        store: Arc<Store>,
        target: SyncTarget,
        approximate_configured: impl Fn() -> bool + Clone + Send + Sync + 'static,
    ) -> Option<SyncTask> {
        store.sync_via()?;
        let (stop, signal) = watch::channel(false);
        let running = Arc::new(Mutex::new(None));
        let body = {
            let table = table.clone();
            move |signal| {
                let (table, store, target) = (table.clone(), store.clone(), target.clone());
                run(table, store, target, approximate_configured.clone(), stopped(signal))
            }
        };
        let supervisor = tokio::spawn(supervise(table, body, signal, running.clone()));
        Some(SyncTask { stop, supervisor, running })
    }

    /// Stops the sync: the running task writes the increments still waiting, once, and
    /// leaves the heartbeat set (bounded by 1 s). `None` if it did not finish `within`;
    /// `Some(Err)` if the supervisor itself panicked.
    pub async fn stop(self, within: Duration) -> Option<Result<(), JoinError>> {
        let _ = self.stop.send(true);
        tokio::time::timeout(within, self.supervisor).await.ok()
    }

    /// Ends the running sync task at once, as a panic in it would (its supervisor restarts
    /// it): for tests of the supervision only, not a contract. Whether a task was running.
    #[doc(hidden)]
    pub fn end_running_task(&self) -> bool {
        let running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        running.as_ref().map(AbortHandle::abort).is_some()
    }
}

/// Runs `body` (the sync task) until `stop` turns true, starting it again whenever it ends
/// or panics before that (see the module doc). `running` holds the task running now.
async fn supervise<F, Fut>(
    table: Arc<Approx>,
    mut body: F,
    stop: watch::Receiver<bool>,
    running: Arc<Mutex<Option<AbortHandle>>>,
) where
    F: FnMut(watch::Receiver<bool>) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let half = table.settings().interval / 2;
    let mut quick_deaths = 0u32;
    loop {
        let started = Instant::now();
        let task = tokio::spawn(body(stop.clone()));
        *running.lock().unwrap_or_else(|e| e.into_inner()) = Some(task.abort_handle());
        let ended = task.await;
        if *stop.borrow() {
            // Stopped: the task ran its last wake (or died in it; nothing is left to do).
            return;
        }
        let how = match &ended {
            Ok(()) => "ended".to_string(),
            Err(e) if e.is_cancelled() => "was cancelled".to_string(),
            Err(_) => format!("panicked: {}", panic_message(ended.err())),
        };
        table.sync_lost(now_us());
        quick_deaths =
            if started.elapsed() >= RESTART_DELAY_MAX { 0 } else { quick_deaths.saturating_add(1) };
        let delay = restart_delay(half, quick_deaths);
        tracing::error!(
            restarts = table.counters.sync_restarts.load(std::sync::atomic::Ordering::Relaxed),
            restart_in_ms = delay.as_millis() as u64,
            "approximate sync task {how}: starting it again; approximate domains are decided \
             exactly until its heartbeat answers again"
        );
        let mut signal = stop.clone();
        // A stop during the wait still starts the task once: its last wake writes what
        // is unsent and leaves the heartbeat set.
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            _ = signal.wait_for(|stop| *stop) => {}
        }
    }
}

/// The wait before a restart after `quick_deaths` deaths in a row that came within
/// [`RESTART_DELAY_MAX`] of their start: none after a healthy run, else `half` doubled per
/// quick death, at most [`RESTART_DELAY_MAX`].
fn restart_delay(half: Duration, quick_deaths: u32) -> Duration {
    match quick_deaths {
        0 => Duration::ZERO,
        n => half.saturating_mul(1u32 << (n - 1).min(16)).min(RESTART_DELAY_MAX),
    }
}

/// A panic's message, when it is a string.
fn panic_message(error: Option<JoinError>) -> String {
    let Some(payload) = error.and_then(|e| e.try_into_panic().ok()) else { return String::new() };
    match payload.downcast::<String>() {
        Ok(message) => *message,
        Err(payload) => payload.downcast_ref::<&str>().map(|s| s.to_string()).unwrap_or_default(),
    }
}

async fn stopped(mut signal: watch::Receiver<bool>) {
    let _ = signal.wait_for(|stop| *stop).await;
}

/// Runs the sync of `table` against `store` until `stop` resolves, then writes the
/// increments still waiting, once, and leaves the heartbeat set. The memory store (nothing
/// to sync with) returns at once: approximate domains are charged exactly there. Run under
/// [`SyncTask`]'s supervisor in the server; `approximate_configured`: whether an
/// approximate domain is configured (the heartbeat beats only then, or with buckets held).
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
            let next = (now / half).saturating_add(1).saturating_mul(half);
            tokio::select! {
                () = tokio::time::sleep(Duration::from_micros(next.saturating_sub(now))) => {}
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

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::store::approx::ApproxSettings;

    /// A table whose warm-up is over (two beats an interval apart).
    fn ready_table() -> Arc<Approx> {
        let table = Arc::new(Approx::new(ApproxSettings { max_keys: 64, ..ApproxSettings::default() }));
        table.beaten(2, 1_000_000);
        table.beaten(2, 1_250_000);
        assert!(table.is_ready());
        table
    }

    #[tokio::test(start_paused = true)]
    async fn a_task_that_panics_or_ends_is_started_again_counted_and_not_ready_meanwhile() {
        let table = ready_table();
        let runs = Arc::new(AtomicUsize::new(0));
        let (stop, signal) = watch::channel(false);
        let running = Arc::new(Mutex::new(None));
        let body = {
            let runs = runs.clone();
            move |signal: watch::Receiver<bool>| {
                let run = runs.fetch_add(1, Ordering::SeqCst);
                async move {
                    match run {
                        0 => panic!("a sync wake panicked"),
                        1 => {} // ended, no stop
                        _ => stopped(signal).await,
                    }
                }
            }
        };
        let supervisor = tokio::spawn(supervise(table.clone(), body, signal, running));
        let deadline = Instant::now() + Duration::from_secs(5);
        while runs.load(Ordering::SeqCst) < 3 {
            assert!(Instant::now() < deadline, "not started again");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        assert_eq!(table.counters.sync_restarts.load(Ordering::SeqCst), 2);
        assert!(!table.is_ready(), "decided exactly until the new task's heartbeat answers twice");
        let _ = stop.send(true);
        supervisor.await.expect("the supervisor stops with the task");
        assert_eq!(runs.load(Ordering::SeqCst), 3, "a stopped task is not started again");
    }

    #[test]
    fn restarts_wait_longer_after_each_quick_death_and_not_after_a_healthy_run() {
        let half = Duration::from_millis(125);
        let delays: Vec<u128> = (0..10).map(|n| restart_delay(half, n).as_millis()).collect();
        assert_eq!(delays, [0, 125, 250, 500, 1_000, 2_000, 4_000, 8_000, 10_000, 10_000]);
        assert_eq!(restart_delay(half, u32::MAX), RESTART_DELAY_MAX);
    }
}
