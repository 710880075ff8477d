//! The incident switch: an operator's override of every answer of one domain (or of all),
//! for a bounded time, honoured by every instance.
//!
//! Modes: `shadow` decides, counts and charges as usual and answers OK (as `--shadow-mode`
//! does); `open` skips the store and answers OK. An override ends by itself at its expiry,
//! checked on every request against the wall clock (no timer), or early by `DELETE`.
//!
//! Sharing. On a Redis store the overrides live in one hash (`<prefix>tollgate:overrides`,
//! one field per scope, the override as JSON), which every instance reads every
//! [`SYNC_INTERVAL`]: another instance sees a change within that interval plus one round
//! trip ([`VISIBLE_WITHIN`] states the bound the tests hold). The instance that takes the
//! `POST` applies it at once, before it writes Redis, so the switch works on that instance
//! even when Redis is what the incident is about; a write Redis did not take is retried at
//! each sync until it lands or its override ends. A failed read keeps the overrides known
//! (an outage of Redis never ends an override early). The memory store keeps them in
//! process. Expiry uses each instance's wall clock: keep clocks synchronised (NTP).
//!
//! The request path reads an `ArcSwap` of the active list: one atomic load, and a clock
//! read only while some override exists.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use arc_swap::ArcSwap;
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use crate::metrics::Metrics;
use crate::store::{Store, StoreError};

/// `ttl_seconds` when the `POST` names none: an hour.
pub const DEFAULT_TTL_SECONDS: u64 = 3_600;
/// Longest `ttl_seconds`: a day. An incident switch left on must end by itself.
pub const MAX_TTL_SECONDS: u64 = 86_400;
/// How often an instance reads the fleet's overrides from Redis.
pub const SYNC_INTERVAL: Duration = Duration::from_millis(250);
/// How late another instance honours a change at most: a sync interval, and a read that
/// may take up to its deadline.
pub const VISIBLE_WITHIN: Duration = Duration::from_secs(1);
/// Deadline of one read or write of the overrides in Redis.
const STORE_DEADLINE: Duration = Duration::from_millis(500);
/// The hash, after `--redis-key-prefix`.
const KEY: &str = "tollgate:overrides";

/// The scope that covers every domain.
pub const ALL: &str = "all";

/// What an override does to the answers of its scope. `Open` is the stronger: where an
/// `all` and a domain's override meet, the stronger one applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Decide, count and charge as usual; answer OK.
    Shadow,
    /// Skip the store; answer OK.
    Open,
}

impl Mode {
    pub const ALL: [Mode; 2] = [Mode::Shadow, Mode::Open];

    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Shadow => "shadow",
            Mode::Open => "open",
        }
    }
}

/// One override, as kept in Redis and answered by the admin endpoints.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Override {
    /// `all`, or a domain.
    pub scope: String,
    pub mode: Mode,
    /// Unix time in milliseconds at which it ends by itself.
    pub expires_at_ms: u64,
    /// Unix time in milliseconds at which it was set.
    pub set_at_ms: u64,
    /// Who set it: the admin client's address and token id, as the audit line says.
    pub set_by: String,
}

impl Override {
    fn covers(&self, domain: &str) -> bool {
        self.scope == ALL || self.scope == domain
    }

    pub fn is_active(&self, now_ms: u64) -> bool {
        now_ms < self.expires_at_ms
    }
}

/// A change this instance made that Redis has not taken yet.
#[derive(Debug, Clone)]
enum Pending {
    Set(Override),
    End(String),
}

/// The overrides this instance honours, and their sharing through the store.
#[derive(Debug)]
pub struct Overrides {
    key: String,
    table: ArcSwap<Vec<Override>>,
    /// Bumped by every local change: a read of Redis begun before it is not installed.
    generation: AtomicU64,
    pending: Mutex<Vec<Pending>>,
    metrics: Arc<Metrics>,
}

/// Unix time now, in milliseconds.
pub fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

impl Overrides {
    /// No override; `key_prefix` is `--redis-key-prefix`.
    pub fn new(key_prefix: &str, metrics: Arc<Metrics>) -> Overrides {
        Overrides {
            key: format!("{key_prefix}{KEY}"),
            table: ArcSwap::from_pointee(Vec::new()),
            generation: AtomicU64::new(0),
            pending: Mutex::new(Vec::new()),
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
    /// did not take it yet — this instance honours it and retries at each sync.
    pub async fn set(&self, store: &Store, wanted: Override) -> Result<bool, StoreError> {
        self.change(|table| {
            table.retain(|o| o.scope != wanted.scope);
            table.push(wanted.clone());
        });
        self.forget_pending(&wanted.scope);
        match self.write(store, &Pending::Set(wanted.clone())).await {
            Some(Ok(())) => Ok(true),
            None => Ok(false),
            Some(Err(e)) => {
                self.pend(Pending::Set(wanted));
                Err(e)
            }
        }
    }

    /// Ends `scope`'s override here at once, then in the store; the ended one (`None`: no
    /// active override had that scope) and how the store took it (as `set`).
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
        self.forget_pending(scope);
        let stored = match self.write(store, &Pending::End(scope.to_string())).await {
            Some(Ok(())) => Ok(true),
            None => Ok(false),
            Some(Err(e)) => {
                self.pend(Pending::End(scope.to_string()));
                Err(e)
            }
        };
        (ended, stored)
    }

    /// One sync with Redis: sends what it has not taken yet, then reads the fleet's
    /// overrides and installs them (unless this instance changed its own meanwhile). A
    /// failure keeps what is known. Nothing on the memory store.
    pub async fn sync(&self, store: &Store) -> Result<(), StoreError> {
        if !store.is_shared() {
            return Ok(());
        }
        let pending = std::mem::take(&mut *self.pending.lock().unwrap_or_else(PoisonError::into_inner));
        let now = now_ms();
        for (at, change) in pending.iter().enumerate() {
            if let Pending::Set(o) = change {
                if !o.is_active(now) {
                    continue;
                }
            }
            if let Some(Err(e)) = self.write(store, change).await {
                // Keep this one and the rest, in order, for the next sync.
                let mut kept = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
                let newer = std::mem::take(&mut *kept);
                kept.extend(pending[at..].iter().cloned());
                kept.extend(newer);
                return Err(e);
            }
        }
        let generation = self.generation.load(Ordering::Acquire);
        let deadline = Instant::now() + STORE_DEADLINE;
        let command = ::redis::cmd("HGETALL").arg(&self.key).to_owned();
        let value = match store.command(&self.key, command, deadline).await {
            Some(Ok(value)) => value,
            Some(Err(e)) => return Err(e),
            None => return Ok(()),
        };
        let now = now_ms();
        let mut read: Vec<Override> = fields(value)
            .into_iter()
            .filter_map(|(_, json)| serde_json::from_str::<Override>(&json).ok())
            .filter(|o| o.is_active(now))
            .collect();
        // What this instance set and Redis has not taken yet stays honoured here.
        for change in self.pending.lock().unwrap_or_else(PoisonError::into_inner).iter() {
            match change {
                Pending::Set(o) => {
                    read.retain(|r| r.scope != o.scope);
                    read.push(o.clone());
                }
                Pending::End(scope) => read.retain(|r| &r.scope != scope),
            }
        }
        // A local change since the read began wins until the next sync.
        if self.generation.load(Ordering::Acquire) == generation && **self.table.load() != read {
            self.table.store(Arc::new(read));
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

    fn pend(&self, change: Pending) {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner).push(change);
    }

    fn forget_pending(&self, scope: &str) {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner).retain(|p| match p {
            Pending::Set(o) => o.scope != scope,
            Pending::End(s) => s != scope,
        });
    }

    /// Writes one change to the store; `None` on the memory store.
    async fn write(&self, store: &Store, change: &Pending) -> Option<Result<(), StoreError>> {
        let command = match change {
            Pending::Set(o) => {
                let json = serde_json::to_string(o).unwrap_or_default();
                ::redis::cmd("EVAL")
                    .arg(SET_SCRIPT)
                    .arg(1)
                    .arg(&self.key)
                    .arg(&o.scope)
                    .arg(json)
                    .arg(now_ms())
                    .to_owned()
            }
            Pending::End(scope) => ::redis::cmd("HDEL").arg(&self.key).arg(scope).to_owned(),
        };
        let deadline = Instant::now() + STORE_DEADLINE;
        let result = store.command(&self.key, command, deadline).await?;
        Some(result.map(|_| ()))
    }
}

/// Sets one field, drops the fields that ended, and lets the hash expire with the last
/// override (so an abandoned hash does not outlive what it holds).
/// KEYS[1]: the hash. ARGV: scope, the override's JSON, now (Unix ms).
const SET_SCRIPT: &str = r"
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
local now = tonumber(ARGV[3])
local last = 0
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  local ok, o = pcall(cjson.decode, all[i + 1])
  local ends = ok and tonumber(o.expires_at_ms) or 0
  if ends <= now then
    redis.call('HDEL', KEYS[1], all[i])
  elseif ends > last then
    last = ends
  end
end
if last > 0 then
  redis.call('PEXPIREAT', KEYS[1], last)
end
return 1
";

/// The (field, value) pairs of an `HGETALL` reply, RESP2 or RESP3; text fields only.
fn fields(value: ::redis::Value) -> Vec<(String, String)> {
    use ::redis::Value;
    let text = |v: Value| match v {
        Value::BulkString(bytes) => String::from_utf8(bytes).ok(),
        Value::SimpleString(s) => Some(s),
        _ => None,
    };
    match value {
        Value::Map(pairs) => pairs.into_iter().filter_map(|(k, v)| Some((text(k)?, text(v)?))).collect(),
        Value::Array(items) => {
            let mut items = items.into_iter();
            let mut pairs = Vec::new();
            while let (Some(k), Some(v)) = (items.next(), items.next()) {
                if let (Some(k), Some(v)) = (text(k), text(v)) {
                    pairs.push((k, v));
                }
            }
            pairs
        }
        _ => Vec::new(),
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
