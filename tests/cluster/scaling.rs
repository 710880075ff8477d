//! What only a cluster shows: keys spread over the masters, several instances sharing
//! buckets exactly, a dead master, scripts missing on one node.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tollgate::store::cluster::key_slot;

use crate::cluster_support::MASTERS;
use crate::support::*;

const POLICY: &str = r#"
domain: open
failure_mode: open
descriptors:
  - key: user
    rate_limit: { unit: minute, requests_per_unit: 3 }
  - key: shared
    rate_limit: { unit: hour, requests_per_unit: 40 }
"#;

const CLOSED: &str = r#"
domain: closed
failure_mode: closed
descriptors:
  - key: user
    rate_limit: { unit: minute, requests_per_unit: 3 }
"#;

fn policies() -> [(&'static str, &'static str); 2] {
    [("open.yaml", POLICY), ("closed.yaml", CLOSED)]
}

/// `u000`, `u001`, …: same length, so a key's suffix names its user unambiguously.
fn user(i: usize) -> String {
    format!("u{i:03}")
}

/// The node holding the bucket of `user` in `domain` (the bucket must exist).
fn node_of(cluster: &RedisCluster, domain: &str, user: &str) -> usize {
    let (domain_part, user_part) =
        (format!("{}:{domain}", domain.len()), format!("4:user{}:{user}", user.len()));
    (0..MASTERS)
        .find(|&i| cluster.keys(i).iter().any(|k| k.contains(&domain_part) && k.ends_with(&user_part)))
        .unwrap_or_else(|| panic!("no node holds {domain}/{user}"))
}

/// Remaining of the first descriptor, or `None` when the answer carries no limit (failed open).
async fn remaining(app: &TestApp, domain: &str, user: &str) -> Option<u32> {
    let response = app.check(request(domain, &[&[("user", user)]])).await;
    response.statuses[0].current_limit.as_ref().map(|_| response.statuses[0].limit_remaining)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_spread_over_every_master_and_key_slot_agrees_with_redis() {
    let mut app = spawn_app(tollgate::app::StoreKind::Redis, &policies()).await;
    // 60 requests of 5 descriptors: every request touches several masters at once.
    for r in 0..60 {
        let users: Vec<String> = (0..5).map(|d| user(r * 5 + d)).collect();
        let descriptors: Vec<[(&str, &str); 1]> = users.iter().map(|u| [("user", u.as_str())]).collect();
        let refs: Vec<&[(&str, &str)]> = descriptors.iter().map(|d| &d[..]).collect();
        let response = app.check(request("open", &refs)).await;
        assert!(response.statuses.iter().all(|s| is_ok(s) && s.limit_remaining == 2), "{response:?}");
    }
    let cluster = app.cluster();
    let sizes: Vec<u64> = (0..MASTERS).map(|i| cluster.dbsize(i)).collect();
    assert!(sizes.iter().all(|&n| n > 0), "every master holds buckets: {sizes:?}");
    assert_eq!(sizes.iter().sum::<u64>(), 300, "one key per bucket: {sizes:?}");
    for i in 0..MASTERS {
        for key in cluster.keys(i).iter().take(15) {
            let slot = key_slot(key.as_bytes());
            assert_eq!(slot, cluster.keyslot(key), "{key}");
            assert_eq!(cluster.owner_of(slot), i, "{key} lives on the master owning slot {slot}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_instances_with_concurrent_clients_admit_exactly_the_limit_of_one_key() {
    let cluster = start_cluster().await;
    let mut apps = Vec::new();
    for _ in 0..3 {
        apps.push(Arc::new(spawn_on(&cluster, Duration::from_secs(2), &policies()).await));
    }
    let allowed = Arc::new(AtomicUsize::new(0));
    let mut clients = Vec::new();
    for app in &apps {
        for _ in 0..4 {
            let (app, allowed) = (app.clone(), allowed.clone());
            clients.push(tokio::spawn(async move {
                let req = request("open", &[&[("shared", "one-key")]]);
                for _ in 0..25 {
                    if !over(&app.check(req.clone()).await) {
                        allowed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }));
        }
    }
    for client in clients {
        client.await.expect("client task");
    }
    // 300 requests from 12 clients through 3 instances: exactly the limit of 40 pass.
    assert_eq!(allowed.load(Ordering::Relaxed), 40);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_master_fails_its_buckets_by_policy_while_the_others_keep_limiting() {
    let mut cluster = start_cluster().await;
    let timeout = Duration::from_millis(300);
    let app = spawn_on(&cluster, timeout, &policies()).await;
    let users: Vec<String> = (0..30).map(user).collect();
    for u in &users {
        assert_eq!(remaining(&app, "open", u).await, Some(2));
        assert_eq!(remaining(&app, "closed", u).await, Some(2));
    }
    let victim = 0;
    let on = |domain: &str, dead: bool| {
        users.iter().find(|u| (node_of(&cluster, domain, u) == victim) == dead).cloned().expect("a user")
    };
    let (open_dead, open_live) = (on("open", true), on("open", false));
    let (closed_dead, closed_live) = (on("closed", true), on("closed", false));
    let bound = timeout + Duration::from_millis(700);
    // Frozen (requests to it hit the deadline), then dead (connections refused).
    cluster.pause(victim);
    for round in 0..3 {
        if round == 2 {
            cluster.kill(victim);
        }
        let started = Instant::now();
        let response = app.check(request("open", &[&[("user", &open_dead)], &[("user", &open_live)]])).await;
        assert!(started.elapsed() < bound, "answered in {:?}", started.elapsed());
        let (dead, live) = (&response.statuses[0], &response.statuses[1]);
        assert!(is_ok(dead) && dead.current_limit.is_none(), "fails open: {dead:?}");
        assert!(live.current_limit.is_some(), "round {round}: the live master answers: {live:?}");
        let started = Instant::now();
        let closed = app.check(request("closed", &[&[("user", &closed_dead)]])).await;
        assert!(started.elapsed() < bound, "answered in {:?}", started.elapsed());
        assert!(over(&closed), "fails closed: {closed:?}");
    }
    // The live descriptor of those mixed requests was charged exactly: 1 + 3 > 3.
    assert!(over(&app.check(request("open", &[&[("user", &open_live)]])).await));
    assert_eq!(remaining(&app, "closed", &closed_live).await, Some(1));
    assert_eq!(remaining(&app, "closed", &closed_live).await, Some(0));
    assert!(over(&app.check(request("closed", &[&[("user", &closed_live)]])).await));
}

/// `cmdstat_eval` calls on node `i` (0 before the first EVAL).
fn eval_calls(cluster: &RedisCluster, i: usize) -> u64 {
    let stats = cluster.cli(i, &["INFO", "commandstats"]);
    stats
        .lines()
        .find_map(|l| l.strip_prefix("cmdstat_eval:calls="))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn script_flush_on_one_node_is_healed_on_that_node_alone() {
    let mut app = spawn_app(tollgate::app::StoreKind::Redis, &policies()).await;
    let users: Vec<String> = (0..12).map(user).collect();
    for u in &users {
        assert_eq!(remaining(&app, "open", u).await, Some(2));
    }
    let cluster = app.cluster.take().expect("cluster");
    let flushed = node_of(&cluster, "open", &users[0]);
    let other =
        users.iter().find(|u| node_of(&cluster, "open", u) != flushed).cloned().expect("a user elsewhere");
    let before: Vec<u64> = (0..MASTERS).map(|i| eval_calls(&cluster, i)).collect();
    assert_eq!(cluster.cli(flushed, &["SCRIPT", "FLUSH"]), "OK");
    let req = request("open", &[&[("user", &users[0])], &[("user", &other)]]);
    let response = app.check(req.clone()).await;
    let left: Vec<u32> = response.statuses.iter().map(|s| s.limit_remaining).collect();
    assert_eq!(left, vec![1, 1], "both charged exactly once: {response:?}");
    let after: Vec<u64> = (0..MASTERS).map(|i| eval_calls(&cluster, i)).collect();
    for i in 0..MASTERS {
        let expected = before[i] + u64::from(i == flushed);
        assert_eq!(after[i], expected, "EVAL only where the script was flushed (node {i})");
    }
    assert_eq!(app.check(req.clone()).await.statuses[0].limit_remaining, 0);
    assert!(over(&app.check(req).await));
}

/// A counter from `INFO section` of node `i`: the number after `prefix` (0 when absent).
fn counter(cluster: &RedisCluster, i: usize, section: &str, prefix: &str) -> u64 {
    let info = cluster.cli(i, &["INFO", section]);
    let value = info.lines().find_map(|l| l.strip_prefix(prefix));
    value.and_then(|v| v.split(',').next()).and_then(|n| n.trim().parse().ok()).unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_is_one_evalsha_per_descriptor_written_together_per_master() {
    let mut app = spawn_app(tollgate::app::StoreKind::Redis, &policies()).await;
    let users: Vec<String> = (0..30).map(user).collect();
    let descriptors: Vec<[(&str, &str); 1]> = users.iter().map(|u| [("shared", u.as_str())]).collect();
    let refs: Vec<&[(&str, &str)]> = descriptors.iter().map(|d| &d[..]).collect();
    let req = request("open", &refs);
    // Warm up: both kept cluster connections made, scripts cached on every master.
    for _ in 0..4 {
        app.check(req.clone()).await;
    }
    let cluster = app.cluster.take().expect("cluster");
    let keys: Vec<u64> = (0..MASTERS).map(|i| cluster.keys(i).len() as u64).collect();
    let snapshot = |cluster: &RedisCluster| -> Vec<(u64, u64)> {
        (0..MASTERS)
            .map(|i| {
                let reads = counter(cluster, i, "stats", "total_reads_processed:");
                (reads, counter(cluster, i, "commandstats", "cmdstat_evalsha:calls="))
            })
            .collect()
    };
    let requests = 10;
    let before = snapshot(&cluster);
    for _ in 0..requests {
        assert!(app.check(req.clone()).await.statuses.iter().all(is_ok));
    }
    let after = snapshot(&cluster);
    for i in 0..MASTERS {
        let (reads, evalsha) = (after[i].0 - before[i].0, after[i].1 - before[i].1);
        assert_eq!(evalsha, requests * keys[i], "one EVALSHA per descriptor on node {i}");
        // Sent one by one, node i would read keys[i] times per request; written together it
        // reads about once (measured: 15-20 reads for 10 requests, this probe's INFO included).
        assert!(reads <= 3 * requests, "node {i}: {reads} reads for {evalsha} EVALSHA");
    }
    assert!(keys.iter().all(|&k| k >= 5), "the 30 keys spread over the masters: {keys:?}");
}
