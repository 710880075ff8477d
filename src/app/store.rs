//! Building the store `serve` names: memory, or one of the Redis topologies wrapped in its
//! guards, with a lease table and an approximate-mode table ready for any reload; and the
//! startup warning when the config asks for what that store cannot serve.

use anyhow::Context;

use crate::sources::serving::Live;
use crate::store::approx::ApproxSettings;
use crate::store::cluster::{ClusterSettings, ClusterStore};
use crate::store::lease::LeaseSettings;
use crate::store::sentinel::{SentinelSettings, SentinelStore};
use crate::store::{Guarded, MemoryStore, RedisStore, Store};

use super::settings::{RedisTopology, ServeSettings, StoreKind};

/// The store `settings` name: memory, or Redis (single, Cluster or Sentinel) behind its
/// guards (breaker, coalescing, leases, approximate mode).
pub(super) fn build_store(settings: &ServeSettings) -> anyhow::Result<Store> {
    if settings.store == StoreKind::Memory && settings.redis_topology != RedisTopology::Single {
        anyhow::bail!("--redis-cluster-nodes and --redis-sentinel need --store redis");
    }
    Ok(match settings.store {
        StoreKind::Memory => Store::Memory(MemoryStore::new(settings.memory_max_keys)),
        StoreKind::Redis => build_redis(settings)?,
    })
}

fn build_redis(settings: &ServeSettings) -> anyhow::Result<Store> {
    let store = build_topology(settings)?;
    if let Some(approx) = store.approx() {
        approx.name_reset_log(&settings.redis_key_prefix);
    }
    Ok(store)
}

fn build_topology(settings: &ServeSettings) -> anyhow::Result<Store> {
    let link = settings.redis.link(settings.store_timeout);
    let tls = settings.redis.tls.clone();
    // Always a table: a reload may give any rule `lease: true`.
    let leases = LeaseSettings {
        every_rule: settings.lease_hot_keys,
        time: settings.lease_time,
        max_keys: crate::store::lease::LEASE_MAX_KEYS,
        store_timeout: settings.store_timeout,
    };
    // Always a table: a reload may make any domain approximate.
    let approx = ApproxSettings {
        interval: settings.sync_interval,
        staleness: settings.sync_staleness,
        max_keys: settings.memory_max_keys,
        window_keys: settings.redis.windows.reads_window_keys(),
    };
    Ok(match &settings.redis_topology {
        RedisTopology::Single => Store::Redis(
            Guarded::new(
                RedisStore::new(&settings.redis, settings.store_timeout).context("redis store")?,
                Some(settings.redis.breaker),
            )
            .coalescing(settings.redis.coalesce.then_some(settings.redis.max_inflight))
            .with_leases(leases)
            .with_approx(approx),
        ),
        RedisTopology::Cluster { nodes } => {
            if let Some(tag) = crate::store::cluster::hash_tag(settings.redis_key_prefix.as_bytes()) {
                tracing::warn!(
                    slot = crate::store::cluster::key_slot(tag),
                    "the key prefix holds a hash tag: every bucket is in one slot, on one master"
                );
            }
            let cluster = ClusterSettings { nodes: nodes.clone(), tls, link };
            let client = ClusterStore::new(&cluster)
                .context("redis cluster store")?
                .with_windows(settings.redis.windows);
            Store::Cluster(
                Guarded::new(client, None)
                    .coalescing(settings.redis.coalesce.then_some(settings.redis.max_inflight))
                    .with_leases(leases)
                    .with_approx(approx),
            )
        }
        RedisTopology::Sentinel { master, sentinels } => {
            let sentinel = SentinelSettings {
                master: master.clone(),
                sentinels: sentinels.clone(),
                master_url: Some(settings.redis.url.clone()),
                tls,
                link,
                batch: settings.redis.batch,
            };
            Store::Sentinel(
                Guarded::new(
                    SentinelStore::new(&sentinel)
                        .context("redis sentinel store")?
                        .with_windows(settings.redis.windows),
                    Some(settings.redis.breaker),
                )
                .coalescing(settings.redis.coalesce.then_some(settings.redis.max_inflight))
                .with_leases(leases)
                .with_approx(approx),
            )
        }
    })
}

/// Approximate domains on the memory store (nothing to sync with: each instance counts
/// alone) are charged exactly: say so once at startup, so the config's promise is not
/// silently different. Every Redis topology serves them.
pub(super) fn warn_unserved_consistency(live: &Live, store: &Store) {
    if store.approx().is_some() {
        return;
    }
    let active = live.load();
    let approximate: Vec<&str> = active
        .snapshot
        .domains
        .values()
        .filter(|d| d.consistency == crate::config::Consistency::Approximate)
        .map(|d| d.name.as_str())
        .collect();
    if !approximate.is_empty() {
        tracing::warn!(
            domains = ?approximate,
            store = store.name(),
            "consistency: approximate needs --store redis; these domains are charged exactly"
        );
    }
}
