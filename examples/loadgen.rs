//! `loadgen`: a load generator for any Envoy RLS v3 server (`ShouldRateLimit`).
//!
//! `--concurrency` tasks share `--connections` HTTP/2 connections (one tonic channel each)
//! and send requests in a closed loop: each task sends its next request as soon as the
//! previous one is answered. With `--rate R` the loop is open instead: the tasks together
//! send R requests/s on a fixed schedule, and a send that falls more than 2 ms behind its
//! schedule is timed from the *scheduled* time (no coordinated omission). Every request
//! carries `--descriptors` descriptors of one entry `(--key, k<rank below --keys>)`, the
//! rank drawn uniformly, or with `--zipf S` from a Zipf distribution (rank r with
//! probability ∝ 1/(r+1)^S: `k0` is the busiest key) — real traffic is skewed. Draws are
//! deterministic: task i seeds its generator with i and `--seed`. After `--warmup` seconds
//! unrecorded, it measures for `--seconds` and prints requests/s, p50/p99/p99.9/max latency
//! and the OK / OVER_LIMIT / error split (one line of `key=value`, or JSON with `--json`),
//! and `answered`, every request answered including the warm-up (for CPU time per request
//! read from `/proc` around a whole run). `--prefill` first touches every key once.
//! `--redis-url` adds `script_calls_per_request`: the `EVALSHA` + `EVAL` calls that Redis
//! counted (`INFO commandstats`) during the measured window, divided by the requests.
//! `--reserve KEY` sends reservations (docs/envoy.md, "Reserved token budgets"): each task
//! alternates a reserve call (every descriptor gains a last entry `(KEY, <a new id>)`,
//! `--hits-addend` the estimate) and the settle of that reservation (`--settle-hits`, the
//! usage); every call counts as a request.
//!
//! ```sh
//! cargo run --release --example loadgen -- --addr 127.0.0.1:8081 --domain bench \
//!     --keys 10000 --descriptors 1 --concurrency 64 --connections 4 --seconds 10
//! cargo run --release --example loadgen -- --domain bench --keys 100000 --zipf 1.1
//! ```

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tokio::time::Instant;
use tonic::transport::{Channel, Endpoint};

/// How late tokio's timer (1 ms wheel) may wake an open-loop sender without that counting
/// as the generator falling behind.
const TIMER_SLACK: Duration = Duration::from_millis(2);

#[derive(Debug, Clone, Parser)]
#[command(about = "Closed-loop (or fixed-rate) load generator for Envoy RLS v3 servers")]
struct Args {
    /// Server address, `host:port` or `http://host:port`.
    #[arg(long, default_value = "127.0.0.1:8081")]
    addr: String,
    #[arg(long, default_value = "bench")]
    domain: String,
    /// The descriptor entry's key.
    #[arg(long, default_value = "user")]
    key: String,
    /// Distinct values the entry takes (random: uniform, or see --zipf).
    #[arg(long, default_value_t = 10_000)]
    keys: u64,
    /// Draw key ranks from a Zipf distribution of exponent S over --keys (rank r with
    /// probability proportional to 1/(r+1)^S; k0 busiest) instead of uniformly.
    #[arg(long, value_name = "S")]
    zipf: Option<f64>,
    /// Mixed into every task's random seed (runs with the same seed draw the same keys).
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Descriptors per request (each its own random value).
    #[arg(long, default_value_t = 1)]
    descriptors: usize,
    /// Requests in flight (closed loop) or sending tasks (--rate).
    #[arg(long, default_value_t = 64)]
    concurrency: usize,
    /// HTTP/2 connections shared by the tasks.
    #[arg(long, default_value_t = 4)]
    connections: usize,
    /// Measured duration.
    #[arg(long, default_value_t = 10.0)]
    seconds: f64,
    /// Unrecorded run before measuring.
    #[arg(long, default_value_t = 2.0)]
    warmup: f64,
    /// Open loop: total requests per second, on a fixed schedule.
    #[arg(long)]
    rate: Option<f64>,
    /// The request's `hits_addend` (0 means 1 to the server).
    #[arg(long, default_value_t = 0)]
    hits_addend: u32,
    /// Sends `grpc-timeout` with every request (Envoy sends 20 ms).
    #[arg(long)]
    timeout_ms: Option<u64>,
    /// Tokio worker threads of the generator itself (default: one per core).
    #[arg(long)]
    threads: Option<usize>,
    /// Before the warmup, touch every key once (so `--keys 1000000` means a million live
    /// buckets, not the share a short run happens to reach).
    #[arg(long)]
    prefill: bool,
    /// The Redis the server uses: print its script calls per request in the window.
    #[arg(long)]
    redis_url: Option<String>,
    /// Print one JSON object instead of `key=value`.
    #[arg(long)]
    json: bool,
    /// Alternate reserve and settle calls naming reservations by this entry key (the
    /// domain's `reservations.key`).
    #[arg(long, value_name = "KEY")]
    reserve: Option<String>,
    /// With --reserve: the settle call's `hits_addend` (the usage).
    #[arg(long, default_value_t = 1)]
    settle_hits: u32,
}

/// What one task saw in the measured window.
#[derive(Debug, Default)]
struct Tally {
    latencies_us: Vec<u32>,
    ok: u64,
    over_limit: u64,
    other_code: u64,
    errors: u64,
    /// Answers of the whole run, warm-up included.
    answered: u64,
    first_error: Option<String>,
}

impl Tally {
    fn merge(&mut self, other: Tally) {
        self.latencies_us.extend(other.latencies_us);
        self.ok += other.ok;
        self.over_limit += other.over_limit;
        self.other_code += other.other_code;
        self.errors += other.errors;
        self.answered += other.answered;
        self.first_error = self.first_error.take().or(other.first_error);
    }
}

/// The phases every task follows.
#[derive(Debug, Clone, Copy)]
struct Window {
    measure_from: Instant,
    end: Instant,
    /// Open loop: the interval between one task's sends.
    period: Option<Duration>,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    anyhow::ensure!(args.keys > 0 && args.descriptors > 0, "--keys and --descriptors must be > 0");
    anyhow::ensure!(args.concurrency > 0 && args.connections > 0, "--concurrency and --connections > 0");
    anyhow::ensure!(args.zipf.is_none_or(|s| s.is_finite() && s > 0.0), "--zipf must be > 0");
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = args.threads {
        runtime.worker_threads(n);
    }
    runtime.enable_all().build()?.block_on(run(args))
}

async fn run(args: Args) -> anyhow::Result<()> {
    let uri = if args.addr.contains("://") { args.addr.clone() } else { format!("http://{}", args.addr) };
    let mut channels = Vec::with_capacity(args.connections);
    for _ in 0..args.connections {
        channels.push(Endpoint::from_shared(uri.clone())?.tcp_nodelay(true).connect().await?);
    }
    let ranks = Arc::new(Ranks::new(&args));
    let args = Arc::new(args);
    probe(&channels, &args).await?;
    if args.prefill {
        prefill(&channels, &args).await?;
    }
    let start = Instant::now() + Duration::from_millis(50);
    let measure_from = start + Duration::from_secs_f64(args.warmup);
    let window = Window {
        measure_from,
        end: measure_from + Duration::from_secs_f64(args.seconds),
        period: args.rate.map(|r| Duration::from_secs_f64(args.concurrency as f64 / r)),
    };
    let mut tasks = Vec::with_capacity(args.concurrency);
    for i in 0..args.concurrency {
        let client = RateLimitServiceClient::new(channels[i % channels.len()].clone());
        let offset = window.period.map_or(Duration::ZERO, |p| p.mul_f64(i as f64 / args.concurrency as f64));
        let seed = (i as u64) ^ args.seed.rotate_left(32);
        tasks.push(tokio::spawn(task(client, args.clone(), ranks.clone(), window, start + offset, seed)));
    }
    let calls = args.redis_url.clone().map(|url| tokio::spawn(script_calls_in(url, window)));
    let mut total = Tally::default();
    for t in tasks {
        total.merge(t.await?);
    }
    let calls = match calls {
        Some(task) => Some(task.await??),
        None => None,
    };
    report(&args, total, calls);
    Ok(())
}

/// The script calls Redis ran between `window.measure_from` and `window.end`.
async fn script_calls_in(url: String, window: Window) -> anyhow::Result<u64> {
    let mut con = redis::Client::open(url)?.get_multiplexed_async_connection().await?;
    tokio::time::sleep_until(window.measure_from).await;
    let before = script_calls(&mut con).await?;
    tokio::time::sleep_until(window.end).await;
    Ok(script_calls(&mut con).await?.saturating_sub(before))
}

/// `EVALSHA` + `EVAL` calls since Redis started (`INFO commandstats`).
async fn script_calls(con: &mut redis::aio::MultiplexedConnection) -> anyhow::Result<u64> {
    let info: String = redis::cmd("INFO").arg("commandstats").query_async(con).await?;
    let calls = |name: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| rest.split(',').next())
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or(0)
    };
    Ok(calls("cmdstat_evalsha:calls=") + calls("cmdstat_eval:calls="))
}

/// One sender: closed loop, or every `window.period` from `first` (open loop).
async fn task(
    mut client: RateLimitServiceClient<Channel>,
    args: Arc<Args>,
    ranks: Arc<Ranks>,
    window: Window,
    first: Instant,
    seed: u64,
) -> Tally {
    let mut rng = SmallRng::seed_from_u64(seed ^ 0x9e37_79b9_7f4a_7c15);
    let mut tally = Tally::default();
    let mut next = first;
    // --reserve: the reservation the next call settles, and how many were made.
    let (mut pending, mut made) = (None::<RateLimitRequest>, 0u64);
    tokio::time::sleep_until(first).await;
    loop {
        let scheduled = match window.period {
            Some(period) => {
                tokio::time::sleep_until(next).await;
                let at = next;
                next += period;
                at
            }
            None => Instant::now(),
        };
        if scheduled >= window.end {
            return tally;
        }
        let message = match (&args.reserve, pending.take()) {
            (None, _) => build(&args, &ranks, &mut rng),
            (Some(_), Some(mut reserved)) => {
                reserved.hits_addend = args.settle_hits;
                reserved
            }
            (Some(key), None) => {
                made += 1;
                let reserve = reservation(build(&args, &ranks, &mut rng), key, &format!("{seed:x}-{made}"));
                pending = Some(reserve.clone());
                reserve
            }
        };
        let mut request = tonic::Request::new(message);
        if let Some(ms) = args.timeout_ms {
            request.set_timeout(Duration::from_millis(ms));
        }
        let sent = Instant::now();
        let result = client.should_rate_limit(request).await;
        tally.answered += 1;
        if scheduled < window.measure_from {
            continue;
        }
        // Open loop: a send later than the timer's slack means the generator fell behind,
        // and that wait counts (no coordinated omission); within the slack it is the
        // timer's 1 ms granularity, not the server, and does not.
        let from = if sent.duration_since(scheduled) > TIMER_SLACK { scheduled } else { sent };
        let micros = from.elapsed().as_micros().min(u128::from(u32::MAX)) as u32;
        tally.latencies_us.push(micros);
        match result {
            Ok(response) => match Code::try_from(response.get_ref().overall_code) {
                Ok(Code::Ok) => tally.ok += 1,
                Ok(Code::OverLimit) => tally.over_limit += 1,
                _ => tally.other_code += 1,
            },
            Err(status) => {
                tally.errors += 1;
                tally.first_error.get_or_insert_with(|| status.to_string());
            }
        }
    }
}

/// One request per connection, one at a time, before any load: fails fast with a clear
/// error if the server does not answer, and lets it open its store connections (and load
/// its scripts) before a burst of concurrent first requests could time out on them.
async fn probe(channels: &[Channel], args: &Args) -> anyhow::Result<()> {
    for channel in channels {
        let mut client = RateLimitServiceClient::new(channel.clone());
        let values = std::iter::once("k0".to_string());
        client.should_rate_limit(request(args, values)).await?;
    }
    Ok(())
}

/// Sends every key once, `--descriptors` consecutive keys per request, `--concurrency` at a
/// time; stops at the first gRPC error.
async fn prefill(channels: &[Channel], args: &Arc<Args>) -> anyhow::Result<()> {
    let started = Instant::now();
    let next = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::with_capacity(args.concurrency);
    for i in 0..args.concurrency {
        let mut client = RateLimitServiceClient::new(channels[i % channels.len()].clone());
        let (args, next) = (args.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            let d = args.descriptors as u64;
            loop {
                let first = next.fetch_add(d, Ordering::Relaxed);
                if first >= args.keys {
                    return Ok::<(), tonic::Status>(());
                }
                let values = (first..(first + d).min(args.keys)).map(|k| format!("k{k}"));
                client.should_rate_limit(request(&args, values)).await?;
            }
        }));
    }
    for task in tasks {
        task.await??;
    }
    eprintln!("prefilled {} keys in {:.1}s", args.keys, started.elapsed().as_secs_f64());
    Ok(())
}

/// How key ranks are drawn.
#[derive(Debug)]
enum Ranks {
    Uniform(u64),
    /// The cumulative weights of ranks 0..keys (searched with one uniform draw).
    Zipf(Vec<f64>),
}

impl Ranks {
    fn new(args: &Args) -> Ranks {
        let Some(s) = args.zipf else { return Ranks::Uniform(args.keys) };
        let mut sum = 0.0;
        Ranks::Zipf(
            (1..=args.keys)
                .map(|rank| {
                    sum += (rank as f64).powf(-s);
                    sum
                })
                .collect(),
        )
    }

    fn draw(&self, rng: &mut SmallRng) -> u64 {
        match self {
            Ranks::Uniform(keys) => rng.random_range(0..*keys),
            Ranks::Zipf(cumulative) => {
                let x = rng.random::<f64>() * cumulative.last().copied().unwrap_or(0.0);
                cumulative.partition_point(|c| *c <= x).min(cumulative.len() - 1) as u64
            }
        }
    }
}

fn build(args: &Args, ranks: &Ranks, rng: &mut SmallRng) -> RateLimitRequest {
    request(args, (0..args.descriptors).map(|_| format!("k{}", ranks.draw(rng))))
}

/// `request` with a last entry `(key, <id>-<descriptor index>)` on every descriptor.
fn reservation(mut request: RateLimitRequest, key: &str, id: &str) -> RateLimitRequest {
    for (i, descriptor) in request.descriptors.iter_mut().enumerate() {
        descriptor.entries.push(Entry { key: key.to_string(), value: format!("{id}-{i}") });
    }
    request
}

/// A request with one single-entry descriptor per value.
fn request(args: &Args, values: impl Iterator<Item = String>) -> RateLimitRequest {
    let descriptors = values
        .map(|value| RateLimitDescriptor {
            entries: vec![Entry { key: args.key.clone(), value }],
            ..Default::default()
        })
        .collect();
    RateLimitRequest { domain: args.domain.clone(), descriptors, hits_addend: args.hits_addend }
}

/// The latency at quantile `q` of sorted samples (µs).
fn quantile(sorted: &[u32], q: f64) -> u32 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

fn report(args: &Args, mut total: Tally, script_calls: Option<u64>) {
    total.latencies_us.sort_unstable();
    let l = &total.latencies_us;
    let requests = l.len() as u64;
    let rps = requests as f64 / args.seconds;
    let (p50, p99, p999) = (quantile(l, 0.50), quantile(l, 0.99), quantile(l, 0.999));
    let max = l.last().copied().unwrap_or(0);
    let mode = args.rate.map_or_else(|| "closed".to_string(), |r| format!("rate={r}"));
    let keys_drawn = args.zipf.map_or_else(|| "uniform".to_string(), |s| format!("zipf{s}"));
    // One list of fields for both formats; `true` marks the strings JSON must quote.
    let mut fields: Vec<(&str, String, bool)> = vec![
        ("addr", args.addr.clone(), true),
        ("mode", mode, true),
        ("keys", args.keys.to_string(), false),
        ("draw", keys_drawn, true),
        ("descriptors", args.descriptors.to_string(), false),
        ("concurrency", args.concurrency.to_string(), false),
        ("connections", args.connections.to_string(), false),
        ("seconds", args.seconds.to_string(), false),
        ("requests", requests.to_string(), false),
        ("rps", format!("{rps:.0}"), false),
        ("p50_us", p50.to_string(), false),
        ("p99_us", p99.to_string(), false),
        ("p999_us", p999.to_string(), false),
        ("max_us", max.to_string(), false),
        ("ok", total.ok.to_string(), false),
        ("over_limit", total.over_limit.to_string(), false),
        ("other_code", total.other_code.to_string(), false),
        ("errors", total.errors.to_string(), false),
        ("answered", total.answered.to_string(), false),
    ];
    if let Some(calls) = script_calls {
        let per_request = if requests == 0 { 0.0 } else { calls as f64 / requests as f64 };
        fields.push(("script_calls", calls.to_string(), false));
        fields.push(("script_calls_per_request", format!("{per_request:.3}"), false));
    }
    let line: Vec<String> = if args.json {
        fields
            .iter()
            .map(|(k, v, quoted)| if *quoted { format!("\"{k}\":\"{v}\"") } else { format!("\"{k}\":{v}") })
            .collect()
    } else {
        fields.iter().map(|(k, v, _)| format!("{k}={v}")).collect()
    };
    if args.json {
        println!("{{{}}}", line.join(","));
    } else {
        println!("{}", line.join(" "));
    }
    if let Some(e) = total.first_error {
        eprintln!("first error: {e}");
    }
}
