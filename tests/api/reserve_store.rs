//! Reservations at the store (`Store::reserve`) on memory and on one Redis node, with two
//! instances on one Redis (`reserve_scenario`, the scenario every store passes).

use std::time::Duration;

use tollgate::app::StoreKind;
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

/// Every phase is counted (`tollgate_reservations_total{domain,phase}`), the expired ones
/// apart, and the series exist (a metric read by a test must exist).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reservation_metrics_count_each_phase() {
    let app =
        crate::support::spawn_app(StoreKind::Redis, &[("tokens.yaml", crate::reservations::TOKENS)]).await;
    crate::reservations::reserve_then_settle(&app).await;
    let metrics = app.metrics().await;
    for phase in ["reserved", "refused", "settled", "plain"] {
        let line = format!("tollgate_reservations_total{{domain=\"tokens\",phase=\"{phase}\"}}");
        assert!(metrics.lines().any(|l| l.starts_with(&line) && !l.ends_with(" 0")), "{phase}:\n{metrics}");
    }
    let expired = "tollgate_reservations_expired_total{domain=\"tokens\"} 0";
    assert!(metrics.lines().any(|l| l == expired), "{metrics}");
}

/// Two instances on one Redis: a hold taken through one is spent for the other, and the
/// other settles it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_share_reservations_through_the_service() {
    use crate::reservations::{answer, tokens, TOKENS};
    let mut one = crate::support::spawn_app(StoreKind::Redis, &[("tokens.yaml", TOKENS)]).await;
    let options = crate::support::Options {
        redis_url: Some(one.redis().url()),
        ..crate::support::Options::new(StoreKind::Redis)
    };
    let two = crate::support::spawn_with(options, &[("tokens.yaml", TOKENS)]).await;
    assert_eq!(answer(&one, tokens("a", Some("r"), 70)).await, (true, 30));
    assert!(!answer(&two, tokens("a", Some("q"), 40)).await.0, "the hold is spent on the other");
    assert_eq!(answer(&two, tokens("a", Some("r"), 20)).await, (true, 80), "settled by the other");
    assert_eq!(answer(&one, tokens("a", Some("r"), 0)).await, (true, 80), "gone: a peek");
}

/// With `--key-secret-file`, a reservation's id is stored keyed like a bucket key's values:
/// the client's value is nowhere in Redis.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reservation_id_never_lands_raw_in_redis_with_a_key_secret() {
    use crate::reservations::{answer, tokens, TOKENS};
    let dir = tempfile::tempdir().expect("tempdir");
    let secret = dir.path().join("secret");
    std::fs::write(&secret, "0123456789abcdef0123456789abcdef0123456789abcdef").expect("write");
    let options = crate::support::Options {
        key_secret_file: Some(secret),
        ..crate::support::Options::new(StoreKind::Redis)
    };
    let mut app = crate::support::spawn_with(options, &[("tokens.yaml", TOKENS)]).await;
    assert_eq!(answer(&app, tokens("alice", Some("req-7f3a"), 10)).await, (true, 90));
    let keys = app.redis().cli(&["KEYS", "*"]);
    let records: Vec<&str> = keys.lines().filter(|k| k.ends_with(":rsv")).collect();
    assert_eq!(records.len(), 1, "{keys}");
    let ids = app.redis().cli(&["HKEYS", records[0]]);
    assert!(
        !keys.contains("alice") && !keys.contains("req-7f3a") && !ids.contains("req-7f3a"),
        "{keys}\n{ids}"
    );
    assert_eq!(
        answer(&app, tokens("alice", Some("req-7f3a"), 4)).await,
        (true, 96),
        "settled by its keyed id"
    );
}

/// `/v1/usage` on the bucket (without the reservation entry) reports remaining net of a
/// hold, on the instance that did not take it too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_reports_remaining_net_of_holds() {
    use crate::reservations::{answer, tokens, TOKENS};
    let mut one = crate::support::spawn_app(StoreKind::Redis, &[("tokens.yaml", TOKENS)]).await;
    let options = crate::support::Options {
        redis_url: Some(one.redis().url()),
        ..crate::support::Options::new(StoreKind::Redis)
    };
    let two = crate::support::spawn_with(options, &[("tokens.yaml", TOKENS)]).await;
    assert_eq!(answer(&one, tokens("u", Some("r"), 65)).await, (true, 35));
    let usage = two.admin("GET", "/v1/usage?domain=tokens&descriptor=user%3Du").await;
    assert_eq!(usage.status, 200, "{}", usage.body);
    let json: serde_json::Value = serde_json::from_str(&usage.body).expect("json");
    let remaining: Vec<u64> =
        json["limits"].as_array().into_iter().flatten().filter_map(|l| l["remaining"].as_u64()).collect();
    assert_eq!(remaining, [935, 35], "{json}");
}
