//! The serving configuration: one `Active` snapshot behind an `ArcSwap`, and `reload()`.
//!
//! A request takes one `Arc<Active>` (`load`) and keeps it to the end, so it never sees
//! two configs. `reload` reads → parses → validates → compiles a whole new snapshot and
//! swaps it in; on any error the previous snapshot keeps serving. Every reload trigger
//! (file watcher, SIGHUP, `POST /reload`) goes through this one function, which also warns
//! of every rule whose bucket keys the new snapshot changes (`crate::sources::key_changes`). A config from
//! xDS starts empty and is swapped by `apply_xds` (the client in `crate::sources::xds`); `source`
//! holds that stream's state.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::SystemTime;

use arc_swap::ArcSwap;

use crate::config::{self, ConfigErrors, LoadOptions, Snapshot};
use crate::telemetry::metrics::history::SnapshotHistory;
use crate::telemetry::metrics::{Metrics, SnapshotCounters};

mod source;

pub use source::{Nack, XdsState};

/// A compiled snapshot and the metric handles of its rules.
#[derive(Debug)]
pub struct Active {
    pub snapshot: Snapshot,
    pub counters: SnapshotCounters,
    /// The one-minute history rings of its rules (for the status page).
    pub history: SnapshotHistory,
    /// The hot-key sketches of its domains (kept across reloads by domain).
    pub hot_keys: crate::telemetry::hotkeys::SnapshotHotKeys,
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
    /// `Some` when the config comes from xDS (then `path` is empty): the stream's state.
    xds: Option<Mutex<XdsState>>,
    /// `/readyz` only with at least one domain configured
    /// (`HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED`).
    ready_needs_domain: bool,
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
        metrics.xds().files();
        Ok(Live {
            path: path.to_path_buf(),
            options,
            current: ArcSwap::from_pointee(Active::new(snapshot, &metrics)),
            metrics,
            reloading: Mutex::new(()),
            last_error: Mutex::new(None),
            xds: None,
            ready_needs_domain: false,
        })
    }

    /// A config that comes from xDS: empty (no domain, nothing limited) until the first
    /// snapshot is applied with `apply_xds`.
    pub fn for_xds(options: LoadOptions, metrics: Arc<Metrics>, state: XdsState) -> Live {
        let snapshot = config::xds::Resources::default().apply([], &options).snapshot;
        metrics.serving(&snapshot.version);
        metrics.xds().xds(&state.server);
        Live {
            path: PathBuf::new(),
            options,
            current: ArcSwap::from_pointee(Active::new(snapshot, &metrics)),
            metrics,
            reloading: Mutex::new(()),
            last_error: Mutex::new(None),
            xds: Some(Mutex::new(state)),
            ready_needs_domain: false,
        }
    }

    /// `/readyz` says ready only once a domain is configured
    /// (`HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED=true`).
    pub fn with_ready_needs_domain(mut self, needs: bool) -> Live {
        self.ready_needs_domain = needs;
        self
    }

    /// Whether the config lets this server be ready, and why not (or what it serves).
    /// xDS before the first snapshot: not ready, unless started with force-start, when it
    /// is ready and says that nothing is limited.
    pub fn readiness(&self) -> Result<&'static str, &'static str> {
        let domains = self.load().snapshot.domains.len();
        let state = self.xds_state();
        let received = state.as_ref().is_none_or(|s| s.snapshot_received);
        if self.ready_needs_domain && domains == 0 {
            return Err(if received {
                "not ready: no domain configured (HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED)\n"
            } else {
                "not ready: waiting for the first xDS snapshot\n"
            });
        }
        match state {
            Some(state) if !state.snapshot_received && state.force_start => {
                Ok("ready: no xDS snapshot yet, nothing is limited (force start)\n")
            }
            Some(state) if !state.snapshot_received => Err("not ready: waiting for the first xDS snapshot\n"),
            _ => Ok("ready\n"),
        }
    }

    /// The xDS stream's state; `None` when the config comes from files.
    pub fn xds_state(&self) -> Option<XdsState> {
        let state = self.xds.as_ref()?;
        Some(state.lock().unwrap_or_else(PoisonError::into_inner).clone())
    }

    /// Changes the xDS stream's state (nothing when the config comes from files).
    pub fn update_xds(&self, change: impl FnOnce(&mut XdsState)) {
        if let Some(state) = &self.xds {
            change(&mut state.lock().unwrap_or_else(PoisonError::into_inner));
        }
    }

    /// Swaps in a snapshot built from xDS resources (`config::xds`); returns whether the
    /// serving version changed.
    pub fn apply_xds(&self, snapshot: Snapshot) -> bool {
        let _one_at_a_time = self.reloading.lock().unwrap_or_else(|e| e.into_inner());
        let changed = self.swap(snapshot);
        self.metrics.reload(true);
        changed
    }

    /// The snapshot to serve one request with.
    pub fn load(&self) -> Arc<Active> {
        self.current.load_full()
    }

    /// How the config loads (the same at every reload and xDS update).
    pub fn options(&self) -> &LoadOptions {
        &self.options
    }

    /// The metrics the swaps report to.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Where the config is read from (empty when it comes from xDS).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The latest reload attempt if it failed; `None` after a successful one (or none).
    pub fn last_error(&self) -> Option<ReloadFailure> {
        self.last_error.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// One warning and the metric per change that starts buckets afresh (`crate::sources::key_changes`).
    fn warn_fresh(&self, fresh: &[crate::sources::key_changes::Fresh]) {
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

    /// Swaps `snapshot` in if its version differs from the serving one (warning of the
    /// buckets it starts afresh); returns whether it did.
    fn swap(&self, snapshot: Snapshot) -> bool {
        let previous = self.current.load().snapshot.version.clone();
        let version = snapshot.version.clone();
        if previous == version {
            return false;
        }
        let rules = snapshot.rule_count();
        self.metrics.export_fresh_rules(&snapshot);
        self.warn_fresh(&crate::sources::key_changes::between(&self.current.load().snapshot, &snapshot));
        self.current.store(Arc::new(Active::new(snapshot, &self.metrics)));
        self.metrics.serving(&version);
        tracing::info!(%version, %previous, rules, "config reloaded");
        true
    }

    /// Rebuilds the snapshot from disk and swaps it in (from xDS: nothing to re-read, the
    /// serving version is returned unchanged). On error the current snapshot
    /// keeps serving, and the errors are logged, counted and returned.
    /// Returns the version now serving and whether it changed.
    pub fn reload(&self) -> Result<(String, bool), ConfigErrors> {
        let _one_at_a_time = self.reloading.lock().unwrap_or_else(|e| e.into_inner());
        if self.xds.is_some() {
            // Nothing to re-read: the server sends every change.
            return Ok((self.current.load().snapshot.version.clone(), false));
        }
        match config::load_path_with(&self.path, &self.options) {
            Ok(snapshot) => {
                let version = snapshot.version.clone();
                let changed = self.swap(snapshot);
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
