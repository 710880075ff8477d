//! The RLQS claims ledger (`Store::hold`) on a real Redis Cluster (one script call on the
//! master of the ledger's slot, ledgers spread over every master) and through Sentinel:
//! two instances (two stores) see each other's holders and claims, a claim is kept across
//! writes that do not change it, and a holder's entry expires with its keep.

use std::time::Duration;

use tokio::time::Instant;
use tollgate::store::cluster::{ClusterSettings, ClusterStore};
use tollgate::store::rlqs::{Hold, LocalLedger};
use tollgate::store::sentinel::{SentinelSettings, SentinelStore};
use tollgate::store::{Guarded, RedisSettings, Store};

use crate::sentinel_support::{RedisSentinel, MASTER_NAME};
use crate::support::start_cluster;

fn link() -> tollgate::store::redis::link::LinkSettings {
    RedisSettings::new("redis://127.0.0.1:1/").link(Duration::from_secs(2))
}

fn hold(holder: &str, claim: Option<u64>, keep_ms: u64) -> Hold<'_> {
    Hold { holder, demand: 7, newcomer: false, live: true, claim, keep_ms, instance: "i1" }
}

/// Two instances write one ledger per key; each sees the other's claim.
async fn two_instances_share_each_ledger(a: &Store, b: &Store, keys: &[String]) {
    let local = LocalLedger::default();
    let deadline = || Instant::now() + Duration::from_secs(2);
    for key in keys {
        let first =
            a.hold(&local, key, &hold("envoy-a", Some(40), 20_000), deadline()).await.expect("ledger");
        assert_eq!((first.claim, first.others.len()), (40, 0), "{key}");
        let seen = b.hold(&local, key, &hold("envoy-b", None, 20_000), deadline()).await.expect("ledger");
        assert_eq!(seen.claim, 0, "{key}: b has no claim yet");
        assert_eq!(seen.others.len(), 1, "{key}: {seen:?}");
        assert_eq!(
            (seen.others[0].holder.as_str(), seen.others[0].claim, seen.others[0].demand),
            ("envoy-a", 40, 7)
        );
        // a writes again without a claim: its 40 stays.
        let again = a.hold(&local, key, &hold("envoy-a", None, 20_000), deadline()).await.expect("ledger");
        assert_eq!(again.claim, 40, "{key}");
    }
    assert!(local.is_empty(), "Redis holds the ledger, not this process");
    // An entry kept 300 ms is gone after it.
    let key = &keys[0];
    a.hold(&local, key, &hold("brief", Some(5), 300), deadline()).await.expect("ledger");
    tokio::time::sleep(Duration::from_millis(400)).await;
    let later = b.hold(&local, key, &hold("envoy-b", None, 20_000), deadline()).await.expect("ledger");
    assert!(later.others.iter().all(|h| h.holder != "brief"), "{later:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_ledger_is_shared_by_the_instances_on_every_master() {
    let cluster = start_cluster().await;
    let settings = ClusterSettings { nodes: cluster.nodes(), tls: Default::default(), link: link() };
    let store = || Store::Cluster(Guarded::new(ClusterStore::new(&settings).expect("cluster store"), None));
    let keys: Vec<String> = (0..12).map(|i| format!("tg:rlqs-test:user{}:rlqs", i * 7919)).collect();
    let masters: std::collections::BTreeSet<u16> =
        keys.iter().map(|k| cluster.keyslot(k) * 3 / tollgate::store::cluster::SLOTS).collect();
    assert_eq!(masters.len(), 3, "the ledgers span the three masters' slot ranges");
    two_instances_share_each_ledger(&store(), &store(), &keys).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_ledger_is_shared_by_the_instances() {
    let setup = tokio::task::spawn_blocking(RedisSentinel::start).await.expect("sentinel start");
    let settings = SentinelSettings {
        master: MASTER_NAME.into(),
        sentinels: vec![setup.sentinel_addr()],
        master_url: None,
        tls: Default::default(),
        link: link(),
        batch: true,
    };
    let store =
        || Store::Sentinel(Guarded::new(SentinelStore::new(&settings).expect("sentinel store"), None));
    let keys: Vec<String> = (0..3).map(|i| format!("tg:rlqs-test:{i}:rlqs")).collect();
    two_instances_share_each_ledger(&store(), &store(), &keys).await;
}
