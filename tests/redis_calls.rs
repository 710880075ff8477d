//! Counts what Tollgate asks Redis: at most one script call (`EVALSHA`) and one round trip
//! per request, whatever its descriptors; fewer calls than requests when requests queue
//! behind calls in flight (batching, `store::redis::batch`); one `EVALSHA` per descriptor
//! with `--no-batch`; and a flood on one over-limit key answered locally (Redis calls stay
//! flat).
//!
//! Calls are counted by Redis (`INFO commandstats`, `cmdstat_evalsha:calls=`, read over a
//! connection of the test's own: only Tollgate sends `EVALSHA`). Round trips are counted by
//! a TCP front between Tollgate and Redis (`support/round_trips.rs`): a burst of bytes
//! Tollgate sends on a connection after bytes came back is one round trip, counted if it
//! carries an `EVALSHA`. Requests are sent one at a time, so a request whose descriptors
//! went out in one pipeline adds exactly one, and one that awaited each descriptor would add
//! one per descriptor. Nothing else moves the count: not how many connections Tollgate
//! opens or when, not what it sends to set them up or check them, not other clients (Redis's
//! own `total_reads_processed`, used before, counted all of these).

#[allow(dead_code)]
#[path = "support/redis.rs"]
mod redis_support;
#[path = "support/round_trips.rs"]
mod round_trips;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use redis_support::RedisServer;
use round_trips::RoundTripFront;
use tollgate::app::{Running, ServeSettings, StoreKind};
use tollgate::store::RedisSettings;
use tonic::transport::Channel;

const POLICY: &str = r#"
domain: calls
descriptors:
  - key: user
    rate_limit: { unit: second, requests_per_unit: 1000000 }
  - key: abuser
    rate_limit: { unit: hour, requests_per_unit: 5 }
  - key: fixed
    rate_limit: { unit: hour, requests_per_unit: 3, algorithm: fixed_window }
  - key: once
    rate_limit: { unit: hour, requests_per_unit: 1 }
"#;

struct App {
    _running: Running,
    client: RateLimitServiceClient<Channel>,
    redis: RedisServer,
    front: RoundTripFront,
    info: redis::Connection,
    _config: tempfile::TempDir,
}

async fn spawn() -> App {
    spawn_with(|_| {}).await
}

/// As [`spawn`], with the settings changed by `tweak` first.
async fn spawn_with(tweak: impl FnOnce(&mut ServeSettings)) -> App {
    let config = tempfile::tempdir().expect("tempdir");
    std::fs::write(config.path().join("calls.yaml"), POLICY).expect("write policy");
    let redis = RedisServer::start();
    let front = RoundTripFront::start(([127, 0, 0, 1], redis.port()).into(), "EVALSHA");
    let mut settings = ServeSettings::new(config.path().to_path_buf());
    settings.store = StoreKind::Redis;
    settings.redis = RedisSettings::new(front.url());
    // Generous: an exact count must not see a timed-out call that still ran.
    settings.store_timeout = Duration::from_secs(2);
    settings.grpc_addr = "127.0.0.1:0".parse().expect("addr");
    settings.admin_addr = "127.0.0.1:0".parse().expect("addr");
    settings.drain = Duration::ZERO;
    settings.watch_config = false;
    tweak(&mut settings);
    let running = tollgate::app::spawn(settings).await.expect("app starts");
    let client =
        RateLimitServiceClient::connect(format!("http://{}", running.grpc_addr)).await.expect("connect");
    let info = redis.client();
    App { _running: running, client, redis, front, info, _config: config }
}

/// A request with one single-entry descriptor per value.
fn request(key: &str, values: &[&str]) -> RateLimitRequest {
    let descriptor = |v: &&str| RateLimitDescriptor {
        entries: vec![Entry { key: key.into(), value: v.to_string() }],
        ..Default::default()
    };
    RateLimitRequest {
        domain: "calls".into(),
        descriptors: values.iter().map(descriptor).collect(),
        hits_addend: 0,
    }
}

/// Calls counted by Redis, round trips counted by the front.
#[derive(Debug, Clone, Copy)]
struct Counters {
    evalsha: u64,
    eval: u64,
    round_trips: u64,
}

impl App {
    async fn check(&self, request: RateLimitRequest) -> RateLimitResponse {
        self.client.clone().should_rate_limit(request).await.expect("grpc call").into_inner()
    }

    fn counters(&mut self) -> Counters {
        let stats: String = redis::cmd("INFO").arg("commandstats").query(&mut self.info).expect("INFO");
        Counters {
            evalsha: command_calls(&stats, "evalsha"),
            eval: command_calls(&stats, "eval"),
            round_trips: self.front.turns(),
        }
    }
}

/// `calls=` of `cmdstat_<name>` (0 before the first call).
fn command_calls(info: &str, name: &str) -> u64 {
    let prefix = format!("cmdstat_{name}:calls=");
    field(info, &prefix).unwrap_or(0)
}

/// The integer right after `prefix` at the start of a line of INFO.
fn field(info: &str, prefix: &str) -> Option<u64> {
    let line = info.lines().find(|l| l.starts_with(prefix))?;
    line[prefix.len()..].split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()
}

/// Sends a few requests first, of one descriptor and of two (each script loaded): the
/// counts start from a store already in use.
async fn warm_up(app: &App) {
    for i in 0..4 {
        let response = app.check(request("user", &["warm", &format!("w{i}")])).await;
        assert_eq!(response.overall_code, Code::Ok as i32);
        let response = app.check(request("user", &[&format!("w{i}")])).await;
        assert_eq!(response.overall_code, Code::Ok as i32);
    }
}

/// The measure itself, through the front with a client of the test's own: set-up and other
/// commands are not counted, 4 `EVALSHA` one by one are 4 round trips, pipelined they are 1.
fn assert_front_counts_round_trips(app: &mut App) {
    let mut raw = redis::Client::open(app.front.url()).expect("url").get_connection().expect("connect");
    let before = app.counters().round_trips;
    let sha: String = redis::cmd("SCRIPT").arg("LOAD").arg("return 1").query(&mut raw).expect("SCRIPT LOAD");
    let _: String = redis::cmd("PING").query(&mut raw).expect("PING");
    let other = app.counters().round_trips - before;
    for _ in 0..4 {
        let _: i64 = redis::cmd("EVALSHA").arg(&sha).arg(0).query(&mut raw).expect("EVALSHA");
    }
    let one_by_one = app.counters().round_trips - before;
    let mut pipe = redis::pipe();
    for _ in 0..4 {
        pipe.cmd("evalsha").arg(&sha).arg(0).ignore();
    }
    let before = app.counters().round_trips;
    let _: () = pipe.query(&mut raw).expect("pipeline");
    let pipelined = app.counters().round_trips - before;
    assert_eq!((other, one_by_one, pipelined), (0, 4, 1), "the front counts round trips carrying EVALSHA");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_script_call_and_one_round_trip_per_request() {
    let mut app = spawn().await;
    warm_up(&app).await;
    assert_front_counts_round_trips(&mut app);
    // What broke the old measure, on purpose: other clients come and go, through the front
    // and straight to Redis, all through the count.
    let noise = Noise::start(&app);
    for descriptors in [1usize, 4, 16] {
        let n = 50;
        let counted = count_requests(&mut app, n, descriptors).await;
        // A request sent alone is one call: its algorithm's script for one descriptor,
        // `batch.lua` for several.
        assert_eq!(counted.evalsha, n as u64, "{descriptors} descriptors: one script call per request");
        assert_eq!(counted.eval, 0, "scripts were loaded: no EVAL");
        // Per-descriptor round trips would be n * descriptors.
        assert_eq!(
            counted.round_trips, n as u64,
            "{descriptors} descriptors: {} round trips for {n} requests",
            counted.round_trips
        );
    }
    assert!(noise.stop() > 0, "the other clients ran during the count");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_batching_one_evalsha_per_descriptor_still_one_round_trip() {
    let mut app = spawn_with(|s| s.redis.batch = false).await;
    warm_up(&app).await;
    for descriptors in [1usize, 4, 16] {
        let n = 30;
        let counted = count_requests(&mut app, n, descriptors).await;
        assert_eq!(counted.evalsha, (n * descriptors) as u64, "--no-batch: one EVALSHA per descriptor");
        assert_eq!(counted.eval, 0, "scripts were loaded: no EVAL");
        assert_eq!(counted.round_trips, n as u64, "{descriptors} descriptors: one pipeline per request");
    }
}

/// Sends `n` requests of `descriptors` fresh descriptors one at a time (each allowed); what
/// the counters moved by.
async fn count_requests(app: &mut App, n: usize, descriptors: usize) -> Counters {
    let before = app.counters();
    for i in 0..n {
        let values: Vec<String> = (0..descriptors).map(|d| format!("u{i}-{d}-of-{descriptors}")).collect();
        let values: Vec<&str> = values.iter().map(String::as_str).collect();
        let response = app.check(request("user", &values)).await;
        assert_eq!(response.overall_code, Code::Ok as i32);
        assert_eq!(response.statuses.len(), descriptors);
    }
    let after = app.counters();
    Counters {
        evalsha: after.evalsha - before.evalsha,
        eval: after.eval - before.eval,
        round_trips: after.round_trips - before.round_trips,
    }
}

/// Requests that find every lane busy (Redis held by a busy script, so the first calls are
/// in flight for its length) queue, and go together when a lane frees: far fewer calls
/// than requests, and every bucket charged exactly once (limit 1: a second charge of any
/// would be denied).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_queued_behind_calls_in_flight_share_one_call() {
    let mut app = spawn_with(|s| s.redis.connections = 1).await;
    warm_up(&app).await;
    let before = app.counters();
    let sleeper = app.redis.url();
    let sleep = std::thread::spawn(move || {
        let mut con = redis::Client::open(sleeper).expect("url").get_connection().expect("connect");
        // A script runs alone: Redis answers nothing else for its 1 s.
        let busy = "local t = redis.call('TIME') local until_us = t[1] * 1000000 + t[2] + 1000000 \
                    repeat t = redis.call('TIME') until t[1] * 1000000 + t[2] >= until_us return 1";
        let _: i64 = redis::cmd("EVAL").arg(busy).arg(0).query(&mut con).expect("busy script");
    });
    // Redis is busy once a PING gets no answer in 50 ms. Bounded: a busy second that ended
    // before this thread looked (a descheduled test thread on a loaded machine) is a failure
    // with a reason, not a loop that never ends.
    let mut probe = app.redis.client();
    probe.set_read_timeout(Some(Duration::from_millis(50))).expect("read timeout");
    while redis::cmd("PING").query::<String>(&mut probe).is_ok() {
        assert!(!sleep.is_finished(), "the busy script ended before a PING saw Redis busy");
    }
    let requests = 48;
    let mut tasks = Vec::new();
    for i in 0..requests {
        let client = app.client.clone();
        let r = request("once", &[&format!("b{i}"), &format!("b{i}-2")]);
        tasks.push(tokio::spawn(async move {
            client.clone().should_rate_limit(r).await.expect("grpc").into_inner()
        }));
    }
    for task in tasks {
        let response = task.await.expect("task");
        assert_eq!(response.overall_code, Code::Ok as i32, "each bucket's first and only charge passes");
    }
    sleep.join().expect("sleeper");
    let calls = app.counters().evalsha - before.evalsha;
    // Two lanes (one connection): two requests go at once, the rest queue; each lane's next
    // call takes up to 64 charges (32 requests of two).
    assert!((2..=6).contains(&calls), "{calls} script calls for {requests} queued requests");
    // Exactly once: a second request on any bucket is denied.
    for i in [0, requests / 2, requests - 1] {
        let again = request("once", &[&format!("b{i}")]);
        assert_eq!(app.check(again).await.overall_code, Code::OverLimit as i32, "b{i} was charged once");
    }
}

/// Unrelated clients: each round opens a connection through the front and one straight to
/// Redis, sends a few commands on each (no `EVALSHA`) and drops them.
struct Noise {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<u64>,
}

impl Noise {
    fn start(app: &App) -> Noise {
        let stop = Arc::new(AtomicBool::new(false));
        let urls = [app.front.url(), app.redis.url()];
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut rounds = 0;
            while !flag.load(Ordering::SeqCst) {
                for url in &urls {
                    let mut conn =
                        redis::Client::open(url.as_str()).expect("url").get_connection().expect("connect");
                    let _: () =
                        redis::cmd("CLIENT").arg("SETNAME").arg("noise").query(&mut conn).expect("SETNAME");
                    let _: String = redis::cmd("PING").query(&mut conn).expect("PING");
                    let _: String = redis::cmd("INFO").arg("stats").query(&mut conn).expect("INFO");
                }
                rounds += 1;
                // Pacing only (nothing waits on it): keep the noise from taking a core.
                std::thread::sleep(Duration::from_millis(2));
            }
            rounds
        });
        Noise { stop, thread }
    }

    /// Stops the clients; how many rounds they made.
    fn stop(self) -> u64 {
        self.stop.store(true, Ordering::SeqCst);
        self.thread.join().expect("noise thread")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_on_one_over_limit_key_is_answered_locally() {
    let mut app = spawn().await;
    warm_up(&app).await;
    let before = app.counters();
    let abuse = request("abuser", &["mallory"]);
    let started = std::time::Instant::now();
    let mut codes = Vec::new();
    let mut resets = Vec::new();
    for _ in 0..1_000 {
        let response = app.check(abuse.clone()).await;
        codes.push(response.overall_code);
        let status = &response.statuses[0];
        if response.overall_code == Code::OverLimit as i32 {
            assert_eq!(status.limit_remaining, 0);
            resets.push(status.duration_until_reset.as_ref().map_or(0, |d| d.seconds));
        }
    }
    let allowed = codes.iter().filter(|&&c| c == Code::Ok as i32).count();
    assert_eq!(allowed, 5, "exactly the limit passes");
    // 5 allowed + the first denial; after it, one Redis call per `MAX_LOCAL_DENIAL` at most
    // (a local denial is answered for 1 s, then Redis is asked again).
    let calls = app.counters().evalsha - before.evalsha;
    let periods = periods_since(started);
    assert!((6..=5 + periods).contains(&calls), "{calls} EVALSHA for 1000 requests in {periods} periods");
    // 5 per hour: the next one passes 12 minutes after the burst; never "retry at once".
    assert!(resets.iter().all(|&s| (1..=720).contains(&s)), "{resets:?}");
    assert!(resets.windows(2).all(|w| w[1] <= w[0]), "the reset counts down");

    // More requests, concurrently: a few Redis calls per period (the requests in flight
    // when an entry expires), not one per request.
    let before = app.counters();
    let started = std::time::Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let client = app.client.clone();
        let abuse = abuse.clone();
        tasks.push(tokio::spawn(async move {
            let mut over = 0;
            for _ in 0..250 {
                let r = client.clone().should_rate_limit(abuse.clone()).await.expect("grpc");
                over += usize::from(r.into_inner().overall_code == Code::OverLimit as i32);
            }
            over
        }));
    }
    let mut over = 0;
    for task in tasks {
        over += task.await.expect("task");
    }
    assert_eq!(over, 4_000);
    let calls = app.counters().evalsha - before.evalsha;
    let periods = periods_since(started);
    // Each expiry (one per period at most) lets through the 16 requests then in flight.
    assert!(calls <= 16 * periods, "4000 more denials: {calls} Redis calls in {periods} periods");
}

/// How many `MAX_LOCAL_DENIAL` periods began since `started`, plus one.
fn periods_since(started: std::time::Instant) -> u64 {
    let cap = tollgate::store::overlimit::MAX_LOCAL_DENIAL.as_millis();
    (started.elapsed().as_millis() / cap) as u64 + 1
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refunds_and_other_keys_still_reach_redis() {
    let mut app = spawn().await;
    warm_up(&app).await;
    let fixed = request("fixed", &["f"]);
    for _ in 0..5 {
        app.check(fixed.clone()).await;
    }
    let before = app.counters();
    // A request with the denied key and a fresh one: only the fresh one goes to Redis.
    let mixed = request("fixed", &["f", "g"]);
    let response = app.check(mixed).await;
    assert_eq!(response.statuses[0].code, Code::OverLimit as i32);
    assert_eq!(response.statuses[1].code, Code::Ok as i32);
    assert_eq!(app.counters().evalsha - before.evalsha, 1);

    // A refund always reaches Redis and ends the local denial.
    let mut refund = fixed.clone();
    refund.descriptors[0].is_negative_hits = true;
    let before = app.counters();
    assert_eq!(app.check(refund).await.overall_code, Code::Ok as i32);
    let response = app.check(fixed.clone()).await;
    assert_eq!(response.overall_code, Code::Ok as i32, "the refunded hit is usable again");
    assert_eq!(response.statuses[0].limit_remaining, 0);
    assert_eq!(app.counters().evalsha - before.evalsha, 2);
    assert!(app.redis.cli(&["PING"]).contains("PONG"));
}
