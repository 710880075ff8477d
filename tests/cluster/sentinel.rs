//! The Sentinel store on a real master, replica and sentinel: exact counts, and after a
//! failover the store moves to the new master within about a second, although the old one
//! is still up and still a master, and counts continue from the replicated state — by
//! scripts, by `--redis-windows plain`'s commands, and for reservations.

use std::time::Duration;

use envoy_types::pb::google::protobuf::UInt64Value;
use tollgate::app::{RedisTopology, ServeSettings, StoreKind};

use crate::sentinel_support::{RedisSentinel, MASTER_NAME};
use crate::support::*;

const POLICY: &str = r#"
domain: api
failure_mode: open
descriptors:
  - key: user
    rate_limit: { unit: minute, requests_per_unit: 5 }
"#;

const KEY: &str = "tg:g2m:3:api4:user5:alice";

/// Remaining after a consume (or a peek), or `None` when the answer is the failure
/// policy's (no limit reported).
async fn remaining(app: &TestApp, peek: bool) -> Option<u32> {
    let mut req = request("api", &[&[("user", "alice")]]);
    if peek {
        req.descriptors[0].hits_addend = Some(UInt64Value { value: 0 });
    }
    let response = app.check(req).await;
    response.statuses[0].current_limit.as_ref().map(|_| response.statuses[0].limit_remaining)
}

/// `setup` once its replica has everything, after the sentinel failed the master over.
async fn replicated_then_failed_over(setup: RedisSentinel) -> RedisSentinel {
    tokio::task::spawn_blocking(move || {
        setup.wait_replicated();
        setup.failover();
        setup
    })
    .await
    .expect("failover")
}

/// A master, replica and sentinel, and an app on them at `store_timeout` with `policy` as
/// `file`, its settings changed by `tweak` last.
async fn sentinel_app(
    store_timeout: Duration,
    (file, policy): (&str, &str),
    tweak: impl FnOnce(&mut ServeSettings),
) -> (RedisSentinel, TestApp) {
    let setup = tokio::task::spawn_blocking(RedisSentinel::start).await.expect("sentinel start");
    let topology =
        RedisTopology::Sentinel { master: MASTER_NAME.into(), sentinels: vec![setup.sentinel_addr()] };
    let app = spawn_with(StoreKind::Redis, topology, store_timeout, &[(file, policy)], tweak).await;
    (setup, app)
}

/// `--store-timeout-ms`'s default.
fn production() -> Duration {
    ServeSettings::new(std::path::PathBuf::new()).store_timeout
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_store_counts_exactly_and_follows_a_failover_at_once() {
    let (setup, app) = sentinel_app(Duration::from_millis(500), ("api.yaml", POLICY), |_| {}).await;
    for expected in [4, 3, 2] {
        assert_eq!(remaining(&app, false).await, Some(expected));
    }
    let [old, new] = setup.data_ports();
    let setup = replicated_then_failed_over(setup).await;
    assert!(setup.cli(new, &["EXISTS", KEY]) == "1", "the bucket was replicated");
    // The old master still accepts writes for a while: empty its bucket, so an answer from
    // it (a full bucket) and one from the new master (2 left) differ.
    assert_eq!(setup.cli(old, &["DEL", KEY]), "1");
    // Within the sentinel poll (1 s), plus a breaker cool-down or two when the requests
    // failing during the switch opened it: generous, since CI shares two cores.
    let followed =
        eventually(Duration::from_secs(10), || async { remaining(&app, true).await == Some(2) }).await;
    assert!(followed, "the store moved to the new master before the sentinel reconfigured the old one");
    assert_eq!(remaining(&app, false).await, Some(1));
    assert_eq!(remaining(&app, false).await, Some(0));
    assert!(over(&app.check(request("api", &[&[("user", "alice")]])).await));
    assert_eq!(setup.cli(old, &["EXISTS", KEY]), "0", "nothing was written to the old master");
}

/// Reservations on the Sentinel store at the production store timeout: every phase through
/// the service, then a hold taken on the old master is settled on the new one after a
/// failover (the record is replicated with the bucket: one script call wrote both).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reservations_on_sentinel_and_a_hold_settled_across_a_failover() {
    use crate::reservations::{answer, reserve_then_settle, tokens, TOKENS};
    let (setup, app) = sentinel_app(production(), ("tokens.yaml", TOKENS), |_| {}).await;
    reserve_then_settle(&app).await;

    assert_eq!(answer(&app, tokens("f", Some("held"), 70)).await, (true, 30));
    let [old, _] = setup.data_ports();
    let setup = replicated_then_failed_over(setup).await;
    // The old master still takes writes for a while: empty it, so only the new master's
    // answer (the hold, replicated) reads 30.
    setup.cli(old, &["FLUSHALL"]);
    let moved = eventually(Duration::from_secs(10), || async {
        answer(&app, tokens("f", None, 0)).await == (true, 30)
    })
    .await;
    assert!(moved, "the store follows the failover and finds the hold");
    assert_eq!(answer(&app, tokens("f", Some("held"), 20)).await, (true, 80), "settled on the new master");
    assert_eq!(answer(&app, tokens("f", Some("held"), 0)).await, (true, 80), "gone: a peek");
}

const FIXED: &str = r#"
domain: api
failure_mode: open
descriptors:
  - key: user
    rate_limit: { unit: day, requests_per_unit: 5, algorithm: fixed_window }
"#;

/// `--redis-windows plain` on Sentinel at the production store timeout: consumes are plain
/// commands on the master (counted in the window's own key), denials are given back, and after a failover the store continues on the new master from
/// the replicated count, never past the limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_windows_on_sentinel_count_exactly_across_a_failover() {
    let plain = |s: &mut ServeSettings| s.redis.windows = tollgate::store::redis::Windows::Plain;
    let (setup, app) = sentinel_app(production(), ("api.yaml", FIXED), plain).await;
    let [old, new] = setup.data_ports();
    let calls = |port| setup.cli(port, &["INFO", "commandstats"]);
    for expected in [4, 3, 2] {
        assert_eq!(remaining(&app, false).await, Some(expected));
    }
    assert!(calls(old).contains("cmdstat_incrby:calls=3,"), "three plain consumes: {}", calls(old));
    assert!(!calls(old).contains("cmdstat_evalsha"), "no script for a consume");
    // The window's key is the only key: plain consumes write no hash.
    let key = setup.cli(old, &["KEYS", "*"]).trim().to_string();
    assert!(key.starts_with("{tg:"), "the window key: {key}");
    assert_eq!(setup.cli(old, &["GET", &key]), "3", "the window key's count: {key}");
    let setup = replicated_then_failed_over(setup).await;
    assert_eq!(setup.cli(new, &["GET", &key]), "3", "the bucket was replicated");
    setup.cli(old, &["DEL", &key]);
    let followed =
        eventually(Duration::from_secs(10), || async { remaining(&app, true).await == Some(2) }).await;
    assert!(followed, "the store moved to the new master");
    assert_eq!(remaining(&app, false).await, Some(1));
    assert_eq!(remaining(&app, false).await, Some(0));
    for _ in 0..3 {
        assert!(over(&app.check(request("api", &[&[("user", "alice")]])).await), "never past the limit");
    }
    // The denials' increments are given back on the new master, after their answers.
    let settled =
        eventually(Duration::from_secs(5), || async { setup.cli(new, &["GET", &key]) == "5" }).await;
    assert!(settled, "the new master holds the admitted count: {}", setup.cli(new, &["GET", &key]));
    assert_eq!(setup.cli(old, &["EXISTS", &key]), "0", "nothing was written to the old master");
}
