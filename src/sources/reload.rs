//! Reload triggers: a debounced watcher on the config directory, and SIGHUP.
//!
//! Both call `Live::reload` (as does `POST /reload` in `admin`). The watcher watches the
//! directory, not the files, so it sees in-place writes, renames onto a file and Kubernetes
//! ConfigMap `..data` symlink swaps alike; any event there schedules one reload after a
//! short quiet period. A reload whose content did not change swaps nothing.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use notify::{RecursiveMode, Watcher};
use tokio::sync::{mpsc, watch};

use crate::sources::serving::Live;

/// Quiet period after the last file event before reloading (editors write in bursts).
pub const DEBOUNCE: Duration = Duration::from_millis(150);

/// Starts watching the config location; reloads until `stop` flips to true.
/// The returned watcher must be kept alive for as long as watching should go on.
pub fn watch_config(
    live: Arc<Live>,
    stop: watch::Receiver<bool>,
) -> notify::Result<notify::RecommendedWatcher> {
    let (tx, rx) = mpsc::unbounded_channel();
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        if event.is_ok() {
            let _ = tx.send(());
        }
    })?;
    watcher.watch(watched_dir(live.path()), RecursiveMode::NonRecursive)?;
    // ConfigMap mounts swap `..data`, a symlink to a timestamped directory: watching the
    // directory itself catches the rename of `..data`.
    tokio::spawn(debounce_and_reload(live, rx, stop));
    Ok(watcher)
}

fn watched_dir(path: &Path) -> &Path {
    if path.is_dir() {
        path
    } else {
        match path.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => parent,
            _ => Path::new("."),
        }
    }
}

async fn debounce_and_reload(
    live: Arc<Live>,
    mut events: mpsc::UnboundedReceiver<()>,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            _ = stopped(&mut stop) => return,
            event = events.recv() => {
                if event.is_none() {
                    return;
                }
            }
        }
        // Wait until the burst of events is over.
        loop {
            match tokio::time::timeout(DEBOUNCE, events.recv()).await {
                Ok(Some(())) => continue,
                Ok(None) => return,
                Err(_) => break,
            }
        }
        reload(&live, "file change").await;
    }
}

/// Reloads on every SIGHUP until `stop` flips to true.
///
/// The handler is installed by the call itself, not when the future first runs: a SIGHUP
/// that arrives once the server reports ready must reload, not kill the process (SIGHUP's
/// default action).
#[cfg(unix)]
pub fn reload_on_sighup(
    live: Arc<Live>,
    mut stop: watch::Receiver<bool>,
) -> impl std::future::Future<Output = ()> {
    use tokio::signal::unix::{signal, SignalKind};
    let hup = signal(SignalKind::hangup());
    async move {
        let Ok(mut hup) = hup else {
            tracing::warn!("cannot listen for SIGHUP; reload by file change or POST /reload");
            return;
        };
        loop {
            tokio::select! {
                _ = stopped(&mut stop) => return,
                _ = hup.recv() => reload(&live, "SIGHUP").await,
            }
        }
    }
}

/// Runs one reload off the async workers (it reads and hashes files).
pub async fn reload(live: &Arc<Live>, trigger: &'static str) {
    let live = live.clone();
    let result = tokio::task::spawn_blocking(move || live.reload()).await;
    if let Ok(Ok((version, true))) = result {
        tracing::debug!(%version, trigger, "reload applied");
    }
}

async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}
