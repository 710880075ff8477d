//! Reservations at the store (`Store::reserve`) on memory and on one Redis node, with two
//! instances on one Redis (`reserve_scenario`, the scenario every store passes).

use std::time::Duration;

use tollgate::store::{Guarded, MemoryStore, RedisSettings, RedisStore, Store};

use crate::redis_support::RedisServer;
use crate::reserve_scenario::{
    an_unsettled_reservation_stays_charged_and_is_counted, concurrent_reservations_never_overspend,
    reserve_hold_settle,
};

fn redis_store(server: &RedisServer) -> Store {
    let redis = RedisStore::new(&RedisSettings::new(server.url()), Duration::from_secs(2)).expect("store");
    Store::Redis(Guarded::new(redis, None))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reservations_in_memory() {
    let store = Store::Memory(MemoryStore::new(1_000));
    reserve_hold_settle(&store, &store, "a").await;
    concurrent_reservations_never_overspend(&store, "b").await;
    an_unsettled_reservation_stays_charged_and_is_counted(&store, "c").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reservations_on_one_redis_node_and_two_instances() {
    let server = RedisServer::start();
    let (one, two) = (redis_store(&server), redis_store(&server));
    reserve_hold_settle(&one, &two, "a").await;
    concurrent_reservations_never_overspend(&one, "b").await;
    an_unsettled_reservation_stays_charged_and_is_counted(&one, "c").await;
}
