//! The incident switch: an operator's override of every answer of one domain (or of all),
//! for a bounded time, honoured by every instance.
//!
//! Modes: `shadow` decides, counts and charges as usual and answers OK (as `--shadow-mode`
//! does); `open` skips the store and answers OK. An override ends by itself at its expiry,
//! checked on every request against the wall clock (no timer), or early by `DELETE`.
//!
//! Sharing. On a Redis store the overrides live in one hash (`<prefix>tollgate:overrides`,
//! one field per scope, see `stored`; the store sends and reads it), which every instance reads every [`SYNC_INTERVAL`]:
//! another instance sees a change within that interval plus one round trip
//! ([`VISIBLE_WITHIN`] states the bound the tests hold). The instance that takes the `POST`
//! or `DELETE` applies it at once, before it writes Redis, so the switch works on that
//! instance even when Redis is what the incident is about; a write Redis did not take is
//! retried at each sync until it lands, its override ends, or Redis refuses it.
//!
//! Ended stays ended. Each change carries the version of its scope this instance last read,
//! and Redis takes it only over that version (the store's `shared_change.lua`, versions
//! from the server's clock): a change that waited out a partition is dropped (logged, counted in
//! `tollgate_override_replays_refused_total`) once another instance changed the scope, so
//! it never brings back an override ended elsewhere nor ends or replaces a newer one. An
//! operator's call answered now is the newest change: it applies over whatever Redis holds.
//!
//! A failed read keeps the overrides known (an outage of Redis never ends an override
//! early). Overrides read back are capped at [`MAX_TTL_SECONDS`]. The memory store keeps
//! them in process. Expiry uses each instance's wall clock: keep clocks synchronised (NTP).
//!
//! The request path reads an `ArcSwap` of the active list: one atomic load, and a clock
//! read only while some override exists.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio::time::Instant;

use crate::store::{Store, StoreError};
use crate::telemetry::metrics::Metrics;

mod model;
mod stored;

use crate::store::shared::Taken;
pub use model::{now_ms, Mode, Override, ALL, DEFAULT_TTL_SECONDS, MAX_TTL_SECONDS};
use stored::Change;

/// How often an instance reads the fleet's overrides from Redis.
pub const SYNC_INTERVAL: Duration = Duration::from_millis(250);
/// How late another instance honours a change at most: a sync interval, and a read that
/// may take up to its deadline.
pub const VISIBLE_WITHIN: Duration = Duration::from_secs(1);
/// Deadline of one read or write of the overrides in Redis.
const STORE_DEADLINE: Duration = Duration::from_millis(500);
/// The hash, after `--redis-key-prefix`.
const KEY: &str = "tollgate:overrides";

/// The overrides this instance honours, and their sharing through the store.
#[derive(Debug)]
pub struct Overrides {
    key: String,
    table: ArcSwap<Vec<Override>>,
    /// Bumped by every local change, and again once its write is done: a read of Redis
    /// begun before is not installed.
    generation: AtomicU64,
    /// What Redis has not taken yet, at most one change per scope, oldest first.
    pending: Mutex<Vec<Change>>,
    /// Each scope's version in Redis as this instance last read or wrote it: the base of
    /// its next change of that scope.
    versions: Mutex<HashMap<String, u64>>,
    metrics: Arc<Metrics>,
}

impl Overrides {
    /// No override; `key_prefix` is `--redis-key-prefix`.
    pub fn new(key_prefix: &str, metrics: Arc<Metrics>) -> Overrides {
        Overrides {
            key: format!("{key_prefix}{KEY}"),
            table: ArcSwap::from_pointee(Vec::new()),
            generation: AtomicU64::new(0),
            pending: Mutex::new(Vec::new()),
            versions: Mutex::new(HashMap::new()),
            metrics,
        }
    }

    /// The mode `domain`'s answers take now, if an override covers it. A domain that is not
    /// UTF-8 is no configured domain: only `all` covers it.
    pub fn mode(&self, domain: &[u8]) -> Option<Mode> {
        let table = self.table.load();
        if table.is_empty() {
            return None;
        }
        let domain = std::str::from_utf8(domain).unwrap_or(ALL);
        let now = now_ms();
        table.iter().filter(|o| o.is_active(now) && o.covers(domain)).map(|o| o.mode).max()
    }

    /// The active overrides, soonest to end first.
    pub fn active(&self) -> Vec<Override> {
        let now = now_ms();
        let mut active: Vec<Override> =
            self.table.load().iter().filter(|o| o.is_active(now)).cloned().collect();
        active.sort_by(|a, b| a.expires_at_ms.cmp(&b.expires_at_ms).then_with(|| a.scope.cmp(&b.scope)));
        active
    }

    /// Sets `wanted` here at once (replacing its scope's), then in the store. `Ok(true)`:
    /// the fleet has it; `Ok(false)`: the memory store (this instance only); `Err`: Redis
    /// did not take it yet — this instance honours it and retries at each sync, where it
    /// lands only if no other instance changed the scope in Redis meanwhile.
    pub async fn set(&self, store: &Store, wanted: Override) -> Result<bool, StoreError> {
        self.change(|table| {
            table.retain(|o| o.scope != wanted.scope);
            table.push(wanted.clone());
        });
        let scope = wanted.scope.clone();
        let change = self.prepare(&scope, Some(wanted));
        self.send_now(store, change).await
    }

    /// Ends `scope`'s override here at once, then in the store; the ended one (`None`: no
    /// active override had that scope) and how the store took it (as `set`). The end lasts
    /// in Redis: no older change of the scope, replayed later by any instance, undoes it.
    pub async fn end(&self, store: &Store, scope: &str) -> (Option<Override>, Result<bool, StoreError>) {
        let now = now_ms();
        let mut ended = None;
        self.change(|table| {
            if let Some(at) = table.iter().position(|o| o.scope == scope) {
                let gone = table.remove(at);
                if gone.is_active(now) {
                    ended = Some(gone);
                }
            }
        });
        let change = self.prepare(scope, None);
        (ended, self.send_now(store, change).await)
    }

    /// One sync with Redis: sends what it has not taken yet (each change is refused if its
    /// scope changed in Redis since this instance read it), then reads the fleet's
    /// overrides and installs them (unless this instance changed its own meanwhile). A
    /// failure keeps what is known. Nothing on the memory store.
    pub async fn sync(&self, store: &Store) -> Result<(), StoreError> {
        if !store.is_shared() {
            return Ok(());
        }
        self.replay(store).await?;
        let generation = self.generation.load(Ordering::Acquire);
        let deadline = Instant::now() + STORE_DEADLINE;
        let records = match store.read_records(&self.key, deadline).await {
            Some(Ok(records)) => records,
            Some(Err(e)) => return Err(e),
            None => return Ok(()),
        };
        let now = now_ms();
        let stored::Read { overrides, versions } = stored::read(records, now);
        let mut read: Vec<Override> = overrides.into_iter().filter(|o| o.is_active(now)).collect();
        // What this instance changed and Redis has not taken yet stays honoured here.
        for change in self.pending.lock().unwrap_or_else(PoisonError::into_inner).iter() {
            read.retain(|r| r.scope != change.scope);
            if let Some(o) = &change.set {
                read.push(o.clone());
            }
        }
        // A local change since the read began wins until the next sync.
        if self.generation.load(Ordering::Acquire) == generation {
            *self.versions.lock().unwrap_or_else(PoisonError::into_inner) = versions;
            if **self.table.load() != read {
                self.table.store(Arc::new(read));
            }
        }
        Ok(())
    }

    /// Sets `tollgate_override_active` of every exported scope: 1 while an override of
    /// that scope and mode is active (refreshed before each scrape).
    pub fn export(&self) {
        let active = self.active();
        self.metrics.set_overrides_active(|scope, mode| {
            active.iter().any(|o| o.scope == scope && o.mode.as_str() == mode)
        });
    }

    fn change(&self, edit: impl FnOnce(&mut Vec<Override>)) {
        let mut table = (**self.table.load()).clone();
        let now = now_ms();
        table.retain(|o| o.is_active(now));
        edit(&mut table);
        self.generation.fetch_add(1, Ordering::AcqRel);
        self.table.store(Arc::new(table));
    }

    /// A change of `scope` over the version last read; it replaces a pending one.
    fn prepare(&self, scope: &str, set: Option<Override>) -> Change {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner).retain(|p| p.scope != scope);
        let base = self.versions.lock().unwrap_or_else(PoisonError::into_inner).get(scope).copied();
        Change::new(scope, set, base.unwrap_or(0))
    }

    /// Writes an operator's change now. Refused because another instance changed the scope
    /// since the last read, it is sent again over that version: the operator's call is the
    /// newer one (only changes that waited are refused for good). Not taken by the
    /// deadline, or this call cancelled, it is pending over the last version seen.
    async fn send_now(&self, store: &Store, change: Change) -> Result<bool, StoreError> {
        let mut unsent = Unsent { overrides: self, change: Some(change) };
        let deadline = Instant::now() + STORE_DEADLINE;
        while let Some(change) = &unsent.change {
            match stored::write(store, &self.key, change, deadline).await {
                None => unsent.change = None,
                Some(Ok(Taken::Applied(version))) => {
                    self.note(&change.scope, version);
                    unsent.change = None;
                    return Ok(true);
                }
                Some(Ok(Taken::Refused(version))) => {
                    if let Some(change) = &mut unsent.change {
                        change.base = version;
                    }
                }
                Some(Err(e)) => return Err(e),
            }
        }
        Ok(false)
    }

    /// Sends the pending changes in order; the first that fails stays, with those after it.
    async fn replay(&self, store: &Store) -> Result<(), StoreError> {
        let pending = std::mem::take(&mut *self.pending.lock().unwrap_or_else(PoisonError::into_inner));
        let now = now_ms();
        for (at, change) in pending.iter().enumerate() {
            if change.lapsed(now) {
                continue;
            }
            let deadline = Instant::now() + STORE_DEADLINE;
            match stored::write(store, &self.key, change, deadline).await {
                None => {}
                Some(Ok(Taken::Applied(version))) => {
                    self.note(&change.scope, version);
                    // A change made here since, over the same version, follows this one.
                    for newer in self.pending.lock().unwrap_or_else(PoisonError::into_inner).iter_mut() {
                        if newer.scope == change.scope && newer.base == change.base {
                            newer.base = version;
                        }
                    }
                }
                Some(Ok(Taken::Refused(version))) => self.refused(change, version),
                Some(Err(e)) => {
                    // Keep this one and the rest, in order, unless this instance changed
                    // their scope since.
                    let mut kept = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
                    let newer = std::mem::take(&mut *kept);
                    kept.extend(
                        pending[at..].iter().filter(|p| newer.iter().all(|n| n.scope != p.scope)).cloned(),
                    );
                    kept.extend(newer);
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    fn note(&self, scope: &str, version: u64) {
        self.versions.lock().unwrap_or_else(PoisonError::into_inner).insert(scope.to_string(), version);
    }

    /// A pending change Redis refused: another instance changed the scope after this one
    /// last read it. Dropped; the next read installs what the fleet has.
    fn refused(&self, change: &Change, version: u64) {
        tracing::warn!(
            scope = %crate::telemetry::escape::escape(change.scope.as_bytes()),
            change = change.kind(),
            set_by = change.set.as_ref().map_or("", |o| o.set_by.as_str()),
            base_version = change.base,
            version,
            "overrides: a change made while Redis was unreachable is dropped: another instance \
             changed that scope since"
        );
        self.metrics.override_replay_refused(change.kind());
    }
}

/// A change `send_now` has not seen taken: pending when dropped (an error, a deadline, or
/// the admin call cancelled at any await). Dropping it also marks that a write happened, so
/// that a read which overlapped it is not installed.
struct Unsent<'a> {
    overrides: &'a Overrides,
    change: Option<Change>,
}

impl Drop for Unsent<'_> {
    fn drop(&mut self) {
        if let Some(change) = self.change.take() {
            let mut pending = self.overrides.pending.lock().unwrap_or_else(PoisonError::into_inner);
            // A sync that failed meanwhile may have put an older one back.
            pending.retain(|p| p.scope != change.scope);
            pending.push(change);
        }
        self.overrides.generation.fetch_add(1, Ordering::AcqRel);
    }
}

/// Runs `sync` every [`SYNC_INTERVAL`] until the task is dropped (aborted at shutdown). A
/// failing Redis is logged once per outage, and again when it recovers.
pub async fn sync_forever(overrides: Arc<Overrides>, store: Arc<Store>) {
    if !store.is_shared() {
        return;
    }
    let mut failing = false;
    let mut tick = tokio::time::interval(SYNC_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        match overrides.sync(&store).await {
            Ok(()) if failing => {
                failing = false;
                tracing::info!("overrides: reading them from Redis again");
            }
            Ok(()) => {}
            Err(e) if !failing => {
                failing = true;
                tracing::warn!(error = %e, "overrides: Redis unreachable; the known overrides stay in force");
            }
            Err(_) => {}
        }
    }
}

#[cfg(test)]
mod tests;
