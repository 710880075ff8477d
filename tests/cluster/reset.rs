//! `Store::reset` on a real Redis Cluster (one `DEL` per key on the master of its slot)
//! and through Sentinel (one `DEL` on the master): exhausted buckets spread over every
//! master come back full, other buckets stay as they were.

use std::time::Duration;

use tokio::time::Instant;
use tollgate::algorithm::{Algorithm, Decision, Hits, Params};
use tollgate::store::cluster::{ClusterSettings, ClusterStore};
use tollgate::store::sentinel::{SentinelSettings, SentinelStore};
use tollgate::store::{Charge, Guarded, RedisSettings, Store, StoreError};

use crate::sentinel_support::{RedisSentinel, MASTER_NAME};
use crate::support::start_cluster;

const PARAMS: Params =
    Params { algorithm: Algorithm::FixedWindow, limit: 2, unit_us: 3_600_000_000, burst: 2, penalty_us: 0 };

fn charges(keys: &[String], hits: Hits) -> Vec<Charge> {
    keys.iter().map(|key| Charge { key: key.clone(), params: PARAMS, hits }).collect()
}

fn remaining(results: &[Result<Decision, StoreError>]) -> Vec<u64> {
    results.iter().map(|r| r.as_ref().expect("store answers").remaining).collect()
}

/// Exhausts every key, resets all but the last, and reads them back.
async fn exhaust_then_reset(store: &Store, keys: &[String]) {
    let deadline = || Instant::now() + Duration::from_secs(2);
    for _ in 0..2 {
        let results = store.charge(&charges(keys, Hits::Consume(1)), deadline()).await;
        assert!(results.iter().all(|r| r.as_ref().is_ok_and(|d| d.allowed)), "{results:?}");
    }
    let denied = store.charge(&charges(keys, Hits::Consume(1)), deadline()).await;
    assert!(denied.iter().all(|r| r.as_ref().is_ok_and(|d| !d.allowed)), "{denied:?}");
    let (reset, kept) = keys.split_at(keys.len() - 1);
    store.reset(reset, deadline()).await.expect("reset");
    let peek = remaining(&store.charge(&charges(keys, Hits::Peek), deadline()).await);
    let mut expected = vec![2; reset.len()];
    expected.extend(vec![0; kept.len()]);
    assert_eq!(peek, expected, "reset buckets are full, the other one untouched");
    // The over-limit cache forgot them: a consume reaches Redis and passes.
    let again = store.charge(&charges(reset, Hits::Consume(1)), deadline()).await;
    assert!(again.iter().all(|r| r.as_ref().is_ok_and(|d| d.allowed)), "{again:?}");
}

fn link() -> tollgate::store::redis::link::LinkSettings {
    RedisSettings::new("redis://127.0.0.1:1/").link(Duration::from_secs(2))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_reset_deletes_each_key_on_its_master() {
    let cluster = start_cluster().await;
    let settings = ClusterSettings { nodes: cluster.nodes(), ca_file: None, link: link() };
    let store = Store::Cluster(Guarded::new(ClusterStore::new(&settings).expect("cluster store"), None));
    // Enough keys that every master holds some.
    let keys: Vec<String> = (0..12).map(|i| format!("tg:reset-test:{i}")).collect();
    let masters: std::collections::BTreeSet<u16> =
        keys.iter().map(|k| cluster.keyslot(k) * 3 / tollgate::store::cluster::SLOTS).collect();
    assert_eq!(masters.len(), 3, "the keys span the three masters' slot ranges");
    exhaust_then_reset(&store, &keys).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_reset_deletes_on_the_master() {
    let setup = tokio::task::spawn_blocking(RedisSentinel::start).await.expect("sentinel start");
    let settings = SentinelSettings {
        master: MASTER_NAME.into(),
        sentinels: vec![setup.sentinel_addr()],
        master_url: None,
        ca_file: None,
        link: link(),
        batch: true,
    };
    let store = Store::Sentinel(Guarded::new(SentinelStore::new(&settings).expect("sentinel store"), None));
    let keys: Vec<String> = (0..3).map(|i| format!("tg:reset-test:{i}")).collect();
    exhaust_then_reset(&store, &keys).await;
}
