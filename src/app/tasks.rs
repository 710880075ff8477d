//! The tasks beside the servers, each stopped by the shutdown signal: the incident
//! overrides read from Redis, the sweeps (expired memory buckets, or idle leases), the
//! approximate mode's sync, the config reloads (SIGHUP, the file watcher); and the
//! approximate warm-up startup waits for before it reports ready.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::sources::overrides::Overrides;
use crate::sources::serving::Live;
use crate::store::approx::sync::SyncTarget;
use crate::store::syncing::SyncTask;
use crate::store::Store;
use crate::telemetry::metrics::Metrics;

use super::settings::ServeSettings;

/// What [`background`] started that the caller keeps: the approximate sync (stopped after
/// the servers) and the config file watcher (watching while it lives).
pub(super) struct Background {
    pub sync: Option<SyncTask>,
    pub watcher: Option<notify::RecommendedWatcher>,
}

/// Starts the tasks beside the servers (pushed to `tasks` where the stop awaits them).
/// On a shared store the fleet's overrides are read once first, so that an instance
/// started during an incident honours them from its first request.
pub(super) async fn background(
    settings: &ServeSettings,
    live: &Arc<Live>,
    store: &Arc<Store>,
    metrics: &Arc<Metrics>,
    overrides: &Arc<Overrides>,
    signal: &watch::Receiver<bool>,
    tasks: &mut Vec<JoinHandle<anyhow::Result<()>>>,
) -> anyhow::Result<Background> {
    if store.is_shared() {
        // One read before it is ready, then one every SYNC_INTERVAL.
        if let Err(e) = overrides.sync(store).await {
            tracing::warn!(error = %e, "overrides: not read from Redis at startup; reading them every 250 ms");
        }
        let (overrides, store, stop) = (overrides.clone(), store.clone(), stopped(signal.clone()));
        tasks.push(tokio::spawn(async move {
            tokio::select! {
                () = crate::sources::overrides::sync_forever(overrides, store) => {}
                () = stop => {}
            }
            Ok(())
        }));
    }
    if let Store::Memory(_) = store.as_ref() {
        tasks.push(tokio::spawn(sweep_memory(store.clone(), signal.clone())));
    } else if store.leases().is_some() {
        let (store, stop) = (store.clone(), stopped(signal.clone()));
        let (metrics, name) = (metrics.clone(), store.name());
        tasks.push(tokio::spawn(async move {
            crate::store::leasing::sweep_leases(store, stop, |stats| metrics.set_leases(name, stats)).await;
            Ok(())
        }));
    }
    let sync = store.approx().cloned().and_then(|approx| {
        // The heartbeat only where an approximate domain is configured (or buckets are
        // held): exact-only deployments send Redis nothing more.
        let live = live.clone();
        let configured = move || live.load().snapshot.has_approximate();
        let target = SyncTarget::new(&settings.redis_key_prefix);
        SyncTask::spawn(approx, store.clone(), target, configured)
    });
    #[cfg(unix)]
    tokio::spawn(crate::sources::reload::reload_on_sighup(live.clone(), signal.clone()));
    let watcher = if settings.watch_config && settings.xds.is_none() {
        Some(
            crate::sources::reload::watch_config(live.clone(), signal.clone())
                .context("watching the config")?,
        )
    } else {
        None
    };
    Ok(Background { sync, watcher })
}

/// Longest startup waits for the store to be prepared ([`Store::prepare`]).
pub const PREPARE_WAIT: Duration = Duration::from_secs(2);

/// Before it reports ready, an instance on Redis prepares its store and, with approximate
/// domains, warms them up — both at once, each bounded: with Redis not answering it
/// reports ready anyway, and the domains' `failure_mode` answers until Redis does.
pub(super) async fn warm_up(store: &Store, live: &Live) {
    tokio::join!(prepare(store), approximate_warm_up(store, live));
}

/// Every connection of the charges made and every script loaded on each server the store
/// calls ([`Store::prepare`]), so that the first requests pay neither a connect nor a
/// `NOSCRIPT` round trip inside their store timeout. Bounded by [`PREPARE_WAIT`].
async fn prepare(store: &Store) {
    if matches!(store, Store::Memory(_)) {
        return;
    }
    let started = Instant::now();
    let done = store.prepare(tokio::time::Instant::now() + PREPARE_WAIT).await;
    let waited_ms = started.elapsed().as_millis() as u64;
    match done {
        Ok(servers) => {
            tracing::info!(
                servers,
                waited_ms,
                "store prepared before ready: connections made, scripts loaded"
            )
        }
        Err(e) => tracing::warn!(
            error = %e,
            waited_ms,
            "store not prepared (Redis not answering): ready anyway; the first requests connect and load \
             scripts within their store timeout, by their failure_mode on store errors"
        ),
    }
}

/// An instance with approximate domains on Redis waits for its approximate warm-up
/// (`Approx::warmed_up`: two heartbeats an interval apart), so that the first request a
/// load balancer sends is decided locally, not exactly at the store timeout while the
/// connections are new and the load arrives at once. Bounded by [`warm_up_wait`]: then
/// approximate domains are decided exactly (their `failure_mode` answers) until it ends.
async fn approximate_warm_up(store: &Store, live: &Live) {
    let Some(approx) = store.approx() else { return };
    if store.sync_via().is_none() || !live.load().snapshot.has_approximate() {
        return;
    }
    let wait = warm_up_wait(approx.settings().interval);
    let started = Instant::now();
    match tokio::time::timeout(wait, approx.warmed_up()).await {
        Ok(()) => tracing::info!(
            waited_ms = started.elapsed().as_millis() as u64,
            "approximate warm-up done before ready"
        ),
        Err(_) => tracing::warn!(
            waited_ms = wait.as_millis() as u64,
            "approximate warm-up not done (Redis not answering the heartbeat): ready anyway; \
             approximate domains are decided exactly, by their failure_mode on store errors, until it is"
        ),
    }
}

/// How long startup waits for the approximate warm-up: the first heartbeat and one full
/// wake at least an interval later (at most two intervals on the shared grid), each call
/// allowed its sync deadline — 2.5 s at the defaults.
pub fn warm_up_wait(interval: Duration) -> Duration {
    interval * 2 + crate::store::approx::sync::sync_deadline(interval) * 2
}

/// Resolves when the shutdown signal is sent.
pub(super) async fn stopped(mut signal: watch::Receiver<bool>) {
    let _ = signal.wait_for(|stop| *stop).await;
}

/// Drops expired memory buckets every second so idle keys do not wait for a full shard.
async fn sweep_memory(store: Arc<Store>, signal: watch::Receiver<bool>) -> anyhow::Result<()> {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let stop = stopped(signal);
    tokio::pin!(stop);
    loop {
        tokio::select! {
            _ = &mut stop => return Ok(()),
            _ = tick.tick() => {
                if let Store::Memory(memory) = store.as_ref() {
                    memory.sweep_expired(crate::store::memory::now_us());
                }
            }
        }
    }
}
