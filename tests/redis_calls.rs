//! Counts what Tollgate asks Redis: one `EVALSHA` per charged descriptor, one round trip per
//! request, and a flood on one over-limit key answered locally (Redis calls stay flat).
//!
//! Calls are counted with `INFO commandstats` (`cmdstat_evalsha:calls=`) and round trips
//! with `INFO stats` `total_reads_processed`: Redis reads a pipeline that arrives in one
//! write in one read event, so a request whose descriptors went out in one pipeline adds
//! one read, and one that awaited each descriptor would add one per descriptor. Requests
//! are sent one at a time so no two can share a read. Counters are compared as deltas over
//! a persistent connection (whose own `INFO` adds exactly one read).

#[allow(dead_code)]
#[path = "support/redis.rs"]
mod redis_support;

use std::time::Duration;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use redis_support::RedisServer;
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
"#;

struct App {
    _running: Running,
    client: RateLimitServiceClient<Channel>,
    redis: RedisServer,
    info: redis::Connection,
    _config: tempfile::TempDir,
}

async fn spawn() -> App {
    let config = tempfile::tempdir().expect("tempdir");
    std::fs::write(config.path().join("calls.yaml"), POLICY).expect("write policy");
    let redis = RedisServer::start();
    let mut settings = ServeSettings::new(config.path().to_path_buf());
    settings.store = StoreKind::Redis;
    settings.redis = RedisSettings::new(redis.url());
    // Generous: an exact count must not see a timed-out call that still ran.
    settings.store_timeout = Duration::from_secs(2);
    settings.grpc_addr = "127.0.0.1:0".parse().expect("addr");
    settings.admin_addr = "127.0.0.1:0".parse().expect("addr");
    settings.drain = Duration::ZERO;
    settings.watch_config = false;
    let running = tollgate::app::spawn(settings).await.expect("app starts");
    let client =
        RateLimitServiceClient::connect(format!("http://{}", running.grpc_addr)).await.expect("connect");
    let info = redis.client();
    App { _running: running, client, redis, info, _config: config }
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

/// Counters read over one persistent connection.
#[derive(Debug, Clone, Copy)]
struct Counters {
    evalsha: u64,
    eval: u64,
    reads: u64,
}

impl App {
    async fn check(&self, request: RateLimitRequest) -> RateLimitResponse {
        self.client.clone().should_rate_limit(request).await.expect("grpc call").into_inner()
    }

    fn counters(&mut self) -> Counters {
        let stats: String = redis::cmd("INFO").arg("all").query(&mut self.info).expect("INFO");
        Counters {
            evalsha: command_calls(&stats, "evalsha"),
            eval: command_calls(&stats, "eval"),
            reads: field(&stats, "total_reads_processed:").expect("INFO stats has total_reads_processed"),
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

/// Sends a few requests so that both shared connections are open and the scripts loaded.
async fn warm_up(app: &App) {
    for i in 0..4 {
        let response = app.check(request("user", &["warm", &format!("w{i}")])).await;
        assert_eq!(response.overall_code, Code::Ok as i32);
    }
}

/// The measure itself: 4 commands one by one are 4 reads, pipelined they are 1.
fn assert_reads_count_round_trips(app: &mut App) {
    let mut raw = app.redis.client();
    let before = app.counters().reads;
    for _ in 0..4 {
        let _: () = redis::cmd("SET").arg("probe").arg(1).query(&mut raw).expect("SET");
    }
    let one_by_one = app.counters().reads - before;
    let mut pipe = redis::pipe();
    for _ in 0..4 {
        pipe.cmd("SET").arg("probe").arg(1).ignore();
    }
    let before = app.counters().reads;
    let _: () = pipe.query(&mut raw).expect("pipeline");
    let pipelined = app.counters().reads - before;
    // Each delta includes the INFO that read it.
    assert_eq!((one_by_one, pipelined), (5, 2), "total_reads_processed counts round trips");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_evalsha_per_descriptor_and_one_round_trip_per_request() {
    let mut app = spawn().await;
    warm_up(&app).await;
    assert_reads_count_round_trips(&mut app);
    for descriptors in [1usize, 4, 16] {
        let n = 50;
        let before = app.counters();
        for i in 0..n {
            let values: Vec<String> = (0..descriptors).map(|d| format!("u{i}-{d}")).collect();
            let values: Vec<&str> = values.iter().map(String::as_str).collect();
            let response = app.check(request("user", &values)).await;
            assert_eq!(response.overall_code, Code::Ok as i32);
            assert_eq!(response.statuses.len(), descriptors);
        }
        let after = app.counters();
        assert_eq!(after.evalsha - before.evalsha, (n * descriptors) as u64, "one EVALSHA per descriptor");
        assert_eq!(after.eval, before.eval, "scripts were loaded: no EVAL");
        // n pipelines + this INFO. Per-descriptor round trips would be n * descriptors.
        let reads = after.reads - before.reads;
        assert!(reads <= n as u64 + 1, "{descriptors} descriptors: {reads} reads for {n} requests");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_on_one_over_limit_key_is_answered_locally() {
    let mut app = spawn().await;
    warm_up(&app).await;
    let before = app.counters();
    let abuse = request("abuser", &["mallory"]);
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
    // 5 allowed + the first denial; everything after it is answered locally.
    let calls = app.counters().evalsha - before.evalsha;
    assert_eq!(calls, 6, "{calls} EVALSHA for 1000 requests");
    // 5 per hour: the next one passes 12 minutes after the burst; never "retry at once".
    assert!(resets.iter().all(|&s| (1..=720).contains(&s)), "{resets:?}");
    assert!(resets.windows(2).all(|w| w[1] <= w[0]), "the reset counts down");

    // More requests, concurrently: still no more Redis calls.
    let before = app.counters();
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
    assert_eq!(app.counters().evalsha - before.evalsha, 0, "4000 more denials, no Redis call");
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
