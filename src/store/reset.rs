//! Resetting buckets: an operator's `POST /v1/reset` deletes bucket keys in the store.
//! On Redis the keys are then appended to approximate mode's reset log, which every
//! instance reads once per wake (`approx::resets`): an instance holding one of the buckets
//! reads it again before its next decision. `Ok` only once both are done (a retry is
//! harmless: deleting twice is deleting once).
//!
//! A deleted bucket is a full one: every algorithm treats a missing key as a fresh bucket.
//! Memory: the keys are removed from this process (one instance only: other instances
//! keep their own memory). Single Redis and Sentinel: one `DEL` with every key over the
//! store's connections. Cluster: one `DEL` per key on the master of its slot, following
//! redirects (`redis::cluster` routes it). A `DEL` that timed out may still run: that is
//! harmless (deleting twice is deleting once), so unlike a charge it is safe to try again.
//!
//! In front of Redis the over-limit cache forgets the keys before and after the `DEL`:
//! after, because a denial computed before the delete but learned after it would otherwise
//! answer "denied" for a bucket Redis now holds full (the refund path's guard, see
//! `overlimit`). The breaker is not consulted nor taught: a reset is an operator's call,
//! not traffic. Other instances' over-limit caches learn nothing: their entries end within
//! `overlimit::MAX_LOCAL_DENIAL`.

use tokio::time::Instant;

use super::charge::StoreError;
use super::guarded::Guarded;
use super::remote::{Remote, Reset};
use super::Store;

impl Store {
    /// Deletes the buckets of `keys`: their next charge finds them full. `Ok` once the
    /// store has deleted them (keys that held no bucket included).
    pub async fn reset(&self, keys: &[String], deadline: Instant) -> Result<(), StoreError> {
        if keys.is_empty() {
            return Ok(());
        }
        match self {
            Store::Memory(memory) => {
                for key in keys {
                    memory.remove(key);
                }
                return Ok(());
            }
            Store::Redis(redis) => redis.reset(keys, deadline).await?,
            Store::Cluster(cluster) => cluster.reset(keys, deadline).await?,
            Store::Sentinel(sentinel) => sentinel.reset(keys, deadline).await?,
        }
        // Approximate mode's other instances read the log once per wake: a bucket any of
        // them holds is read again before its next decision (`approx::resets`).
        match (self.approx(), self.read_via()) {
            (Some(approx), Some(via)) => approx.log_resets(via, keys, deadline).await,
            _ => Ok(()),
        }
    }
}

impl<C: Remote + Reset + Send + Sync + 'static> Guarded<C> {
    /// Deletes `keys` in Redis, with the over-limit cache forgetting them before and after.
    /// This instance's leases of the keys are dropped (their tokens are void: the bucket
    /// starts full); other instances' leases end within a lease time.
    pub async fn reset(&self, keys: &[String], deadline: Instant) -> Result<(), StoreError> {
        for key in keys {
            self.over_limit().forget(key);
            if let Some(leases) = self.leases() {
                leases.drop_key(key, Instant::now(), false);
            }
            if let Some(approx) = self.approx() {
                approx.remove(key);
            }
        }
        let result = self.client().reset(keys, deadline).await;
        for key in keys {
            self.over_limit().forget(key);
            // A block taken between the first drop and the `DEL` was deleted with it.
            if let Some(leases) = self.leases() {
                leases.drop_key(key, Instant::now(), false);
            }
        }
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::{Algorithm, Hits, Params};
    use crate::store::{Charge, MemoryStore};

    const PARAMS: Params = Params {
        algorithm: Algorithm::FixedWindow,
        limit: 2,
        unit_us: 60_000_000,
        burst: 2,
        penalty_us: 0,
        period: None,
    };

    fn charge(key: &str, hits: Hits) -> Charge {
        Charge { key: key.into(), params: PARAMS, hits }
    }

    #[tokio::test]
    async fn a_memory_reset_returns_only_its_buckets_to_full() {
        let store = Store::Memory(MemoryStore::new(100));
        let deadline = Instant::now() + std::time::Duration::from_secs(1);
        let batch = [charge("a", Hits::Consume(2)), charge("b", Hits::Consume(2))];
        assert!(store.charge(&batch, deadline).await.iter().all(|r| r.as_ref().is_ok_and(|d| d.allowed)));
        let peek = [charge("a", Hits::Peek), charge("b", Hits::Peek)];
        let remaining = |r: &[Result<crate::algorithm::Decision, StoreError>]| -> Vec<u64> {
            r.iter().map(|d| d.as_ref().map_or(99, |d| d.remaining)).collect()
        };
        assert_eq!(remaining(&store.charge(&peek, deadline).await), [0, 0]);
        store.reset(&["a".to_string(), "missing".to_string()], deadline).await.expect("reset");
        assert_eq!(remaining(&store.charge(&peek, deadline).await), [2, 0], "a is full, b untouched");
        assert_eq!(store.reset(&[], deadline).await, Ok(()));
    }
}
