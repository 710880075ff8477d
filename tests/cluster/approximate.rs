//! Approximate mode (`consistency: approximate`) on a real 3-master cluster: the sync sends
//! one `approx.lua` call per slot touched, each master's calls as one pipeline. Three
//! instances on one hot key, with traffic on keys over every master, stay within the
//! bound of docs/scaling.md; every key's increments are written exactly once (the sum of the counts
//! over the masters is what was admitted) and `/v1/usage` reads them; idle buckets cost the
//! cluster no script call.
//!
//! Every test asserts that no decision came from the failure policy (a fail-closed domain:
//! such a decision would be a denial that looks like the limit working).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::Instant;

use crate::approx_support::{admin_get, bound, within_one_window, SUM_OF_COUNTS};
use crate::cluster_support::MASTERS;
use crate::support::*;

const LIMIT: u64 = 1_000;

const POLICY: &str = "domain: approx\nconsistency: approximate\nfailure_mode: closed\ndescriptors:\n  \
                      - key: user\n    rate_limit: { unit: minute, requests_per_unit: 1000, algorithm: sliding_window }\n";

async fn allowed(app: &TestApp, value: &str) -> bool {
    !over(&app.check(request("approx", &[&[("user", value)]])).await)
}

/// `GET path` on the app's admin port: the body.
async fn get(app: &TestApp, path: &str) -> String {
    admin_get(app.running.as_ref().expect("running").admin_addr, path).await
}

async fn metric(app: &TestApp, series: &str) -> f64 {
    crate::approx_support::metric(app.running.as_ref().expect("running").admin_addr, series).await
}

async fn failure_decisions(app: &TestApp) -> f64 {
    crate::approx_support::failure_decisions(app.running.as_ref().expect("running").admin_addr).await
}

/// Waits until `app` decides approximate domains locally (`tollgate_approximate_ready`).
async fn wait_ready(app: &TestApp) {
    wait_for("approximate mode is ready", || async {
        metric(app, "tollgate_approximate_ready ").await == 1.0
    })
    .await;
}

/// Polls `ready` for at most 20 s.
async fn wait_for<F: std::future::Future<Output = bool>>(what: &str, ready: impl FnMut() -> F) {
    assert!(eventually(Duration::from_secs(20), ready).await, "timed out waiting until {what}");
}

/// The current counts (`c`) of every bucket on master `i`, summed.
fn counted_on(cluster: &RedisCluster, i: usize) -> u64 {
    // A script without flags may read this node's keys of any slot (Redis ≥ 7 allows it
    // for compatibility); every key it reads is local.
    cluster.cli(i, &["EVAL", SUM_OF_COUNTS, "0"]).parse().unwrap_or(0)
}

/// The current counts of every bucket, over the whole cluster.
fn counted(cluster: &RedisCluster) -> u64 {
    (0..MASTERS).map(|i| counted_on(cluster, i)).sum()
}

/// Script calls (`EVALSHA` and `EVAL`) master `i` ran since its last `CONFIG RESETSTAT`.
fn script_calls(cluster: &RedisCluster, i: usize) -> u64 {
    let info = cluster.cli(i, &["INFO", "commandstats"]);
    ["cmdstat_evalsha:calls=", "cmdstat_eval:calls="]
        .iter()
        .filter_map(|prefix| info.lines().find_map(|l| l.strip_prefix(prefix)))
        .filter_map(|rest| rest.split(',').next()?.parse::<u64>().ok())
        .sum()
}

/// Values whose buckets land on every master (and on many slots).
fn spread(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i}")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_instances_on_a_cluster_stay_within_the_stated_bound() {
    let cluster = start_cluster().await;
    let mut apps = Vec::new();
    for _ in 0..3 {
        apps.push(Arc::new(spawn_on(&cluster, Duration::from_secs(2), &[("approx.yaml", POLICY)]).await));
    }
    for app in &apps {
        assert!(allowed(app, "warm-up").await);
    }
    for app in &apps {
        wait_for("every instance sees 3", || async {
            metric(app, "tollgate_approximate_instances ").await >= 3.0
        })
        .await;
    }
    within_one_window(Duration::from_secs(14)).await;
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for (a, app) in apps.iter().enumerate() {
        for c in 0..6 {
            let (app, stop) = (app.clone(), stop.clone());
            // Every tenth request is on a key of this client's own, over every master:
            // each wake then writes several slots on several masters.
            let others = spread(&format!("bg-{a}-{c}"), 30);
            tasks.push(tokio::spawn(async move {
                let (mut admitted, mut sent) = (0u64, 0u64);
                while !stop.load(Ordering::Relaxed) {
                    sent += 1;
                    if sent % 10 == 0 {
                        let value = &others[(sent / 10) as usize % others.len()];
                        assert!(allowed(&app, value).await, "a quiet key was denied");
                        continue;
                    }
                    admitted += u64::from(allowed(&app, "hammered").await);
                }
                (admitted, sent)
            }));
        }
    }
    tokio::time::sleep(Duration::from_secs(10)).await;
    stop.store(true, Ordering::Relaxed);
    let (mut admitted, mut sent) = (0, 0);
    for task in tasks {
        let (a, s) = task.await.expect("client");
        admitted += a;
        sent += s;
    }
    for app in &apps {
        assert_eq!(failure_decisions(app).await, 0.0, "a decision came from the failure policy");
        assert_eq!(metric(app, "tollgate_approximate_syncs_total{result=\"failed\"} ").await, 0.0);
    }
    let bound = bound(3, LIMIT);
    println!("cluster: admitted {admitted} of {sent} requests (limit {LIMIT}, stated bound +{bound})");
    assert!(sent > 3 * LIMIT, "the clients hammered ({sent} requests)");
    assert!(admitted >= LIMIT, "admitted {admitted}: under the limit");
    assert!(admitted <= LIMIT + bound, "admitted {admitted}: past {LIMIT} + {bound}");
    let held: Vec<u64> = (0..MASTERS).map(|i| cluster.dbsize(i)).collect();
    assert!(held.iter().all(|&n| n > 0), "the keys span every master: {held:?}");
    for app in apps {
        let app = Arc::into_inner(app).expect("clients done");
        app.running.expect("running").stop().await.expect("stop");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_key_over_the_masters_is_written_once_and_usage_reads_it() {
    let cluster = start_cluster().await;
    let one = spawn_on(&cluster, Duration::from_secs(2), &[("approx.yaml", POLICY)]).await;
    let two = spawn_on(&cluster, Duration::from_secs(2), &[("approx.yaml", POLICY)]).await;
    wait_ready(&one).await;
    wait_ready(&two).await;
    within_one_window(Duration::from_secs(10)).await;
    let values = spread("k", 200);
    let mut admitted = 0u64;
    for round in 0..3 {
        for (i, value) in values.iter().enumerate() {
            let app = if (i + round) % 2 == 0 { &one } else { &two };
            admitted += u64::from(allowed(app, value).await);
        }
    }
    assert_eq!(admitted, 600, "3 per key, far under every share");
    wait_for("every increment is in the cluster", || async { counted(&cluster) >= admitted }).await;
    let slots: std::collections::BTreeSet<u16> = (0..MASTERS)
        .flat_map(|i| cluster.keys(i))
        .filter(|k| k.contains("user"))
        .map(|k| tollgate::store::cluster::key_slot(k.as_bytes()))
        .collect();
    assert!(slots.len() > 150, "the keys span many slots: {}", slots.len());
    let per_master: Vec<u64> = (0..MASTERS).map(|i| counted_on(&cluster, i)).collect();
    assert!(per_master.iter().all(|&n| n > 0), "every master holds counts: {per_master:?}");
    // Written once: after both instances synced again (half a second on), nothing more.
    let since = SystemTime::now().duration_since(UNIX_EPOCH).expect("clock").as_secs_f64() + 0.5;
    for app in [&one, &two] {
        wait_for("a later sync", || async {
            metric(app, "tollgate_approximate_last_sync_timestamp_seconds ").await >= since
        })
        .await;
    }
    assert_eq!(counted(&cluster), admitted, "per master: {per_master:?}");
    let usage = get(&one, "/v1/usage?domain=approx&descriptor=user=k-7").await;
    assert!(usage.contains("\"consumed\":3"), "{usage}");
    assert!(usage.contains("\"approximate\""), "{usage}");
    for app in [&one, &two] {
        assert_eq!(failure_decisions(app).await, 0.0, "a decision came from the failure policy");
        assert_eq!(metric(app, "tollgate_approximate_syncs_total{result=\"failed\"} ").await, 0.0);
    }
    for app in [one, two] {
        app.running.expect("running").stop().await.expect("stop");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_buckets_cost_the_cluster_no_script_call() {
    let cluster = start_cluster().await;
    let one = spawn_on(&cluster, Duration::from_secs(2), &[("approx.yaml", POLICY)]).await;
    wait_ready(&one).await;
    within_one_window(Duration::from_secs(10)).await;
    // 20 buckets at 5 % of their limit, over the masters: idle. Each is read once, on
    // its master, before its first charge.
    let values = spread("idle", 20);
    for value in &values {
        for _ in 0..50 {
            assert!(allowed(&one, value).await);
        }
    }
    wait_for("the increments are written", || async { counted(&cluster) >= 1000 }).await;
    let held: Vec<u64> = (0..MASTERS).map(|i| cluster.dbsize(i)).collect();
    assert!(held.iter().all(|&n| n > 0), "the buckets span every master: {held:?}");
    for i in 0..MASTERS {
        cluster.cli(i, &["CONFIG", "RESETSTAT"]);
    }
    // Observe two seconds (8 intervals): the heartbeat goes on, no script call at all
    // (nothing was charged: nothing to write, nothing to read).
    let observed = Instant::now();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let calls: Vec<u64> = (0..MASTERS).map(|i| script_calls(&cluster, i)).collect();
    assert_eq!(calls, vec![0; MASTERS], "idle buckets were read (per master)");
    let beats: u64 = (0..MASTERS)
        .filter_map(|i| {
            let info = cluster.cli(i, &["INFO", "commandstats"]);
            info.lines()
                .find_map(|l| l.strip_prefix("cmdstat_zadd:calls="))
                .and_then(|rest| rest.split(',').next()?.parse::<u64>().ok())
        })
        .sum();
    let intervals = observed.elapsed().as_millis() as u64 / 250;
    assert!(beats >= intervals.saturating_sub(2), "{beats} heartbeats in {intervals} intervals");
    assert_eq!(counted(&cluster), 1000);
    assert_eq!(metric(&one, "tollgate_approximate_first_reads_total{result=\"ok\"} ").await, 20.0);
    assert_eq!(failure_decisions(&one).await, 0.0, "a decision came from the failure policy");
    one.running.expect("running").stop().await.expect("stop");
}

/// Moves `slots` slots, with their keys, from master `from` to master `to`
/// (`redis-cli --cluster reshard`, off the runtime's workers): a client's map is stale for
/// them until a `MOVED`.
async fn reshard(cluster: &RedisCluster, from: usize, to: usize, slots: usize) {
    let id = |i: usize| cluster.cli(i, &["CLUSTER", "MYID"]);
    let mut command = std::process::Command::new("redis-cli");
    command
        .args(["--cluster", "reshard", &format!("127.0.0.1:{}", cluster.port(from))])
        .args(["--cluster-from", &id(from), "--cluster-to", &id(to)])
        .args(["--cluster-slots", &slots.to_string(), "--cluster-yes"]);
    let out = tokio::task::spawn_blocking(move || command.output())
        .await
        .expect("join")
        .expect("redis-cli must be installed (it comes with redis-server)");
    assert!(out.status.success(), "reshard failed:\n{}", String::from_utf8_lossy(&out.stderr));
}

/// `MOVED` replies master `i` gave since its last `CONFIG RESETSTAT`.
fn moved_replies(cluster: &RedisCluster, i: usize) -> u64 {
    let info = cluster.cli(i, &["INFO", "errorstats"]);
    info.lines()
        .find_map(|l| l.strip_prefix("errorstat_MOVED:count="))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sync_entry_moved_by_a_reshard_is_written_once_on_its_new_master() {
    let cluster = start_cluster().await;
    let one = spawn_on(&cluster, Duration::from_secs(2), &[("approx.yaml", POLICY)]).await;
    within_one_window(Duration::from_secs(20)).await;
    let values = spread("m", 400);
    for value in &values {
        assert!(allowed(&one, value).await);
    }
    wait_for("the first increments are written", || async { counted(&cluster) >= 400 }).await;
    let before_all: Vec<Vec<String>> = (0..MASTERS).map(|i| cluster.keys(i)).collect();
    // Slots move from a master that does not hold the heartbeat's key (whose redirect
    // would refresh the instance's map early): the instance's map still says `from` owns
    // them, so its next sync's pipeline to `from` holds entries answered `MOVED` beside
    // entries `from` runs.
    let beat = cluster.owner_of(tollgate::store::cluster::key_slot(b"tg:approx:instances"));
    let (from, to) = ((beat + 1) % MASTERS, (beat + 2) % MASTERS);
    reshard(&cluster, from, to, 1500).await;
    cluster.cli(from, &["CONFIG", "RESETSTAT"]);
    let before: Vec<&String> = before_all[from].iter().filter(|k| k.contains("user")).collect();
    let after = cluster.keys(to);
    let moved: Vec<&String> = before.iter().copied().filter(|k| after.contains(k)).collect();
    assert!(!moved.is_empty(), "the reshard moved some buckets");
    assert!(moved.len() < before.len(), "some buckets stayed on master {from}");
    for value in &values {
        assert!(allowed(&one, value).await);
    }
    wait_for("the second increments are written", || async { counted(&cluster) >= 800 }).await;
    let since = SystemTime::now().duration_since(UNIX_EPOCH).expect("clock").as_secs_f64() + 0.5;
    wait_for("a later sync", || async {
        metric(&one, "tollgate_approximate_last_sync_timestamp_seconds ").await >= since
    })
    .await;
    assert_eq!(counted(&cluster), 800, "every increment written once");
    assert!(moved_replies(&cluster, from) >= 1, "the sync followed a MOVED");
    for key in moved {
        assert_eq!(cluster.cli(to, &["HGET", key, "c"]), "2", "{key} on its new master");
    }
    assert_eq!(metric(&one, "tollgate_approximate_syncs_total{result=\"failed\"} ").await, 0.0);
    assert_eq!(failure_decisions(&one).await, 0.0, "a decision came from the failure policy");
    one.running.expect("running").stop().await.expect("stop");
}

/// The master holding the heartbeat key down: the instances keep their `N` (the last
/// known one), and buckets on the healthy masters — held ones and new ones — go on
/// deciding past the staleness limit without the failure policy. Production flags.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_heartbeat_masters_outage_leaves_the_other_masters_deciding() {
    let mut cluster = start_cluster().await;
    let store_timeout = tollgate::app::ServeSettings::new(".".into()).store_timeout;
    let one = spawn_on(&cluster, store_timeout, &[("approx.yaml", POLICY)]).await;
    let two = spawn_on(&cluster, store_timeout, &[("approx.yaml", POLICY)]).await;
    for app in [&one, &two] {
        wait_ready(app).await;
        wait_for("both instances counted", || async {
            metric(app, "tollgate_approximate_instances ").await >= 2.0
        })
        .await;
    }
    let heart = cluster.owner_of(tollgate::store::cluster::key_slot(b"tg:approx:instances"));
    // Keys on every master; charged once each so that both instances hold them.
    let values = spread("hb", 60);
    for value in &values {
        assert!(allowed(&one, value).await);
        assert!(allowed(&two, value).await);
    }
    wait_for("the increments are written", || async { counted(&cluster) >= 120 }).await;
    let on = |value: &str| {
        let suffix = format!("{}:{value}", value.len());
        (0..MASTERS).find(|&i| cluster.keys(i).iter().any(|k| k.ends_with(&suffix)))
    };
    let healthy: Vec<String> = values.iter().filter(|v| on(v).is_some_and(|m| m != heart)).cloned().collect();
    assert!(!healthy.is_empty(), "some keys live on the other masters");
    // The bucket key of any value: a written key with its value part replaced.
    let sample = format!("{}:{}", healthy[0].len(), healthy[0]);
    let written = (0..MASTERS).flat_map(|i| cluster.keys(i)).find(|k| k.ends_with(&sample)).expect("written");
    let stem = written[..written.len() - sample.len()].to_string();
    let slot_of =
        |value: &str| tollgate::store::cluster::key_slot(format!("{stem}{}:{value}", value.len()).as_bytes());
    cluster.kill(heart);
    let down = Instant::now();
    let staleness = Duration::from_secs(10);
    let mut fresh = 0;
    while down.elapsed() < staleness + Duration::from_secs(2) {
        for value in &healthy {
            assert!(allowed(&one, value).await, "{value}: a healthy master's bucket was refused");
        }
        // New buckets on the healthy masters too.
        let value = format!("fresh-{fresh}");
        fresh += 1;
        if cluster.owner_of(slot_of(&value)) != heart {
            assert!(allowed(&two, &value).await, "{value}: a new bucket on a healthy master was refused");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for value in &healthy {
        assert!(allowed(&one, value).await, "{value}: past the staleness limit");
    }
    for app in [&one, &two] {
        assert_eq!(metric(app, "tollgate_approximate_instances ").await, 2.0, "N fell back");
    }
    // Only the dead master's buckets may have been handed to the failure policy.
    assert_eq!(
        failure_decisions(&one).await,
        metric(&one, "tollgate_approximate_stale_decisions_total ").await
    );
    for app in [one, two] {
        app.running.expect("running").stop().await.expect("stop");
    }
}
