//! Both Redis connections re-made at once, over and over: `CLIENT KILL TYPE normal` in a
//! loop under load, on a runtime with more worker threads than cores, at production flags.
//!
//! Issue 23: `Link::lease` held one connection slot's lock while `start_connect` locked
//! another; two workers re-making both connections at once each held the slot the other
//! wanted, for good. The connections were never made again, and every worker that then
//! touched a slot blocked too, up to the whole runtime (admin included): Envoy failed open.
//! The probes and the kills run on this test's own thread, outside the runtime, so that a
//! wedged runtime fails the test instead of hanging it.
//!
//! The deadlock itself needs two preemptions nanoseconds apart (not seen in 16 runs, over
//! 100,000 kill rounds, with the bug put back); the pattern behind it happens at once. Debug
//! builds check the pattern on every slot lock (`src/store/redis/link/held.rs`): with it
//! back, a request's task panics, which this test sees as gRPC errors.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use tollgate::app::StoreKind;

use crate::support::*;

/// How long the connections are killed for, and how often.
const RUN: Duration = Duration::from_secs(10);
/// Every 5 ms: long enough for both connections to be back between kills (faster, the
/// breaker opens and nothing reconnects until its probe), short enough for 1,500 rounds.
const KILL_EVERY: Duration = Duration::from_millis(5);
/// Every `/healthz` probe must be answered within this.
const PROBE_LIMIT: Duration = Duration::from_secs(1);
const PROBE_EVERY: Duration = Duration::from_millis(50);

const POLICY: (&str, &str) = (
    "closed.yaml",
    "domain: closed_d\nfailure_mode: closed\ndescriptors:\n  - key: k\n    rate_limit: { unit: second, requests_per_unit: 1000000000 }\n",
);

/// One `GET /healthz` on a connection of its own, with blocking I/O bounded by `limit`;
/// how long the answer took, or why there was none.
fn probe(addr: SocketAddr, limit: Duration) -> Result<Duration, String> {
    let started = Instant::now();
    let mut stream = TcpStream::connect_timeout(&addr, limit).map_err(|e| format!("connect: {e}"))?;
    stream.set_read_timeout(Some(limit)).map_err(|e| e.to_string())?;
    stream.set_write_timeout(Some(limit)).map_err(|e| e.to_string())?;
    let head = format!("GET /healthz HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(head.as_bytes()).map_err(|e| format!("write: {e}"))?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).map_err(|e| format!("read after {:?}: {e}", started.elapsed()))?;
    let took = started.elapsed();
    if !answer.starts_with(b"HTTP/1.1 200") {
        return Err(format!("answered {:?}", String::from_utf8_lossy(&answer)));
    }
    if took >= limit {
        return Err(format!("answered after {took:?}"));
    }
    Ok(took)
}

#[test]
fn both_connections_killed_in_a_loop_never_wedge_the_runtime() {
    // Eight workers on a 2-core machine: workers are preempted while they hold a slot,
    // which is what turns a lock-order mistake into a deadlock.
    let runtime =
        tokio::runtime::Builder::new_multi_thread().worker_threads(8).enable_all().build().expect("runtime");
    let mut options = Options::new(StoreKind::Redis);
    // Production flags: the default store timeout, reply timeout, breaker and 2 connections.
    options.store_timeout = Duration::from_millis(10);
    let app = runtime.block_on(spawn_with(options, &[POLICY]));
    let admin = app.admin_addr();
    let mut redis = app.redis.as_ref().expect("own redis").client();
    let traffic: Vec<Traffic> = {
        let _inside = runtime.enter();
        (0..4)
            .map(|k| Traffic::start(&app.client, &request("closed_d", &[&[("k", &format!("key{k}"))]]), 16))
            .collect()
    };

    let started = Instant::now();
    let (mut kills, mut probes, mut worst) = (0u64, 0u64, Duration::ZERO);
    // Connections of the app killed in each second of the run (figures).
    let mut killed = vec![0u64; RUN.as_secs() as usize];
    let mut next_probe = started;
    let mut failure = None;
    while started.elapsed() < RUN {
        let n: i64 = redis::cmd("CLIENT")
            .arg("KILL")
            .arg("TYPE")
            .arg("normal")
            .query(&mut redis)
            .expect("CLIENT KILL");
        kills += 1;
        let second = (started.elapsed().as_secs() as usize).min(killed.len() - 1);
        killed[second] += n.max(0) as u64;
        if Instant::now() >= next_probe {
            next_probe += PROBE_EVERY;
            probes += 1;
            match probe(admin, PROBE_LIMIT) {
                Ok(took) => worst = worst.max(took),
                Err(why) => {
                    failure = Some(format!("/healthz probe {probes} at {:?}: {why}", started.elapsed()));
                    break;
                }
            }
        }
        std::thread::sleep(KILL_EVERY);
    }
    println!(
        "figures: {kills} kills, connections killed per second {killed:?}, {probes} probes, worst {worst:?}"
    );
    // Connections are re-made all along: a slot locked for good is not (from then on, its
    // connection is never killed again). Counted per second, not per kill: on a loaded
    // machine requests time out after kills, the breaker opens, and nothing reconnects
    // until its probe (up to 2 s) — a run of the whole suite saw 518 killed in 1,640 kills, some in
    // every second. A slot locked late in the run is caught by "decides again" below.
    let live = killed.iter().filter(|&&n| n > 0).count();
    if failure.is_none() && live < killed.len() / 2 {
        failure = Some(format!("connections stopped being re-made: killed per second {killed:?}"));
    }
    // After the kills, Redis decides again (closed domain: an OK comes from Redis) — within
    // the breaker's longest cool-down (30 s, +20 % jitter) should its probes have met kills.
    // Timed from this thread: a request stuck on a worker blocked for good never returns.
    let (tx, rx) = std::sync::mpsc::channel();
    let client = app.client.clone();
    runtime.spawn(async move {
        let decided = eventually(Duration::from_secs(40), || {
            let mut client = client.clone();
            async move {
                let response = client.should_rate_limit(request("closed_d", &[&[("k", "after")]])).await;
                response.is_ok_and(|r| !over(&r.into_inner()))
            }
        })
        .await;
        let _ = tx.send(decided);
    });
    if failure.is_none() && rx.recv_timeout(Duration::from_secs(45)) != Ok(true) {
        failure = Some("Redis did not decide again within 40 s of the last kill".into());
    }
    if let Some(failure) = failure {
        // Workers may be blocked for good: leave them behind rather than wait for them.
        runtime.shutdown_background();
        std::mem::forget(app);
        panic!("after {kills} kills: {failure}");
    }
    runtime.block_on(async {
        let mut requests = 0;
        for t in traffic {
            let report = t.stop().await;
            assert!(report.errors.is_empty(), "never a gRPC error: {:?}", report.errors.first());
            requests += report.requests;
        }
        assert!(requests > 1_000, "the load ran throughout: {requests}");
    });
}
