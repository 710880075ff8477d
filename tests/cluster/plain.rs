//! `--redis-windows plain` on a 3-master Redis Cluster, at the default store timeout:
//! three instances (three cluster stores, each with its own connections and slot map)
//! hammering one key admit exactly the limit, and once the give-backs have run the master
//! that owns the key holds exactly the admitted count — the plain commands and every
//! give-back routed to it by slot.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tollgate::algorithm::{Algorithm, Hits, Params};
use tollgate::store::cluster::{ClusterSettings, ClusterStore};
use tollgate::store::key::window_key;
use tollgate::store::redis::Windows;
use tollgate::store::{Charge, Groups, Guarded, RedisSettings, Store};

use crate::cluster_support::RedisCluster;
use crate::support::start_cluster;

/// `--store-timeout-ms`'s default.
const STORE_TIMEOUT: Duration = Duration::from_millis(10);
const LIMIT: u64 = 60;

fn plain_store(cluster: &RedisCluster) -> Arc<Store> {
    let redis = RedisSettings::new("redis://unused");
    let settings =
        ClusterSettings { nodes: cluster.nodes(), tls: Default::default(), link: redis.link(STORE_TIMEOUT) };
    let client = ClusterStore::new(&settings).expect("cluster store").with_windows(Windows::Plain);
    Arc::new(Store::Cluster(Guarded::new(client, Some(redis.breaker))))
}

const YEAR_US: u64 = 365 * 86_400_000_000;

/// The bucket's count on the master that owns it, in this window: the scripts' hash share
/// and the window's key (in the bucket's slot).
fn count(cluster: &RedisCluster, key: &str) -> i64 {
    let owner = cluster.owner_of(cluster.keyslot(key));
    let now =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_micros() as u64;
    let own = window_key(key, now - now % YEAR_US);
    assert_eq!(cluster.keyslot(&own), cluster.keyslot(key), "{own} is in {key}'s slot");
    let number = |s: String| s.trim().parse::<i64>().unwrap_or(0);
    number(cluster.cli(owner, &["HGET", key, "c"])) + number(cluster.cli(owner, &["GET", &own]))
}

async fn three_instances_admit_exactly_the_limit(algorithm: Algorithm) {
    let cluster = start_cluster().await;
    let stores: Vec<Arc<Store>> = (0..3).map(|_| plain_store(&cluster)).collect();
    for store in &stores {
        store.prepare(Instant::now() + Duration::from_secs(5)).await.expect("prepared");
    }
    // A key with a hash tag (its window keys share the tag) and one without (they take the
    // whole key as theirs).
    let key = match algorithm {
        Algorithm::FixedWindow => "tg:plain:{fixed_window}".to_string(),
        _ => "tg:plain:sliding_window".to_string(),
    };
    let params =
        Params { algorithm, limit: LIMIT, unit_us: YEAR_US, burst: LIMIT, penalty_us: 0, period: None };
    let charge = Charge { key: key.clone(), params, hits: Hits::Consume(1) };
    let tasks: Vec<_> = (0..24)
        .map(|client| {
            let (store, charge) = (stores[client % 3].clone(), charge.clone());
            tokio::spawn(async move {
                let (mut admitted, mut failed) = (0u64, 0u64);
                for _ in 0..10 {
                    let deadline = Instant::now() + STORE_TIMEOUT;
                    let batch = std::slice::from_ref(&charge);
                    match store.charge_groups(batch, &Groups::each(), deadline).await.pop() {
                        Some(Ok(d)) => admitted += u64::from(d.allowed),
                        _ => failed += 1,
                    }
                }
                (admitted, failed)
            })
        })
        .collect();
    let (mut admitted, mut failed) = (0, 0);
    for task in tasks {
        let (a, f) = task.await.expect("client");
        admitted += a;
        failed += f;
    }
    assert!(admitted <= LIMIT, "{admitted} admitted past a limit of {LIMIT}");
    assert!(admitted + failed >= LIMIT, "{admitted} admitted, {failed} failed");
    // Poll until the give-backs have run (no sleep as synchronisation: a bounded wait).
    let until = std::time::Instant::now() + Duration::from_secs(10);
    let mut held = count(&cluster, &key);
    while held != admitted as i64 && std::time::Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(20)).await;
        held = count(&cluster, &key);
    }
    eprintln!("cluster {}: {admitted} admitted, {failed} failed, {held} held", algorithm.as_str());
    // A consume the store failed on may have run and been admitted: counted, not admitted.
    assert!(
        held >= admitted as i64 && held <= (admitted + failed) as i64,
        "{held} held, {admitted} admitted"
    );
    if failed == 0 {
        assert_eq!((admitted, held), (LIMIT, LIMIT as i64), "exactly the limit, exactly counted");
    }
    // Decided by plain commands on the owner (`INCRBY` is the plain path's alone).
    let info = cluster.cli(cluster.owner_of(cluster.keyslot(&key)), &["INFO", "commandstats"]);
    let incrby = info.lines().find_map(|l| l.strip_prefix("cmdstat_incrby:calls=")).unwrap_or("0,");
    let incrby: u64 = incrby.split(',').next().and_then(|n| n.parse().ok()).unwrap_or(0);
    assert!(incrby >= LIMIT, "{incrby} plain consumes on the owner");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_fixed_windows_of_three_cluster_instances_admit_exactly_the_limit() {
    three_instances_admit_exactly_the_limit(Algorithm::FixedWindow).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_sliding_windows_of_three_cluster_instances_admit_exactly_the_limit() {
    three_instances_admit_exactly_the_limit(Algorithm::SlidingWindow).await;
}
