//! The Redis store: every charge of one request in one pipeline of `EVALSHA`.
//!
//! Connections come from a deadpool-redis pool; each checked-out connection is a
//! multiplexed redis-rs connection that many requests share at once (cloning it is cheap
//! and a cancelled request cannot desynchronise it). Keeping a few of them checked out,
//! instead of checking one out per request, saves the pool's `PING` on every checkout:
//! one request is one round trip. A connection that fails is handed back to the pool
//! (which discards it) and the next request checks out a fresh one.
//!
//! Scripts are called by SHA (`scripts`). A `NOSCRIPT` answer (Redis restarted,
//! `SCRIPT FLUSH`) is retried once, for the failed entries only, with `EVAL` (which also
//! caches the script). Nothing is retried after a timeout: the script may have run. Every
//! call, checkout included, finishes by the caller's deadline; a circuit breaker stops
//! calling a Redis that keeps failing.

use std::fmt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use deadpool_redis::redis::aio::MultiplexedConnection;
use deadpool_redis::redis::{self, AsyncConnectionConfig, IntoConnectionInfo};
use deadpool_redis::{Connection, Manager, Pool, Runtime};
use tokio::time::Instant;

use crate::algorithm::Decision;

use super::breaker::BreakerSettings;
use super::scripts::{charge_pipelined, Scripts};
use super::{Charge, StoreError};

/// How to reach Redis.
#[derive(Clone)]
pub struct RedisSettings {
    /// `redis://[user:pass@]host:port/db` or `rediss://` for TLS.
    pub url: String,
    /// Multiplexed connections kept open and shared by all requests.
    pub connections: usize,
    /// PEM CA bundle to verify a `rediss://` server with (default: the system roots).
    pub ca_file: Option<PathBuf>,
    pub breaker: BreakerSettings,
}

impl RedisSettings {
    /// Settings for `url` with the defaults of the CLI.
    pub fn new(url: impl Into<String>) -> RedisSettings {
        RedisSettings { url: url.into(), connections: 2, ca_file: None, breaker: BreakerSettings::default() }
    }
}

impl fmt::Debug for RedisSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisSettings")
            .field("url", &redact_url(&self.url))
            .field("connections", &self.connections)
            .field("ca_file", &self.ca_file)
            .field("breaker", &self.breaker)
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
    scripts: Scripts,
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
        let invalid = |e: &dyn fmt::Display| StoreError::Unavailable(format!("invalid redis settings: {e}"));
        let info = connection_info(settings).map_err(|e| invalid(&e))?;
        // Bounds connecting and answering even outside a request (the pool's own work);
        // every request is bounded by its deadline anyway.
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(1)))
            .set_response_timeout(Some(Duration::from_secs(1)));
        let manager = Manager::new_with_config(info, config).map_err(|e| invalid(&e))?;
        let pool = Pool::builder(manager)
            .max_size(connections * 2)
            .runtime(Runtime::Tokio1)
            .build()
            .map_err(|e| invalid(&e))?;
        Ok(RedisStore {
            pool,
            slots: (0..connections).map(|_| Mutex::new(None)).collect(),
            next_slot: AtomicUsize::new(0),
            next_id: AtomicUsize::new(0),
            scripts: Scripts::new(),
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

    /// One attempt, or two when a kept connection turns out dead (Redis restarted or the
    /// connection was cut while idle): the retry goes over a fresh connection. A request
    /// that was written before the connection died may then be counted twice — one extra
    /// hit, on the side of denying — which is the price of not failing the first request
    /// after every Redis restart.
    async fn run(&self, batch: &[Charge]) -> Result<Vec<Result<Decision, StoreError>>, StoreError> {
        let slot = self.next_slot.fetch_add(1, Ordering::Relaxed) % self.slots.len();
        let (conn, id, reused) = self.connection(slot, false).await?;
        match self.attempt(conn, slot, id, batch).await {
            Err(StoreError::Unavailable(_)) if reused => {
                let (conn, id, _) = self.connection(slot, true).await?;
                self.attempt(conn, slot, id, batch).await
            }
            result => result,
        }
    }

    async fn attempt(
        &self,
        mut conn: MultiplexedConnection,
        slot: usize,
        id: usize,
        batch: &[Charge],
    ) -> Result<Vec<Result<Decision, StoreError>>, StoreError> {
        let outcome = charge_pipelined(&mut conn, &self.scripts, batch).await;
        if outcome.replica {
            // A failover demoted our master: reconnect to find the new one.
            self.drop_connection(slot, id);
            return Err(StoreError::Unavailable("READONLY: connected to a replica".into()));
        }
        if outcome.connection_failed {
            self.drop_connection(slot, id);
            if let Some(Err(e)) = outcome.results.iter().find(|r| r.is_err()) {
                if outcome.results.iter().all(|r| r.is_err()) {
                    return Err(e.clone());
                }
            }
        }
        Ok(outcome.results)
    }

    /// The connection of `slot`, or a new one from the pool when the slot is empty or
    /// `fresh` is asked for (the kept one just failed). Also says whether the connection was
    /// kept from earlier requests (it may have died since).
    async fn connection(
        &self,
        slot: usize,
        fresh: bool,
    ) -> Result<(MultiplexedConnection, usize, bool), StoreError> {
        if !fresh {
            if let Some(kept) = self.lock(slot).as_ref() {
                return Ok((kept.shared.clone(), kept.id, true));
            }
        }
        let pooled = self.pool.get().await.map_err(|e| StoreError::Unavailable(e.to_string()))?;
        let shared = (*pooled).clone();
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut guard = self.lock(slot);
        if guard.is_none() || fresh {
            *guard = Some(Slot { _pooled: pooled, shared: shared.clone(), id });
        }
        Ok((shared, id, false))
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

/// The URL's connection info, with a custom CA for `rediss://` when one is given.
fn connection_info(settings: &RedisSettings) -> Result<redis::ConnectionInfo, String> {
    let Some(ca_file) = &settings.ca_file else {
        return settings.url.as_str().into_connection_info().map_err(|e| e.to_string());
    };
    let root_cert = std::fs::read(ca_file).map_err(|e| format!("reading {}: {e}", ca_file.display()))?;
    let certs = redis::TlsCertificates { client_tls: None, root_cert: Some(root_cert) };
    let client = redis::Client::build_with_tls(settings.url.as_str(), certs).map_err(|e| e.to_string())?;
    Ok(client.get_connection_info().clone())
}

impl super::Remote for RedisStore {
    async fn charge(&self, batch: &[Charge], deadline: Instant) -> Vec<Result<Decision, StoreError>> {
        RedisStore::charge(self, batch, deadline).await
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
        let s = RedisSettings::new("redis://u:pw@h");
        assert!(!format!("{s:?}").contains("pw"));
    }
}
