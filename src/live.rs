//! The serving configuration: one `Active` snapshot behind an `ArcSwap`, and `reload()`.
//!
//! A request takes one `Arc<Active>` (`load`) and keeps it to the end, so it never sees
//! two configs. `reload` reads → parses → validates → compiles a whole new snapshot and
//! swaps it in; on any error the previous snapshot keeps serving. Every reload trigger
//! (file watcher, SIGHUP, `POST /reload`) goes through this one function, which also warns
//! of every rule whose bucket keys the new snapshot changes (`crate::fresh`).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::SystemTime;

use arc_swap::ArcSwap;

use crate::config::{self, ConfigErrors, LoadOptions, Snapshot};
use crate::metrics::history::SnapshotHistory;
use crate::metrics::{Metrics, SnapshotCounters};

/// A compiled snapshot and the metric handles of its rules.
#[derive(Debug)]
pub struct Active {
    pub snapshot: Snapshot,
    pub counters: SnapshotCounters,
    /// The one-minute history rings of its rules (for the status page).
    pub history: SnapshotHistory,
    /// The hot-key sketches of its domains (kept across reloads by domain).
    pub hot_keys: crate::hotkeys::SnapshotHotKeys,
}

impl Active {
    fn new(snapshot: Snapshot, metrics: &Metrics) -> Active {
        let counters = metrics.counters_for(&snapshot);
        let history = metrics.history().for_snapshot(&snapshot);
        let hot_keys = metrics.hot_keys().for_snapshot(&snapshot, metrics.history().now());
        Active { snapshot, counters, history, hot_keys }
    }
}

/// A reload that failed: when, and its errors as text.
#[derive(Debug, Clone)]
pub struct ReloadFailure {
    pub at: SystemTime,
    pub message: String,
}

/// The config a server is serving, and where it comes from.
#[derive(Debug)]
pub struct Live {
    path: PathBuf,
    /// How the files load, the same at every reload (a merged domain stays merged).
    options: LoadOptions,
    current: ArcSwap<Active>,
    metrics: Arc<Metrics>,
    /// Serialises reloads: two triggers at once must not interleave their swaps.
    reloading: Mutex<()>,
    /// The latest reload attempt, if it failed (cleared by a successful one).
    last_error: Mutex<Option<ReloadFailure>>,
}

impl Live {
    /// Loads `path` with the default options; an invalid config is an error.
    pub fn load_initial(path: &Path, metrics: Arc<Metrics>) -> Result<Live, ConfigErrors> {
        Live::load_initial_with(path, LoadOptions::default(), metrics)
    }

    /// Loads `path` with `options` (kept for every reload); an invalid config is an error
    /// (fatal at startup).
    pub fn load_initial_with(
        path: &Path,
        options: LoadOptions,
        metrics: Arc<Metrics>,
    ) -> Result<Live, ConfigErrors> {
        let snapshot = config::load_path_with(path, &options)?;
        metrics.serving(&snapshot.version);
        metrics.export_fresh_rules(&snapshot);
        Ok(Live {
            path: path.to_path_buf(),
            options,
            current: ArcSwap::from_pointee(Active::new(snapshot, &metrics)),
            metrics,
            reloading: Mutex::new(()),
            last_error: Mutex::new(None),
        })
    }

    /// The snapshot to serve one request with.
    pub fn load(&self) -> Arc<Active> {
        self.current.load_full()
    }

    /// Where the config is read from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The latest reload attempt if it failed; `None` after a successful one (or none).
    pub fn last_error(&self) -> Option<ReloadFailure> {
        self.last_error.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// One warning and the metric per change that starts buckets afresh (`crate::fresh`).
    fn warn_fresh(&self, fresh: &[crate::fresh::Fresh]) {
        for change in fresh {
            let rule = change.rule.as_deref().unwrap_or("*");
            let changed = change.changes.join("; ");
            tracing::warn!(
                domain = %change.domain,
                rule,
                rules = change.rules,
                %changed,
                "config reload changes bucket keys: these buckets start afresh (counts reset)"
            );
            self.metrics.fresh_rules(&change.domain, change.rules);
        }
    }

    /// Rebuilds the snapshot from disk and swaps it in. On error the current snapshot
    /// keeps serving, and the errors are logged, counted and returned.
    /// Returns the version now serving and whether it changed.
    pub fn reload(&self) -> Result<(String, bool), ConfigErrors> {
        let _one_at_a_time = self.reloading.lock().unwrap_or_else(|e| e.into_inner());
        match config::load_path_with(&self.path, &self.options) {
            Ok(snapshot) => {
                let previous = self.current.load().snapshot.version.clone();
                let version = snapshot.version.clone();
                let changed = previous != version;
                if changed {
                    let rules = snapshot.rule_count();
                    self.metrics.export_fresh_rules(&snapshot);
                    self.warn_fresh(&crate::fresh::between(&self.current.load().snapshot, &snapshot));
                    self.current.store(Arc::new(Active::new(snapshot, &self.metrics)));
                    self.metrics.serving(&version);
                    tracing::info!(%version, %previous, rules, "config reloaded");
                }
                self.metrics.reload(true);
                *self.last_error.lock().unwrap_or_else(PoisonError::into_inner) = None;
                Ok((version, changed))
            }
            Err(errors) => {
                self.metrics.reload(false);
                let failure = ReloadFailure { at: SystemTime::now(), message: errors.to_string() };
                *self.last_error.lock().unwrap_or_else(PoisonError::into_inner) = Some(failure);
                tracing::error!(path = %self.path.display(), "config reload failed, previous config keeps serving:\n{errors}");
                Err(errors)
            }
        }
    }
}
