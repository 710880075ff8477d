//! Coalescing at the store on a real 3-master cluster and on Sentinel: many concurrent
//! charges of one key, with hit weights 1 and 2, never admit past the limit and fill it
//! (to the last hit, or one short when no weight-1 charge came after the 59th hit) — in
//! fewer script calls than admissions.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tollgate::algorithm::{Algorithm, Hits, Params};
use tollgate::store::cluster::{ClusterSettings, ClusterStore};
use tollgate::store::redis::DEFAULT_MAX_INFLIGHT;
use tollgate::store::sentinel::{SentinelSettings, SentinelStore};
use tollgate::store::{Charge, Guarded, RedisSettings, Store};

use crate::cluster_support::RedisCluster;
use crate::sentinel_support::{RedisSentinel, MASTER_NAME};
use crate::support::start_cluster;

const LIMIT: u64 = 60;
const CHARGES: u64 = 120;

fn link() -> tollgate::store::redis::link::LinkSettings {
    RedisSettings::new("redis://unused").link(Duration::from_secs(2))
}

/// `CHARGES` concurrent requests on one fixed window of `LIMIT` per hour, weights 1 and 2
/// alternating. Returns the hits admitted and the charges admitted.
async fn hammer(store: Arc<Store>, key: &str) -> (u64, u64) {
    let params = Params {
        algorithm: Algorithm::FixedWindow,
        limit: LIMIT,
        unit_us: 3_600_000_000,
        burst: 0,
        penalty_us: 0,
        period: None,
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    let tasks: Vec<_> = (0..CHARGES)
        .map(|i| {
            let store = store.clone();
            let batch = [Charge { key: key.into(), params, hits: Hits::Consume(1 + i % 2) }];
            tokio::spawn(async move { (1 + i % 2, store.charge(&batch, deadline).await) })
        })
        .collect();
    let (mut hits, mut admitted) = (0, 0);
    for task in tasks {
        let (weight, results) = task.await.expect("task");
        let decision = results[0].clone().expect("redis answers");
        if decision.allowed {
            hits += weight;
            admitted += 1;
        }
    }
    (hits, admitted)
}

fn evalsha_calls(info: &str) -> u64 {
    info.lines()
        .find_map(|l| l.strip_prefix("cmdstat_evalsha:calls="))
        .and_then(|rest| rest.split(',').next()?.parse().ok())
        .unwrap_or(0)
}

fn cluster_calls(cluster: &RedisCluster) -> u64 {
    (0..3).map(|i| evalsha_calls(&cluster.cli(i, &["INFO", "commandstats"]))).sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_coalesces_one_key_exactly() {
    let cluster = start_cluster().await;
    let settings = ClusterSettings { nodes: cluster.nodes(), tls: Default::default(), link: link() };
    let client = ClusterStore::new(&settings).expect("cluster store");
    let store = Arc::new(Store::Cluster(Guarded::new(client, None).coalescing(Some(DEFAULT_MAX_INFLIGHT))));
    let before = cluster_calls(&cluster);
    let (hits, admitted) = hammer(store, "tg:f:{hot}coalesce").await;
    let calls = cluster_calls(&cluster) - before;
    assert!(hits == LIMIT || hits == LIMIT - 1, "admitted {hits} hits of {LIMIT}");
    assert!(calls < admitted, "{calls} script calls for {admitted} admissions: nothing coalesced");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_coalesces_one_key_exactly() {
    let setup = tokio::task::spawn_blocking(RedisSentinel::start).await.expect("sentinel start");
    let settings = SentinelSettings {
        master: MASTER_NAME.into(),
        sentinels: vec![setup.sentinel_addr()],
        master_url: None,
        tls: Default::default(),
        link: link(),
        batch: true,
    };
    let client = SentinelStore::new(&settings).expect("sentinel store");
    let store = Arc::new(Store::Sentinel(Guarded::new(client, None).coalescing(Some(DEFAULT_MAX_INFLIGHT))));
    let master = setup.sentinel_master().expect("a master");
    let before = evalsha_calls(&setup.cli(master, &["INFO", "commandstats"]));
    let (hits, admitted) = hammer(store, "tg:f:hot-sentinel").await;
    let calls = evalsha_calls(&setup.cli(master, &["INFO", "commandstats"])) - before;
    assert!(hits == LIMIT || hits == LIMIT - 1, "admitted {hits} hits of {LIMIT}");
    assert!(calls < admitted, "{calls} script calls for {admitted} admissions: nothing coalesced");
}
