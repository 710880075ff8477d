//! The Redis Sentinel store: the single-node store's behaviour on whichever node the
//! sentinels name as master.
//!
//! deadpool-redis's sentinel pool asks the sentinels for the master's address each time it
//! makes a connection. A few of those connections are kept and shared (`kept`); every
//! request is one pipeline of `EVALSHA` on one of them, with the usual single `EVAL` retry
//! of `NOSCRIPT` entries (`scripts::charge_pipelined`), all by the request's deadline.
//!
//! After a failover the old master may be gone (transport errors), a replica (`READONLY`
//! answers), or — for the seconds until the sentinels reconfigure it — still a master
//! accepting writes that nobody else sees. So besides discarding a connection that failed,
//! a background task asks the sentinels every second which node is master and drops every
//! kept connection when the answer changes; the next request connects to the new master. A
//! connection whose requests keep timing out (a master cut off without a reset) is discarded
//! too. Until the sentinels promote a replica, charges fail and take their domain's failure
//! policy. Replication is asynchronous: counts the old master had not yet sent are lost.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Once, Weak};
use std::time::Duration;

use deadpool_redis::redis::aio::MultiplexedConnection;
use deadpool_redis::redis::{self, ConnectionAddr, IntoConnectionInfo};
use deadpool_redis::sentinel::{Config, Connection, SentinelNodeConnectionInfo, SentinelServerType, TlsMode};
use deadpool_redis::{PoolConfig, Runtime};
use tokio::time::Instant;

use crate::algorithm::Decision;

use super::cluster::node_url;
use super::kept::{Connect, Kept};
use super::redis::redact_url;
use super::scripts::{charge_pipelined, Scripts};
use super::{Charge, StoreError};

/// Requests in a row that time out on one connection before it is replaced.
const TIMEOUTS_BEFORE_RECONNECT: u32 = 3;

/// How often the sentinels are asked which node is master.
const WATCH_PERIOD: Duration = Duration::from_secs(1);

/// How to reach a master through Redis Sentinel.
#[derive(Clone)]
pub struct SentinelSettings {
    /// The master's name in the sentinels' configuration (`sentinel monitor <name> …`).
    pub master: String,
    /// Sentinels: `host:port` or `redis://[user:password@]host:port`.
    pub sentinels: Vec<String>,
    /// Credentials, database and TLS for the master (its host is ignored): `--redis-url`.
    pub master_url: Option<String>,
    /// Multiplexed connections to the master kept open and shared by all requests.
    pub connections: usize,
}

impl fmt::Debug for SentinelSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SentinelSettings")
            .field("master", &self.master)
            .field("sentinels", &self.sentinels.iter().map(|s| redact_url(s)).collect::<Vec<_>>())
            .field("master_url", &self.master_url.as_deref().map(redact_url))
            .field("connections", &self.connections)
            .finish()
    }
}

/// Sentinel-backed store.
pub struct SentinelStore {
    kept: Arc<Kept<MultiplexedConnection>>,
    scripts: Scripts,
    master: String,
    sentinels: Vec<String>,
    watching: Once,
    healthy: AtomicBool,
    timeouts_in_a_row: AtomicU32,
    description: String,
}

impl fmt::Debug for SentinelStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SentinelStore").field("sentinel", &self.description).finish_non_exhaustive()
    }
}

impl SentinelStore {
    /// Builds the store. Connects lazily: sentinels or master down at startup is not an error.
    pub fn new(settings: &SentinelSettings) -> Result<SentinelStore, StoreError> {
        if settings.sentinels.is_empty() {
            return Err(StoreError::Unavailable("no sentinels given".into()));
        }
        let urls: Vec<String> = settings.sentinels.iter().map(|s| node_url(s)).collect();
        let mut config = Config::from_urls(urls.clone(), settings.master.clone(), SentinelServerType::Master);
        config.node_connection_info = settings.master_url.as_deref().map(master_info).transpose()?;
        config.pool = Some(PoolConfig::new(settings.connections.max(1) * 2));
        let pool = config
            .create_pool(Some(Runtime::Tokio1))
            .map_err(|e| StoreError::Unavailable(format!("invalid redis sentinel settings: {e}")))?;
        let connect: Connect<MultiplexedConnection> = Arc::new(move || {
            let pool = pool.clone();
            Box::pin(async move {
                let pooled = pool.get().await.map_err(|e| StoreError::Unavailable(e.to_string()))?;
                // Out of the pool for good: a discarded connection must not come back from
                // it (a demoted master still answers the pool's PING).
                Ok(Connection::take(pooled))
            })
        });
        let shown: Vec<String> = urls.iter().map(|u| redact_url(u)).collect();
        Ok(SentinelStore {
            kept: Arc::new(Kept::new(settings.connections, connect)),
            scripts: Scripts::new(),
            master: settings.master.clone(),
            sentinels: urls,
            watching: Once::new(),
            healthy: AtomicBool::new(true),
            timeouts_in_a_row: AtomicU32::new(0),
            description: format!("{} via {}", settings.master, shown.join(",")),
        })
    }

    /// `master via sentinel,sentinel`, without passwords.
    pub fn description(&self) -> String {
        self.description.clone()
    }

    /// Whether the last call reached the master.
    pub fn is_healthy(&self) -> bool {
        self.healthy.load(Ordering::Relaxed)
    }

    /// Charges the batch in one round trip (two if some scripts were missing), by `deadline`.
    pub async fn charge(&self, batch: &[Charge], deadline: Instant) -> Vec<Result<Decision, StoreError>> {
        self.watching.call_once(|| {
            let kept = Arc::downgrade(&self.kept);
            tokio::spawn(watch_master(kept, self.sentinels.clone(), self.master.clone()));
        });
        let lease = match tokio::time::timeout_at(deadline, self.kept.get()).await {
            Ok(Ok(lease)) => lease,
            Ok(Err(e)) => return self.failed(batch.len(), e),
            Err(_) => return self.failed(batch.len(), StoreError::Timeout),
        };
        let mut conn = lease.conn.clone();
        let work = charge_pipelined(&mut conn, &self.scripts, batch);
        let outcome = match tokio::time::timeout_at(deadline, work).await {
            Ok(outcome) => outcome,
            Err(_) => {
                let n = self.timeouts_in_a_row.fetch_add(1, Ordering::Relaxed) + 1;
                if n >= TIMEOUTS_BEFORE_RECONNECT {
                    self.timeouts_in_a_row.store(0, Ordering::Relaxed);
                    self.kept.discard(&lease);
                }
                return self.failed(batch.len(), StoreError::Timeout);
            }
        };
        self.timeouts_in_a_row.store(0, Ordering::Relaxed);
        if outcome.connection_failed || outcome.replica {
            if outcome.replica {
                tracing::warn!(sentinel = %self.description, "the master became a replica; asking again");
            }
            self.kept.discard(&lease);
        }
        self.set_healthy(!outcome.connection_failed && !outcome.replica);
        outcome.results
    }

    fn failed(&self, n: usize, e: StoreError) -> Vec<Result<Decision, StoreError>> {
        self.set_healthy(false);
        vec![Err(e); n]
    }

    fn set_healthy(&self, up: bool) {
        if self.healthy.swap(up, Ordering::Relaxed) != up {
            if up {
                tracing::info!(sentinel = %self.description, "redis master is reachable again");
            } else {
                tracing::warn!(sentinel = %self.description, "redis master is failing; domains apply failure_mode");
            }
        }
    }
}

/// Until the store is dropped: asks the sentinels which node is master every
/// `WATCH_PERIOD` and drops every kept connection when the answer changes.
async fn watch_master(kept: Weak<Kept<MultiplexedConnection>>, sentinels: Vec<String>, master: String) {
    let mut conns: Vec<Option<MultiplexedConnection>> = vec![None; sentinels.len()];
    let mut known: Option<(String, u16)> = None;
    let mut tick = tokio::time::interval(WATCH_PERIOD);
    loop {
        tick.tick().await;
        let answer = ask_sentinels(&sentinels, &mut conns, &master).await;
        let Some(kept) = kept.upgrade() else { return };
        let Some(now) = answer else { continue };
        if let Some(before) = known.as_ref().filter(|before| **before != now) {
            tracing::warn!(
                master = %master,
                from = %format!("{}:{}", before.0, before.1),
                to = %format!("{}:{}", now.0, now.1),
                "the sentinels switched master; reconnecting"
            );
            kept.discard_all();
        }
        known = Some(now);
    }
}

/// The master's address from the first sentinel that knows it (connections kept).
async fn ask_sentinels(
    urls: &[String],
    conns: &mut [Option<MultiplexedConnection>],
    master: &str,
) -> Option<(String, u16)> {
    let limit = WATCH_PERIOD / 2;
    for (url, conn) in urls.iter().zip(conns.iter_mut()) {
        if conn.is_none() {
            let client = redis::Client::open(url.as_str()).ok()?;
            let made = tokio::time::timeout(limit, client.get_multiplexed_async_connection()).await;
            *conn = made.ok().and_then(Result::ok);
        }
        let Some(c) = conn.as_mut() else { continue };
        let mut cmd = redis::cmd("SENTINEL");
        cmd.arg("GET-MASTER-ADDR-BY-NAME").arg(master);
        match tokio::time::timeout(limit, cmd.query_async::<Option<(String, u16)>>(c)).await {
            Ok(Ok(Some(addr))) => return Some(addr),
            Ok(Ok(None)) => {}
            _ => *conn = None,
        }
    }
    None
}

/// The master's credentials, database and TLS mode from a `redis://` URL.
fn master_info(url: &str) -> Result<SentinelNodeConnectionInfo, StoreError> {
    let info = url
        .into_connection_info()
        .map_err(|e| StoreError::Unavailable(format!("invalid redis url {}: {e}", redact_url(url))))?;
    let tls_mode = match info.addr() {
        ConnectionAddr::TcpTls { insecure: true, .. } => Some(TlsMode::Insecure),
        ConnectionAddr::TcpTls { insecure: false, .. } => Some(TlsMode::Secure),
        _ => None,
    };
    Ok(SentinelNodeConnectionInfo {
        tls_mode,
        redis_connection_info: Some(info.redis_settings().clone().into()),
    })
}

impl super::Remote for SentinelStore {
    async fn charge(&self, batch: &[Charge], deadline: Instant) -> Vec<Result<Decision, StoreError>> {
        SentinelStore::charge(self, batch, deadline).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_master_url_gives_credentials_database_and_tls() {
        let info = master_info("rediss://app:pw@ignored:6379/3").expect("valid");
        assert!(matches!(info.tls_mode, Some(TlsMode::Secure)));
        let redis = info.redis_connection_info.expect("settings");
        assert_eq!(
            (redis.db, redis.username.as_deref(), redis.password.as_deref()),
            (3, Some("app"), Some("pw"))
        );
        assert!(master_info("redis://h:6379/").expect("valid").tls_mode.is_none());
    }

    #[test]
    fn passwords_never_print() {
        let s = SentinelSettings {
            master: "mymaster".into(),
            sentinels: vec!["redis://:s3cret@h:26379".into()],
            master_url: Some("redis://:m4ster@h:6379".into()),
            connections: 1,
        };
        let shown = format!("{s:?}");
        assert!(
            !shown.contains("s3cret") && !shown.contains("m4ster") && shown.contains("mymaster"),
            "{shown}"
        );
    }
}
