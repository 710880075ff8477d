//! A group spanning two masters, denied by one part while the other part's reply comes
//! after the request gave up — its deadline passed, or its future was dropped (the client
//! went away): the applied part is refunded all the same, once its reply arrives. A
//! denied group applies nothing, whoever stops waiting for it; nothing shared may depend on
//! a request future finishing. Before, such a part kept its charge until its window ended.

use std::time::Duration;

use tokio::time::Instant;
use tollgate::algorithm::{Algorithm, Hits, Params};
use tollgate::store::cluster::{key_slot, ClusterSettings, ClusterStore};
use tollgate::store::{Charge, Groups, RedisSettings};

use crate::cluster_support::RedisCluster;

/// A window no test run crosses (fixed windows are epoch-aligned).
const YEAR_US: u64 = 365 * 86_400_000_000;
/// The default store timeout: the request's deadline.
const STORE_TIMEOUT: Duration = Duration::from_millis(10);
/// How late the slow master's replies come: well past the deadline.
const LATE: Duration = Duration::from_millis(60);

fn params() -> Params {
    Params {
        algorithm: Algorithm::FixedWindow,
        limit: 20,
        unit_us: YEAR_US,
        burst: 20,
        penalty_us: 0,
        period: None,
    }
}

fn consume(key: &str, n: u64) -> Charge {
    Charge { key: key.into(), params: params(), hits: Hits::Consume(n) }
}

/// A cluster behind TCP fronts, a store on it, and two keys on two masters: `a` on the one
/// whose replies will be late, `b` exhausted (its part of the group is denied).
async fn setup(prefix: &str) -> (RedisCluster, ClusterStore, String, String, usize) {
    let cluster =
        tokio::task::spawn_blocking(RedisCluster::start_behind_fronts).await.expect("cluster start");
    let link = RedisSettings::new("redis://unused").link(STORE_TIMEOUT);
    let store = ClusterStore::new(&ClusterSettings { nodes: cluster.nodes(), tls: Default::default(), link })
        .expect("store");
    let owner = |key: &str| cluster.owner_of(cluster.keyslot(key));
    let (a, b) = (0..1000)
        .map(|i| (format!("{prefix}:a:{i}"), format!("{prefix}:b:{i}")))
        .find(|(a, b)| key_slot(a.as_bytes()) != key_slot(b.as_bytes()) && owner(a) != owner(b))
        .expect("two keys on two masters");
    let deadline = Instant::now() + Duration::from_secs(2);
    // Connected to every master before the slow one slows (as an app is before ready).
    assert_eq!(store.prepare(deadline).await.expect("prepared"), 3);
    let spent = store.charge_groups(&[consume(&b, 20)], &Groups::each(), deadline).await;
    assert!(matches!(spent.results[0], Ok(d) if d.allowed), "b spent: {:?}", spent.results);
    let slow = owner(&a);
    (cluster, store, a, b, slow)
}

/// `key`'s count as its master holds it (`None`: no key — never charged, or refunded to
/// nothing).
fn count(cluster: &RedisCluster, key: &str) -> Option<u64> {
    let held = cluster.cli(cluster.owner_of(cluster.keyslot(key)), &["HGET", key, "c"]);
    held.parse().ok()
}

/// Script calls master `node` ran (`EVALSHA` and `EVAL`), from `INFO commandstats`.
fn script_calls(cluster: &RedisCluster, node: usize) -> u64 {
    let stats = cluster.cli(node, &["INFO", "commandstats"]);
    stats
        .lines()
        .filter(|l| l.starts_with("cmdstat_evalsha:") || l.starts_with("cmdstat_eval:"))
        .filter_map(|l| l.split("calls=").nth(1)?.split(',').next()?.parse::<u64>().ok())
        .sum()
}

/// Waits (2 s at most) until master `node` ran `calls` script calls and `key` holds no
/// count: the group's part ran there, and its refund after it.
async fn refunded(cluster: &RedisCluster, node: usize, calls: u64, key: &str) -> (u64, Option<u64>) {
    let until = Instant::now() + Duration::from_secs(2);
    loop {
        let now = (script_calls(cluster, node), count(cluster, key).filter(|&c| c > 0));
        if now == (calls, None) || Instant::now() > until {
            return now;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_part_answered_after_the_deadline_of_a_denied_group_is_refunded() {
    let (cluster, store, a, b, slow) = setup("late").await;
    let before = script_calls(&cluster, slow);
    cluster.front(slow).add_latency(LATE);
    let charged = store
        .charge_groups(
            &[consume(&a, 1), consume(&b, 1)],
            &Groups::from_ends(vec![2]),
            Instant::now() + STORE_TIMEOUT,
        )
        .await;
    assert!(charged.results[0].is_err(), "a's reply came after the deadline: {:?}", charged.results);
    let want = (before + 2, None);
    assert_eq!(refunded(&cluster, slow, before + 2, &a).await, want, "a's part ran, then its refund");
    cluster.front(slow).add_latency(Duration::ZERO);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_part_of_a_denied_group_whose_request_was_dropped_is_refunded() {
    let (cluster, store, a, b, slow) = setup("dropped").await;
    let before = script_calls(&cluster, slow);
    cluster.front(slow).add_latency(LATE);
    let (batch, groups) = ([consume(&a, 1), consume(&b, 1)], Groups::from_ends(vec![2]));
    let request = store.charge_groups(&batch, &groups, Instant::now() + Duration::from_secs(1));
    // The client goes away while a's reply is on its way: the request future is dropped.
    assert!(tokio::time::timeout(Duration::from_millis(20), request).await.is_err(), "still waiting for a");
    let want = (before + 2, None);
    assert_eq!(refunded(&cluster, slow, before + 2, &a).await, want, "a's part ran, then its refund");
    cluster.front(slow).add_latency(Duration::ZERO);
}
