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

const PARAMS: Params = Params {
    algorithm: Algorithm::FixedWindow,
    limit: 2,
    unit_us: 3_600_000_000,
    burst: 2,
    penalty_us: 0,
    period: None,
};

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
    let settings = ClusterSettings { nodes: cluster.nodes(), tls: Default::default(), link: link() };
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
        tls: Default::default(),
        link: link(),
        batch: true,
    };
    let store = Store::Sentinel(Guarded::new(SentinelStore::new(&settings).expect("sentinel store"), None));
    let keys: Vec<String> = (0..3).map(|i| format!("tg:reset-test:{i}")).collect();
    exhaust_then_reset(&store, &keys).await;
}

/// `penalty` on a Cluster: a breach decided through one store (instance) is served by
/// another on every master, through refills, single charges and joint groups alike (a
/// vetoed group still writes it); `reset` lifts it. GCRA 2 a second, penalty 2 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_penalty_holds_on_every_master_for_every_instance() {
    const PENALIZED: Params = Params {
        algorithm: Algorithm::Gcra,
        limit: 2,
        unit_us: 1_000_000,
        burst: 2,
        penalty_us: 2_000_000,
        period: None,
    };
    let cluster = start_cluster().await;
    let settings = ClusterSettings { nodes: cluster.nodes(), tls: Default::default(), link: link() };
    let store = || Store::Cluster(Guarded::new(ClusterStore::new(&settings).expect("cluster store"), None));
    let (a, b) = (store(), store());
    let deadline = || Instant::now() + Duration::from_secs(2);
    let one = |key: &String| Charge { key: key.clone(), params: PENALIZED, hits: Hits::Consume(1) };
    let keys: Vec<String> = (0..12).map(|i| format!("tg:penalty-test:{i}")).collect();
    let masters: std::collections::BTreeSet<u16> =
        keys.iter().map(|k| cluster.keyslot(k) * 3 / tollgate::store::cluster::SLOTS).collect();
    assert_eq!(masters.len(), 3, "the keys span the three masters' slot ranges");
    let batch: Vec<Charge> = keys.iter().map(one).collect();
    for _ in 0..2 {
        let passed = a.charge(&batch, deadline()).await;
        assert!(passed.iter().all(|r| r.as_ref().is_ok_and(|d| d.allowed)), "{passed:?}");
    }
    // A joint group of a wide limit and a penalized one on one slot: the breach vetoes it.
    let tagged = ["tg:{penalty-joint}:wide".to_string(), "tg:{penalty-joint}:narrow".to_string()];
    let wide =
        Charge { params: Params { limit: 100, burst: 100, penalty_us: 0, ..PENALIZED }, ..one(&tagged[0]) };
    let group = vec![wide.clone(), one(&tagged[1]), one(&tagged[1]), one(&tagged[1])];
    let groups = tollgate::store::Groups::from_ends(vec![4]);
    let sent = Instant::now();
    let breach = a.charge(&batch, deadline()).await;
    let joint = a.charge_groups(&group, &groups, deadline()).await;
    assert!(
        breach.iter().all(|r| r.as_ref().is_ok_and(|d| !d.allowed && d.reset_us == 2_000_000)),
        "{breach:?}"
    );
    assert!(joint[3].as_ref().is_ok_and(|d| !d.allowed), "{joint:?}");

    // A second and a half later both buckets refilled; through B they are still denied.
    tokio::time::sleep_until(sent + Duration::from_millis(1_500)).await;
    let later = b.charge(&batch, deadline()).await;
    let in_group = b.charge(&[one(&tagged[1])], deadline()).await;
    // Only an answer that came back after the penalty's end may pass (a slow machine).
    let over = Instant::now() >= sent + Duration::from_secs(2);
    for result in later.iter().chain(&in_group) {
        let d = result.as_ref().expect("the cluster answers");
        assert!(over || (!d.allowed && d.reset_us <= 2_000_000), "{later:?} {in_group:?}");
    }
    // The wide limit charged nothing in the vetoed group.
    let wide_left = b.charge(&[Charge { hits: Hits::Peek, ..wide }], deadline()).await;
    assert_eq!(wide_left[0].as_ref().map(|d| d.remaining), Ok(100), "{wide_left:?}");
    // A reset lifts the penalty on every master.
    b.reset(&keys, deadline()).await.expect("reset");
    let lifted = a.charge(&batch, deadline()).await;
    assert!(lifted.iter().all(|r| r.as_ref().is_ok_and(|d| d.allowed)), "{lifted:?}");
}
