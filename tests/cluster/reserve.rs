//! Reservations at the store on a real Redis Cluster (`reserve_scenario`, the scenario every
//! store passes), two instances on one cluster, descriptors on every master: each call is
//! one `reserve.lua` call on its bucket's slot, whose records live under the same hash
//! tag (a record on another slot would be refused `CROSSSLOT`).

use std::time::Duration;

use tollgate::algorithm::reservation::Phase;
use tollgate::algorithm::Hits;
use tollgate::store::cluster::{ClusterSettings, ClusterStore};
use tollgate::store::{Guarded, RedisSettings, Store};

use crate::cluster_support::RedisCluster;
use crate::reserve_scenario::{
    an_unsettled_reservation_stays_charged_and_is_counted, concurrent_reservations_never_overspend, pair,
    reserve, reserve_hold_settle,
};
use crate::support::start_cluster;

fn cluster_store(cluster: &RedisCluster) -> Store {
    let link = RedisSettings::new("redis://unused").link(Duration::from_secs(2));
    let settings = ClusterSettings { nodes: cluster.nodes(), tls: Default::default(), link };
    Store::Cluster(Guarded::new(ClusterStore::new(&settings).expect("cluster store"), None))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reservations_on_a_cluster_and_two_instances() {
    let cluster = start_cluster().await;
    let (one, two) = (cluster_store(&cluster), cluster_store(&cluster));
    // Tags on every master.
    let tags: Vec<String> = (0..40).map(|i| format!("t{i}")).collect();
    let mut owners = std::collections::HashSet::new();
    for tag in &tags {
        let owner = cluster.owner_of(cluster.keyslot(&format!("{{{tag}}}")));
        if owners.insert(owner) {
            reserve_hold_settle(&one, &two, tag).await;
            concurrent_reservations_never_overspend(&two, &format!("{tag}c")).await;
        }
    }
    assert_eq!(owners.len(), 3, "every master served a reservation");
    // A single-key bucket without a hash tag: its records take the key itself as their tag.
    let mut single = pair("u", Hits::Consume(5));
    single.truncate(1);
    single[0].key = "tg:g2h:1:u".into();
    let held = reserve(&one, &single, "s").await;
    assert_eq!(held.phase, Phase::Reserved, "{held:?}");
    an_unsettled_reservation_stays_charged_and_is_counted(&one, "e").await;
}
