//! A cluster behind TCP fronts (`RedisCluster::start_behind_fronts`): every master
//! announces its front, so clients reach the masters only through them, and a test can make
//! one master's connections go silent (bytes swallowed, no FIN, no RST).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tollgate::store::cluster::key_slot;

use crate::cluster_support::MASTERS;
use crate::support::*;

/// A fail-closed domain with a limit no test reaches: allowed means Redis answered. A fixed
/// window keeps each bucket's key for the hour, so `bucket_of` finds it.
const CLOSED: &str = r#"
domain: closed
failure_mode: closed
descriptors:
  - key: user
    rate_limit: { unit: hour, requests_per_unit: 100000, algorithm: fixed_window }
"#;

const TIMEOUT: Duration = Duration::from_millis(200);

async fn start_behind_fronts() -> RedisCluster {
    tokio::task::spawn_blocking(RedisCluster::start_behind_fronts).await.expect("cluster start panicked")
}

/// `u000`, `u001`, …: same length, so a key's suffix names its user unambiguously.
fn user(i: usize) -> String {
    format!("u{i:03}")
}

/// Whether one request for `user`'s bucket was answered by Redis (not by the failure policy).
async fn answered_by_redis(app: &TestApp, user: &str) -> bool {
    !over(&app.check(request("closed", &[&[("user", user)]])).await)
}

/// The bucket key of `user` and the master holding it (the bucket must exist); the slot
/// function and the cluster's slot map must agree on the master.
fn bucket_of(cluster: &RedisCluster, user: &str) -> (String, usize) {
    let suffix = format!("4:user{}:{user}", user.len());
    let (key, node) = (0..MASTERS)
        .find_map(|i| cluster.keys(i).into_iter().find(|k| k.ends_with(&suffix)).map(|k| (k, i)))
        .unwrap_or_else(|| panic!("no master holds the bucket of {user}"));
    assert_eq!(cluster.owner_of(key_slot(key.as_bytes())), node, "{key}");
    (key, node)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_behind_fronts_announces_the_fronts() {
    let cluster = start_behind_fronts().await;
    let slots = cluster.cli(0, &["CLUSTER", "SLOTS"]);
    let lines: Vec<&str> = slots.lines().map(str::trim).collect();
    for i in 0..MASTERS {
        let (front, real) = (cluster.client_port(i).to_string(), cluster.port(i).to_string());
        assert!(lines.contains(&front.as_str()), "CLUSTER SLOTS names front {front}:\n{slots}");
        assert!(!lines.contains(&real.as_str()), "CLUSTER SLOTS hides port {real}:\n{slots}");
    }
    // A client that follows MOVED, started on one front, reaches every master by its front.
    let entry = cluster.client_port(0).to_string();
    for k in 0..30 {
        let out = std::process::Command::new("redis-cli")
            .args(["-c", "-p", &entry, "SET", &format!("key-{k}"), "v"])
            .output()
            .expect("run redis-cli");
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "OK");
    }
    for i in 0..MASTERS {
        let stats = cluster.front(i).stats();
        assert!(stats.accepted > 0 && stats.to_client > 0, "front {i}: {stats:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_master_is_replaced_and_the_others_never_stop() {
    let cluster = start_behind_fronts().await;
    let app = Arc::new(spawn_on(&cluster, TIMEOUT, &[("closed.yaml", CLOSED)]).await);
    let users: Vec<String> = (0..30).map(user).collect();
    for u in &users {
        assert!(answered_by_redis(&app, u).await, "{u}");
    }
    for i in 0..MASTERS {
        let stats = cluster.front(i).stats();
        assert!(stats.accepted > 0 && stats.to_redis > 0 && stats.to_client > 0, "front {i}: {stats:?}");
    }
    let victim = 0;
    let (on_victim, others): (Vec<String>, Vec<String>) =
        users.iter().cloned().partition(|u| bucket_of(&cluster, u).1 == victim);
    assert!(!on_victim.is_empty() && !others.is_empty(), "{on_victim:?} {others:?}");

    // Traffic to the other masters' buckets throughout, counting policy answers.
    let (stop, sent, by_policy) =
        (Arc::new(AtomicBool::new(false)), Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let traffic = {
        let (app, stop, sent, by_policy) = (app.clone(), stop.clone(), sent.clone(), by_policy.clone());
        tokio::spawn(async move {
            for u in others.iter().cycle() {
                if stop.load(Ordering::SeqCst) {
                    break;
                }
                if !answered_by_redis(&app, u).await {
                    by_policy.fetch_add(1, Ordering::SeqCst);
                }
                sent.fetch_add(1, Ordering::SeqCst);
            }
        })
    };
    assert!(eventually(Duration::from_secs(2), || async { sent.load(Ordering::SeqCst) >= 10 }).await);

    cluster.front(victim).silence_existing();
    let started = Instant::now();
    let app_ref = &app;
    let mut next = on_victim.iter().cycle();
    let recovered = eventually(Duration::from_secs(5), || {
        let u = next.next().cloned().unwrap_or_default();
        async move { answered_by_redis(app_ref, &u).await }
    })
    .await;
    println!("figures: silent master: recovered {recovered} after {:?}", started.elapsed());
    let mut steadily = 0;
    for u in on_victim.iter().cycle().take(if recovered { 10 } else { 0 }) {
        steadily += usize::from(answered_by_redis(&app, u).await);
    }
    stop.store(true, Ordering::SeqCst);
    traffic.await.expect("traffic task");
    let (sent, by_policy) = (sent.load(Ordering::SeqCst), by_policy.load(Ordering::SeqCst));
    println!("figures: other masters: {by_policy} of {sent} answered by the failure policy");

    assert!(recovered, "the silent master's buckets are answered by Redis again within 5 s");
    assert_eq!(steadily, 10, "then steadily");
    assert_eq!(by_policy, 0, "the other masters never stopped: {by_policy} of {sent} by policy");
    assert!(cluster.front(victim).stats().swallowed > 0, "the victim's connections were silenced");
}
