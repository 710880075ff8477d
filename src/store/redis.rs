//! The Redis store: every charge of one request in one pipeline of `EVALSHA`.
//!
//! Connections come from a deadpool-redis pool; each checked-out connection is a
//! multiplexed redis-rs connection that many requests share at once (cloning it is cheap
//! and a cancelled request cannot desynchronise it). Keeping a few of them checked out,
//! instead of checking one out per request, saves the pool's `PING` on every checkout:
//! one request is one round trip. A connection that fails is handed back to the pool
//! (which discards it) and the next request checks out a fresh one.
//!
//! Scripts are called by SHA. A `NOSCRIPT` answer (Redis restarted, `SCRIPT FLUSH`) is
//! retried once, for the failed entries only, with `EVAL` (which also caches the script).
//! Nothing is retried after a timeout: the script may have run. Every call, checkout
//! included, finishes by the caller's deadline.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;

use deadpool_redis::redis::aio::{ConnectionLike, MultiplexedConnection};
use deadpool_redis::redis::{self, Pipeline, RedisError, ServerErrorKind, Value};
use deadpool_redis::{Config, Connection, Pool, PoolConfig, Runtime};
use tokio::time::Instant;

use crate::algorithm::{Algorithm, Decision, Hits};

use super::{Charge, StoreError};

const GCRA_LUA: &str = include_str!("lua/gcra.lua");
const SLIDING_LUA: &str = include_str!("lua/sliding_window.lua");
const FIXED_LUA: &str = include_str!("lua/fixed_window.lua");

/// How to reach Redis.
#[derive(Clone)]
pub struct RedisSettings {
    /// `redis://[user:pass@]host:port/db` or `rediss://` for TLS.
    pub url: String,
    /// Multiplexed connections kept open and shared by all requests.
    pub connections: usize,
}

impl fmt::Debug for RedisSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisSettings")
            .field("url", &redact_url(&self.url))
            .field("connections", &self.connections)
            .finish()
    }
}

/// The URL with any password replaced by `***`, for logs and `/rlconfig`.
pub fn redact_url(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let userinfo = &url[scheme + 3..at];
            let user = userinfo.split(':').next().unwrap_or("");
            let user = if userinfo.contains(':') { format!("{user}:***") } else { "***".to_string() };
            format!("{}{user}{}", &url[..scheme + 3], &url[at..])
        }
        _ => url.to_string(),
    }
}

/// A Lua script with its SHA1, computed once.
#[derive(Debug)]
struct Script {
    sha: String,
    source: &'static str,
}

impl Script {
    fn new(source: &'static str) -> Script {
        Script { sha: redis::Script::new(source).get_hash().to_string(), source }
    }
}

/// A checked-out pooled connection and a clone of it that requests share.
struct Slot {
    _pooled: Connection,
    shared: MultiplexedConnection,
    id: usize,
}

/// Redis-backed store.
pub struct RedisStore {
    pool: Pool,
    slots: Box<[Mutex<Option<Slot>>]>,
    next_slot: AtomicUsize,
    next_id: AtomicUsize,
    scripts: [Script; 3],
    healthy: AtomicBool,
    url: String,
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore").field("url", &redact_url(&self.url)).finish_non_exhaustive()
    }
}

impl RedisStore {
    /// Builds the store. Connects lazily: Redis being down at startup is not an error.
    pub fn new(settings: &RedisSettings) -> Result<RedisStore, StoreError> {
        let connections = settings.connections.max(1);
        let mut config = Config::from_url(settings.url.clone());
        config.pool = Some(PoolConfig::new(connections * 2));
        let pool = config
            .create_pool(Some(Runtime::Tokio1))
            .map_err(|e| StoreError::Unavailable(format!("invalid redis settings: {e}")))?;
        Ok(RedisStore {
            pool,
            slots: (0..connections).map(|_| Mutex::new(None)).collect(),
            next_slot: AtomicUsize::new(0),
            next_id: AtomicUsize::new(0),
            scripts: [Script::new(GCRA_LUA), Script::new(SLIDING_LUA), Script::new(FIXED_LUA)],
            healthy: AtomicBool::new(true),
            url: settings.url.clone(),
        })
    }

    /// The Redis URL without its password.
    pub fn redacted_url(&self) -> String {
        redact_url(&self.url)
    }

    /// Whether the last call reached Redis.
    pub fn is_healthy(&self) -> bool {
        self.healthy.load(Ordering::Relaxed)
    }

    /// Charges the batch in one round trip (two if some scripts were missing), by `deadline`.
    pub async fn charge(&self, batch: &[Charge], deadline: Instant) -> Vec<Result<Decision, StoreError>> {
        let result = match tokio::time::timeout_at(deadline, self.run(batch)).await {
            Ok(result) => result,
            Err(_) => Err(StoreError::Timeout),
        };
        match result {
            Ok(results) => {
                self.set_healthy(true);
                results
            }
            Err(e) => {
                self.set_healthy(false);
                vec![Err(e); batch.len()]
            }
        }
    }

    fn set_healthy(&self, up: bool) {
        if self.healthy.swap(up, Ordering::Relaxed) != up {
            if up {
                tracing::info!(redis = %redact_url(&self.url), "redis store is reachable again");
            } else {
                tracing::warn!(redis = %redact_url(&self.url), "redis store is failing; domains apply their failure_mode");
            }
        }
    }

    async fn run(&self, batch: &[Charge]) -> Result<Vec<Result<Decision, StoreError>>, StoreError> {
        let (mut conn, slot, id) = self.connection().await?;
        let pipe = self.pipeline(batch, |script| ("EVALSHA", script.sha.as_str()));
        let values = match conn.req_packed_commands(&pipe, 0, batch.len()).await {
            Ok(values) => values,
            Err(e) => {
                self.drop_connection(slot, id);
                return Err(classify(&e));
            }
        };
        let mut results: Vec<Result<Decision, StoreError>> = Vec::with_capacity(batch.len());
        let mut missing = Vec::new();
        for (i, value) in values.into_iter().enumerate() {
            if is_noscript(&value) {
                missing.push(i);
            }
            results.push(parse(value));
        }
        if !missing.is_empty() {
            let retry: Vec<Charge> = missing.iter().map(|&i| batch[i].clone()).collect();
            let pipe = self.pipeline(&retry, |script| ("EVAL", script.source));
            match conn.req_packed_commands(&pipe, 0, retry.len()).await {
                Ok(values) => {
                    for (&i, value) in missing.iter().zip(values) {
                        results[i] = parse(value);
                    }
                }
                Err(e) => {
                    self.drop_connection(slot, id);
                    let err = classify(&e);
                    for &i in &missing {
                        results[i] = Err(err.clone());
                    }
                }
            }
        }
        Ok(results)
    }

    fn pipeline(&self, batch: &[Charge], call: impl Fn(&Script) -> (&'static str, &str)) -> Pipeline {
        let mut pipe = Pipeline::with_capacity(batch.len());
        for charge in batch {
            let script = &self.scripts[match charge.params.algorithm {
                Algorithm::Gcra => 0,
                Algorithm::SlidingWindow => 1,
                Algorithm::FixedWindow => 2,
            }];
            let (command, body) = call(script);
            let (mode, n) = match charge.hits {
                Hits::Consume(n) => (0, n),
                Hits::Peek => (1, 0),
                Hits::Refund(n) => (2, n),
            };
            let p = &charge.params;
            pipe.cmd(command)
                .arg(body)
                .arg(1)
                .arg(&charge.key)
                .arg(p.limit)
                .arg(p.unit_us)
                .arg(p.burst)
                .arg(mode)
                .arg(n);
        }
        pipe
    }

    /// A shared connection: a clone of a kept one, or a fresh checkout from the pool.
    async fn connection(&self) -> Result<(MultiplexedConnection, usize, usize), StoreError> {
        let slot = self.next_slot.fetch_add(1, Ordering::Relaxed) % self.slots.len();
        if let Some(kept) = self.lock(slot).as_ref() {
            return Ok((kept.shared.clone(), slot, kept.id));
        }
        let pooled = self.pool.get().await.map_err(|e| StoreError::Unavailable(e.to_string()))?;
        let shared = (*pooled).clone();
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut guard = self.lock(slot);
        if guard.is_none() {
            *guard = Some(Slot { _pooled: pooled, shared: shared.clone(), id });
        }
        Ok((shared, slot, id))
    }

    /// Forgets a failed connection (only if the slot still holds that one).
    fn drop_connection(&self, slot: usize, id: usize) {
        let mut guard = self.lock(slot);
        if guard.as_ref().is_some_and(|s| s.id == id) {
            *guard = None;
        }
    }

    fn lock(&self, slot: usize) -> std::sync::MutexGuard<'_, Option<Slot>> {
        self.slots[slot].lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn is_noscript(value: &Value) -> bool {
    matches!(value, Value::ServerError(e) if e.kind() == Some(ServerErrorKind::NoScript))
}

fn classify(e: &RedisError) -> StoreError {
    if e.is_io_error() || e.is_connection_dropped() || e.is_timeout() {
        StoreError::Unavailable(e.to_string())
    } else {
        StoreError::Server(e.to_string())
    }
}

/// A script's `{allowed, remaining, reset_us}` reply.
fn parse(value: Value) -> Result<Decision, StoreError> {
    let as_u64 = |v: &Value| match v {
        Value::Int(i) => Some((*i).max(0) as u64),
        _ => None,
    };
    match value {
        Value::Array(items) if items.len() == 3 => {
            match (as_u64(&items[0]), as_u64(&items[1]), as_u64(&items[2])) {
                (Some(allowed), Some(remaining), Some(reset_us)) => {
                    Ok(Decision { allowed: allowed == 1, remaining, reset_us })
                }
                _ => Err(StoreError::Server(format!("unexpected script reply {items:?}"))),
            }
        }
        Value::ServerError(e) => {
            Err(StoreError::Server(format!("{}: {}", e.code(), e.details().unwrap_or(""))))
        }
        other => Err(StoreError::Server(format!("unexpected script reply {other:?}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_never_print() {
        assert_eq!(redact_url("redis://:s3cret@host:6379/0"), "redis://:***@host:6379/0");
        assert_eq!(redact_url("rediss://user:s3cret@host:6379"), "rediss://user:***@host:6379");
        assert_eq!(redact_url("redis://token@host"), "redis://***@host");
        assert_eq!(redact_url("redis://host:6379"), "redis://host:6379");
        let s = RedisSettings { url: "redis://u:pw@h".into(), connections: 1 };
        assert!(!format!("{s:?}").contains("pw"));
    }
}
