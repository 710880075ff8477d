//! An instance reports ready with its store prepared (`store::redis::prepare`): on every
//! master of a cluster, and on the Sentinel master, its connections made and every script
//! it calls loaded, before any request. So the first requests after readiness, at the
//! default store timeout (10 ms), pay neither a connect nor a `NOSCRIPT` round trip: before,
//! the first charge on each master connected, was answered `NOSCRIPT`, and went again with
//! the script's source, and under load it missed its deadline (the domain's failure mode).

use std::path::PathBuf;

use tollgate::app::{RedisTopology, ServeSettings, StoreKind};

use crate::sentinel_support::{RedisSentinel, MASTER_NAME};
use crate::support::{is_ok, request, spawn, spawn_on, start_cluster};

const POLICY: &str = "domain: ready\nfailure_mode: closed\ndescriptors:\n  - key: user\n    \
                      rate_limit: { unit: minute, requests_per_unit: 10, algorithm: fixed_window }\n";

/// Users enough that every master of a 3-master cluster holds some of their buckets.
const USERS: usize = 30;

fn default_store_timeout() -> std::time::Duration {
    ServeSettings::new(PathBuf::new()).store_timeout
}

/// Every script a request or a sync calls, as SHA1 (what `EVALSHA` asks for).
fn shas() -> Vec<String> {
    tollgate::store::redis::prepare::scripts()
        .iter()
        .map(|s| redis::Script::new(s).get_hash().to_string())
        .collect()
}

/// `SCRIPT EXISTS` of every script on the server `cli` asks: one `1` per script loaded.
fn loaded(cli: impl Fn(&[&str]) -> String) -> usize {
    let shas = shas();
    let mut args = vec!["SCRIPT", "EXISTS"];
    args.extend(shas.iter().map(String::as_str));
    cli(&args).lines().filter(|l| l.trim() == "1").count()
}

/// `INFO errorstats` of a server: the `NOSCRIPT` answers it gave, if any.
fn noscripts(cli: impl Fn(&[&str]) -> String) -> Option<String> {
    cli(&["INFO", "errorstats"]).lines().find(|l| l.starts_with("errorstat_NOSCRIPT")).map(str::to_string)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_instance_is_ready_with_every_master_connected_and_its_scripts_loaded() {
    let cluster = start_cluster().await;
    let app = spawn_on(&cluster, default_store_timeout(), &[("ready.yaml", POLICY)]).await;
    let scripts = shas().len();
    for i in 0..3 {
        assert_eq!(loaded(|args| cluster.cli(i, args)), scripts, "scripts loaded on master {i} at readiness");
    }
    for user in 0..USERS {
        let response = app.check(request("ready", &[&[("user", &user.to_string())]])).await;
        assert!(is_ok(&response.statuses[0]), "the first charge of user {user}: {response:?}");
        assert_eq!(response.statuses[0].limit_remaining, 9, "user {user}");
    }
    for i in 0..3 {
        assert!(cluster.dbsize(i) > 0, "master {i} holds none of the first charges' buckets");
        assert_eq!(noscripts(|args| cluster.cli(i, args)), None, "master {i} answered NOSCRIPT");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_instance_is_ready_with_its_scripts_loaded_on_the_master() {
    let setup = tokio::task::spawn_blocking(RedisSentinel::start).await.expect("sentinel start");
    let topology =
        RedisTopology::Sentinel { master: MASTER_NAME.into(), sentinels: vec![setup.sentinel_addr()] };
    let app = spawn(StoreKind::Redis, topology, default_store_timeout(), &[("ready.yaml", POLICY)]).await;
    let master = setup.sentinel_master().expect("a master");
    assert_eq!(loaded(|args| setup.cli(master, args)), shas().len(), "scripts loaded at readiness");
    for user in 0..USERS {
        let response = app.check(request("ready", &[&[("user", &user.to_string())]])).await;
        assert!(is_ok(&response.statuses[0]), "the first charge of user {user}: {response:?}");
    }
    assert_eq!(noscripts(|args| setup.cli(master, args)), None, "the master answered NOSCRIPT");
}
