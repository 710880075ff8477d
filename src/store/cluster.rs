//! The Redis Cluster store: each charge is one `EVALSHA` on the master that owns its key.
//!
//! A bucket is one key, so every script call touches one slot. The redis-rs cluster client
//! (created by deadpool-redis's cluster pool, then kept and shared like the single-node
//! store's connections, see `kept`) routes each command by its key's slot, follows `MOVED`
//! and `ASK`, and refreshes the slot map when the topology changes. It keeps one multiplexed
//! connection per master.
//!
//! One request's charges are sent as separate commands, all at once (`join_all`), not as a
//! pipeline: the cluster client rejects a pipeline spanning slots, and re-sends a whole
//! pipeline when one entry is redirected — which would charge the other entries twice. A
//! single command that is redirected did not run, so following the redirect is exact.
//! Commands issued together for one master leave on its connection together: the request
//! costs one `EVALSHA` per charge and one round trip (to every master it touches, in
//! parallel). `NOSCRIPT` is per node: that entry alone is retried once with `EVAL`.
//!
//! Every command has the request's deadline on its own, so a dead master costs only the
//! charges whose buckets lived there (they time out and take their domain's failure
//! policy) while the others are answered by their masters.
//!
//! `key_slot` is the Redis Cluster slot function (CRC16 of the key, or of its hash tag).

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use deadpool_redis::cluster::{ClusterConnection, Config, Connection};
use deadpool_redis::redis::aio::ConnectionLike;
use deadpool_redis::redis::{ErrorKind, RedisResult, ServerErrorKind, Value};
use deadpool_redis::{PoolConfig, Runtime};
use futures_util::future::join_all;
use tokio::time::Instant;

use crate::algorithm::Decision;

use super::kept::{Connect, Kept};
use super::redis::redact_url;
use super::scripts::{classify, is_noscript, parse, Call, Scripts};
use super::{Charge, StoreError};

/// Number of hash slots in a Redis Cluster.
pub const SLOTS: u16 = 16384;

/// How to reach a Redis Cluster.
#[derive(Clone)]
pub struct ClusterSettings {
    /// Seed nodes: `host:port` or `redis://[user:password@]host:port` (`rediss://` for TLS).
    /// Any reachable node is enough: the client discovers the others.
    pub nodes: Vec<String>,
    /// Cluster connections kept open (each holds one connection per master).
    pub connections: usize,
}

impl fmt::Debug for ClusterSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClusterSettings")
            .field("nodes", &redacted(&self.nodes))
            .field("connections", &self.connections)
            .finish()
    }
}

/// Redis-Cluster-backed store.
pub struct ClusterStore {
    kept: Kept<ClusterConnection>,
    scripts: Arc<Scripts>,
    healthy: AtomicBool,
    nodes: Vec<String>,
}

impl fmt::Debug for ClusterStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClusterStore").field("nodes", &redacted(&self.nodes)).finish_non_exhaustive()
    }
}

impl ClusterStore {
    /// Builds the store. Connects lazily: the cluster being down at startup is not an error.
    pub fn new(settings: &ClusterSettings) -> Result<ClusterStore, StoreError> {
        if settings.nodes.is_empty() {
            return Err(StoreError::Unavailable("no redis cluster nodes given".into()));
        }
        let urls: Vec<String> = settings.nodes.iter().map(|n| node_url(n)).collect();
        let mut config = Config::from_urls(urls.clone());
        config.pool = Some(PoolConfig::new(settings.connections.max(1) * 2));
        let pool = config
            .create_pool(Some(Runtime::Tokio1))
            .map_err(|e| StoreError::Unavailable(format!("invalid redis cluster settings: {e}")))?;
        let connect: Connect<ClusterConnection> = Arc::new(move || {
            let pool = pool.clone();
            Box::pin(async move {
                let pooled = pool.get().await.map_err(|e| StoreError::Unavailable(e.to_string()))?;
                // Out of the pool for good: it is shared, and repairs itself node by node.
                Ok(Connection::take(pooled))
            })
        });
        Ok(ClusterStore {
            kept: Kept::new(settings.connections, connect),
            scripts: Arc::new(Scripts::new()),
            healthy: AtomicBool::new(true),
            nodes: urls,
        })
    }

    /// The seed nodes, without passwords.
    pub fn redacted_nodes(&self) -> String {
        redacted(&self.nodes).join(",")
    }

    /// Whether every charge of the last call reached its master.
    pub fn is_healthy(&self) -> bool {
        self.healthy.load(Ordering::Relaxed)
    }

    /// Charges the batch: one command per charge, all in flight together, each by
    /// `deadline`. Results are in batch order.
    pub async fn charge(&self, batch: &[Charge], deadline: Instant) -> Vec<Result<Decision, StoreError>> {
        let lease = match tokio::time::timeout_at(deadline, self.kept.get()).await {
            Ok(Ok(lease)) => lease,
            Ok(Err(e)) => return self.failed(batch.len(), e),
            Err(_) => return self.failed(batch.len(), StoreError::Timeout),
        };
        let calls = batch.iter().map(|charge| self.charge_one(lease.conn.clone(), charge, deadline));
        let results = join_all(calls).await;
        // The client reconnects nodes and refreshes slots by itself; it is replaced only
        // when nothing at all got through it.
        if results.iter().all(|r| matches!(r, Err(StoreError::Unavailable(_)))) {
            self.kept.discard(&lease);
        }
        let reached =
            results.iter().all(|r| !matches!(r, Err(StoreError::Timeout | StoreError::Unavailable(_))));
        self.set_healthy(reached);
        results
    }

    fn failed(&self, n: usize, e: StoreError) -> Vec<Result<Decision, StoreError>> {
        self.set_healthy(false);
        vec![Err(e); n]
    }

    async fn charge_one(
        &self,
        mut conn: ClusterConnection,
        charge: &Charge,
        deadline: Instant,
    ) -> Result<Decision, StoreError> {
        let cmd = self.scripts.command(charge, Call::Sha);
        let reply = tokio::time::timeout_at(deadline, conn.req_packed_command(&cmd)).await;
        let value = match reply.map_err(|_| StoreError::Timeout)? {
            Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => None,
            Ok(value) if is_noscript(&value) => None,
            other => Some(other),
        };
        let value = match value {
            Some(value) => value,
            // This node lacks the script: EVAL (which also caches it there), once.
            None => {
                let cmd = self.scripts.command(charge, Call::Source);
                tokio::time::timeout_at(deadline, conn.req_packed_command(&cmd))
                    .await
                    .map_err(|_| StoreError::Timeout)?
            }
        };
        decision(value)
    }

    fn set_healthy(&self, up: bool) {
        if self.healthy.swap(up, Ordering::Relaxed) != up {
            if up {
                tracing::info!(nodes = %self.redacted_nodes(), "redis cluster is reachable again");
            } else {
                tracing::warn!(
                    nodes = %self.redacted_nodes(),
                    "redis cluster is failing (some masters or all); their charges apply failure_mode"
                );
            }
        }
    }
}

fn decision(reply: RedisResult<Value>) -> Result<Decision, StoreError> {
    match reply {
        Ok(value) => parse(value),
        Err(e) => Err(classify(&e)),
    }
}

/// `host:port` → `redis://host:port`; a URL is kept as it is.
pub fn node_url(node: &str) -> String {
    let node = node.trim();
    if node.contains("://") {
        node.to_string()
    } else {
        format!("redis://{node}")
    }
}

fn redacted(nodes: &[String]) -> Vec<String> {
    nodes.iter().map(|n| redact_url(n)).collect()
}

/// The hash slot Redis Cluster assigns to `key`: CRC16 (XMODEM) of the hash tag — the
/// bytes between the first `{` and the next `}`, when not empty — or of the whole key,
/// modulo 16384.
pub fn key_slot(key: &[u8]) -> u16 {
    crc16(hash_tag(key).unwrap_or(key)) % SLOTS
}

/// The part of `key` Redis Cluster hashes, when it is not the whole key.
pub fn hash_tag(key: &[u8]) -> Option<&[u8]> {
    let open = key.iter().position(|&b| b == b'{')?;
    let close = key[open + 1..].iter().position(|&b| b == b'}')?;
    (close > 0).then(|| &key[open + 1..open + 1 + close])
}

/// CRC16-CCITT (XMODEM): polynomial 0x1021, initial value 0, as in the Redis Cluster spec.
fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in bytes {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 { (crc << 1) ^ 0x1021 } else { crc << 1 };
        }
    }
    crc
}

impl super::Remote for ClusterStore {
    async fn charge(&self, batch: &[Charge], deadline: Instant) -> Vec<Result<Decision, StoreError>> {
        ClusterStore::charge(self, batch, deadline).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc16_matches_the_spec_test_vector() {
        // Redis Cluster spec, appendix A: "123456789" → 0x31C3.
        assert_eq!(crc16(b"123456789"), 0x31C3);
    }

    #[test]
    fn slots_match_cluster_keyslot_answers() {
        // Each pair is a `CLUSTER KEYSLOT` answer from redis-server 7.0.
        let cases: [(&str, u16); 14] = [
            ("foo", 12182),
            ("bar", 5061),
            ("123456789", 12739),
            ("somekey", 11058),
            ("foo{hash_tag}", 2515),
            ("bar{hash_tag}", 2515),
            ("{user1000}.following", 3443),
            ("foo{}{bar}", 8363),
            ("foo{{bar}}zap", 4015),
            ("foo{bar}{zap}", 5061),
            ("{}", 15257),
            ("", 0),
            ("tg:gs:3:api4:user5:alice", 7141),
            ("x{", 3596),
        ];
        for (key, slot) in cases {
            assert_eq!(key_slot(key.as_bytes()), slot, "{key:?}");
        }
    }

    #[test]
    fn node_addresses_become_urls_and_passwords_never_print() {
        assert_eq!(node_url(" 10.0.0.1:7000"), "redis://10.0.0.1:7000");
        assert_eq!(node_url("rediss://:pw@h:7000"), "rediss://:pw@h:7000");
        let s = ClusterSettings {
            nodes: vec!["redis://:s3cret@h:7000".into(), "h2:7001".into()],
            connections: 1,
        };
        let shown = format!("{s:?}");
        assert!(!shown.contains("s3cret") && shown.contains("h2:7001"), "{shown}");
    }
}
