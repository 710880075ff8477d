//! Joint groups at the store, on a real 3-master cluster and on Sentinel: a group on one
//! slot is one script call and charges all or nothing; a group spanning slots whose one
//! part is denied has its other parts refunded.

use std::time::Duration;

use tokio::time::Instant;
use tollgate::algorithm::{Algorithm, Decision, Hits, Params};
use tollgate::store::cluster::{ClusterSettings, ClusterStore};
use tollgate::store::sentinel::{SentinelSettings, SentinelStore};
use tollgate::store::{Charge, Groups, Guarded, RedisSettings, Store};

use crate::cluster_support::RedisCluster;
use crate::sentinel_support::{RedisSentinel, MASTER_NAME};
use crate::support::start_cluster;

const YEAR_US: u64 = 365 * 86_400_000_000;

fn link() -> tollgate::store::redis::link::LinkSettings {
    RedisSettings::new("redis://unused").link(Duration::from_secs(2))
}

fn cluster_store(cluster: &RedisCluster) -> Store {
    let settings = ClusterSettings { nodes: cluster.nodes(), tls: Default::default(), link: link() };
    Store::Cluster(Guarded::new(ClusterStore::new(&settings).expect("cluster store"), None))
}

fn charge(key: &str, algorithm: Algorithm, limit: u64, hits: Hits) -> Charge {
    Charge {
        key: key.into(),
        params: Params { algorithm, limit, unit_us: YEAR_US, burst: limit, penalty_us: 0, period: None },
        hits,
    }
}

async fn charge_groups(store: &Store, batch: &[Charge], ends: Vec<usize>) -> Vec<Decision> {
    let deadline = Instant::now() + Duration::from_secs(3);
    let results = store.charge_groups(batch, &Groups::from_ends(ends), deadline).await;
    results.into_iter().map(|r| r.expect("redis answers")).collect()
}

fn remaining(decisions: &[Decision]) -> Vec<u64> {
    decisions.iter().map(|d| d.remaining).collect()
}

fn evalsha_calls(cluster: &RedisCluster, i: usize) -> u64 {
    let info = cluster.cli(i, &["INFO", "commandstats"]);
    info.lines()
        .find_map(|l| l.strip_prefix("cmdstat_evalsha:calls="))
        .and_then(|rest| rest.split(',').next()?.parse().ok())
        .unwrap_or(0)
}

/// Two hash tags owned by different masters.
fn tags_on_two_masters(cluster: &RedisCluster) -> (String, String) {
    let owner = |tag: &str| cluster.owner_of(cluster.keyslot(&format!("{{{tag}}}")));
    let first = "t0".to_string();
    let other =
        (1..100).map(|i| format!("t{i}")).find(|t| owner(t) != owner(&first)).expect("another master");
    (first, other)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_on_one_slot_is_one_call_and_all_or_nothing() {
    let cluster = start_cluster().await;
    let store = cluster_store(&cluster);
    let (wide, narrow) = ("tg:{d}:wide", "tg:{d}:narrow");
    let node = cluster.owner_of(cluster.keyslot(wide));
    let group = |n| {
        [
            charge(wide, Algorithm::Gcra, 5, Hits::Consume(n)),
            charge(narrow, Algorithm::SlidingWindow, 2, Hits::Consume(1)),
        ]
    };
    charge_groups(&store, &[charge("tg:{d}:warm", Algorithm::Gcra, 5, Hits::Peek)], vec![1]).await;
    let before = evalsha_calls(&cluster, node);
    let passed = charge_groups(&store, &group(1), vec![2]).await;
    assert_eq!(evalsha_calls(&cluster, node) - before, 1, "one joint call");
    assert!(passed.iter().all(|d| d.allowed) && remaining(&passed) == [4, 1], "{passed:?}");
    charge_groups(&store, &group(1), vec![2]).await;
    let denied = charge_groups(&store, &group(2), vec![2]).await;
    assert!(denied[0].allowed && !denied[1].allowed, "{denied:?}");
    assert_eq!(denied[0].remaining, 3, "the bucket as it is: nothing charged");
    let peek = charge_groups(&store, &[charge(wide, Algorithm::Gcra, 5, Hits::Peek)], vec![1]).await;
    assert_eq!(peek[0].remaining, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_spanning_slots_is_refunded_when_one_part_denies() {
    let cluster = start_cluster().await;
    let store = cluster_store(&cluster);
    let (x, y) = tags_on_two_masters(&cluster);
    let (a1, a2, b) = (format!("tg:{{{x}}}:a1"), format!("tg:{{{x}}}:a2"), format!("tg:{{{y}}}:b"));
    let group = || {
        [
            charge(&a1, Algorithm::Gcra, 5, Hits::Consume(1)),
            charge(&a2, Algorithm::SlidingWindow, 5, Hits::Consume(2)),
            charge(&b, Algorithm::Gcra, 1, Hits::Consume(1)),
        ]
    };
    let passed = charge_groups(&store, &group(), vec![3]).await;
    assert!(passed.iter().all(|d| d.allowed), "{passed:?}");
    assert_eq!(remaining(&passed), [4, 3, 0], "every part charged");

    let denied = charge_groups(&store, &group(), vec![3]).await;
    assert!(!denied[2].allowed, "{denied:?}");
    assert!(denied[0].allowed && denied[1].allowed, "the applied part answers allowed: {denied:?}");
    assert_eq!(remaining(&denied[..2]), [4, 3], "as its buckets stand after the refund: nothing charged");
    let peeks =
        [charge(&a1, Algorithm::Gcra, 5, Hits::Peek), charge(&a2, Algorithm::SlidingWindow, 5, Hits::Peek)];
    let after = charge_groups(&store, &peeks, vec![1, 2]).await;
    assert_eq!(remaining(&after), [4, 3], "the applied part was refunded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_groups_charge_all_or_nothing() {
    let setup = tokio::task::spawn_blocking(RedisSentinel::start).await.expect("sentinel start");
    let settings = SentinelSettings {
        master: MASTER_NAME.into(),
        sentinels: vec![setup.sentinel_addr()],
        master_url: None,
        tls: Default::default(),
        link: link(),
        batch: true,
    };
    let store = Store::Sentinel(Guarded::new(SentinelStore::new(&settings).expect("sentinel store"), None));
    let group = || {
        [
            charge("tg:s:a", Algorithm::Gcra, 3, Hits::Consume(1)),
            charge("tg:s:b", Algorithm::FixedWindow, 1, Hits::Consume(1)),
        ]
    };
    let passed = charge_groups(&store, &group(), vec![2]).await;
    assert!(passed.iter().all(|d| d.allowed) && remaining(&passed) == [2, 0], "{passed:?}");
    let denied = charge_groups(&store, &group(), vec![2]).await;
    assert!(denied[0].allowed && !denied[1].allowed && denied[0].remaining == 2, "{denied:?}");
    let peek = charge_groups(&store, &[charge("tg:s:a", Algorithm::Gcra, 3, Hits::Peek)], vec![1]).await;
    assert_eq!(peek[0].remaining, 2, "nothing charged");
}
