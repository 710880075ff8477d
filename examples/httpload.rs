//! `httpload`: a closed-loop HTTP load generator for an Envoy listener (what
//! `benches/envoy_filters.sh` drives to compare Envoy with no limit filter, the RLS filter
//! and the RLQS filter).
//!
//! `--concurrency` tasks share `--connections` HTTP/2 connections (cleartext, prior
//! knowledge: Envoy's `codec_type: AUTO` detects the preface) and each sends its next `GET`
//! as soon as the previous response has been read to its end. With `--http1` every task has
//! its own HTTP/1.1 keep-alive connection instead (`--connections` is then unused: HTTP/1.1
//! has one request in flight per connection). Every request carries the header `--header`
//! (default `x-user`) with a value `u<rank>`, the rank drawn uniformly below `--users` —
//! one limit bucket per user behind a per-user policy. Draws are deterministic: task i
//! seeds its generator with i and `--seed`.
//!
//! After `--warmup` seconds unrecorded it measures for `--duration` seconds and prints one
//! line of `key=value`: requests/s, p50/p99/p99.9/max latency, the status split (`ok` 2xx,
//! `denied` 429, `other_status`, transport `errors`) and `answered` — every response of the
//! whole run, warm-up included, for CPU time per request read from `/proc` around a run.
//!
//! ```sh
//! cargo run --release --example httpload -- --addr 127.0.0.1:10000 --users 1000 \
//!     --concurrency 64 --connections 4 --duration 10
//! ```

use std::time::Duration;

use clap::Parser;
use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper::client::conn::{http1, http2};
use hyper::Request;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tokio::net::TcpStream;
use tokio::time::Instant;

#[derive(Debug, Clone, Parser)]
#[command(about = "Closed-loop HTTP load generator for an Envoy listener")]
struct Args {
    /// The listener, `host:port`.
    #[arg(long, default_value = "127.0.0.1:10000")]
    addr: String,
    /// The request path.
    #[arg(long, default_value = "/")]
    path: String,
    /// The header that names the user (the bucket key of the limit filters).
    #[arg(long, default_value = "x-user")]
    header: String,
    /// Distinct users (values `u0` … `u<users-1>`, drawn uniformly).
    #[arg(long, default_value_t = 1000)]
    users: u64,
    /// Mixed into every task's random seed (runs with the same seed draw the same users).
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Requests in flight.
    #[arg(long, default_value_t = 64)]
    concurrency: usize,
    /// HTTP/2 connections shared by the tasks (unused with --http1).
    #[arg(long, default_value_t = 4)]
    connections: usize,
    /// HTTP/1.1, one keep-alive connection per task, instead of shared HTTP/2 connections.
    #[arg(long)]
    http1: bool,
    /// Measured duration, seconds.
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
    /// Unrecorded run before measuring, seconds.
    #[arg(long, default_value_t = 1.0)]
    warmup: f64,
    /// Tokio worker threads of the generator itself (default: one per core).
    #[arg(long)]
    threads: Option<usize>,
}

/// What one task saw in the measured window.
#[derive(Debug, Default)]
struct Tally {
    latencies_us: Vec<u32>,
    ok: u64,
    denied: u64,
    other_status: u64,
    errors: u64,
    /// Responses of the whole run, warm-up included.
    answered: u64,
    first_error: Option<String>,
}

impl Tally {
    fn merge(&mut self, other: Tally) {
        self.latencies_us.extend(other.latencies_us);
        self.ok += other.ok;
        self.denied += other.denied;
        self.other_status += other.other_status;
        self.errors += other.errors;
        self.answered += other.answered;
        self.first_error = self.first_error.take().or(other.first_error);
    }

    fn count(&mut self, status: u16) {
        match status {
            200..=299 => self.ok += 1,
            429 => self.denied += 1,
            _ => self.other_status += 1,
        }
    }
}

/// When a task starts recording and when it stops sending.
#[derive(Debug, Clone, Copy)]
struct Window {
    measure_from: Instant,
    end: Instant,
}

/// One way to send a request: a clone of a shared HTTP/2 connection, or a task's own
/// HTTP/1.1 connection.
enum Sender {
    H2(http2::SendRequest<Empty<Bytes>>),
    H1(http1::SendRequest<Empty<Bytes>>),
}

impl Sender {
    /// Sends `request` and reads the whole body; the status, or why there is none.
    async fn send(&mut self, request: Request<Empty<Bytes>>) -> Result<u16, String> {
        let response = match self {
            Sender::H2(s) => s.send_request(request).await,
            Sender::H1(s) => match s.ready().await {
                Ok(()) => s.send_request(request).await,
                Err(e) => Err(e),
            },
        }
        .map_err(|e| e.to_string())?;
        let status = response.status().as_u16();
        // Read to the end: an HTTP/2 stream dropped early is reset (work for Envoy that a
        // real client does not cause), and HTTP/1.1 cannot reuse the connection before.
        response.into_body().collect().await.map_err(|e| e.to_string())?;
        Ok(status)
    }
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    anyhow::ensure!(args.users > 0, "--users must be > 0");
    anyhow::ensure!(args.concurrency > 0 && args.connections > 0, "--concurrency and --connections > 0");
    anyhow::ensure!(args.path.starts_with('/'), "--path must start with /");
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = args.threads {
        runtime.worker_threads(n);
    }
    runtime.enable_all().build()?.block_on(run(args))
}

async fn run(args: Args) -> anyhow::Result<()> {
    let mut senders = Vec::with_capacity(args.concurrency);
    if args.http1 {
        for _ in 0..args.concurrency {
            senders.push(Sender::H1(connect_h1(&args.addr).await?));
        }
    } else {
        let mut shared = Vec::with_capacity(args.connections);
        for _ in 0..args.connections {
            shared.push(connect_h2(&args.addr).await?);
        }
        for i in 0..args.concurrency {
            senders.push(Sender::H2(shared[i % shared.len()].clone()));
        }
    }
    // One request before any load: fails fast with a clear error when nothing answers.
    let status = senders[0].send(request(&args, 0)?).await.map_err(anyhow::Error::msg)?;
    eprintln!("probe: status {status}");
    let start = Instant::now() + Duration::from_millis(50);
    let measure_from = start + Duration::from_secs_f64(args.warmup);
    let window = Window { measure_from, end: measure_from + Duration::from_secs_f64(args.duration) };
    let args = std::sync::Arc::new(args);
    let tasks: Vec<_> = senders
        .into_iter()
        .enumerate()
        .map(|(i, sender)| {
            let seed = (i as u64) ^ args.seed.rotate_left(32);
            tokio::spawn(task(sender, args.clone(), window, start, seed))
        })
        .collect();
    let mut total = Tally::default();
    for t in tasks {
        total.merge(t.await?);
    }
    report(&args, total);
    Ok(())
}

async fn connect_h2(addr: &str) -> anyhow::Result<http2::SendRequest<Empty<Bytes>>> {
    let stream = TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let (sender, connection) = http2::handshake(TokioExecutor::new(), TokioIo::new(stream)).await?;
    tokio::spawn(connection);
    Ok(sender)
}

async fn connect_h1(addr: &str) -> anyhow::Result<http1::SendRequest<Empty<Bytes>>> {
    let stream = TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let (sender, connection) = http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(connection);
    Ok(sender)
}

/// `GET --path` as user `u<rank>`.
fn request(args: &Args, rank: u64) -> anyhow::Result<Request<Empty<Bytes>>> {
    // HTTP/2 takes the authority from the URI; HTTP/1.1 needs a Host header.
    let uri = format!("http://{}{}", args.addr, args.path);
    Ok(Request::get(uri)
        .header(hyper::header::HOST, args.addr.as_str())
        .header(args.header.as_str(), format!("u{rank}"))
        .body(Empty::new())?)
}

/// One closed-loop sender.
async fn task(
    mut sender: Sender,
    args: std::sync::Arc<Args>,
    window: Window,
    start: Instant,
    seed: u64,
) -> Tally {
    let mut rng = SmallRng::seed_from_u64(seed ^ 0x9e37_79b9_7f4a_7c15);
    let mut tally = Tally::default();
    tokio::time::sleep_until(start).await;
    loop {
        let sent = Instant::now();
        if sent >= window.end {
            return tally;
        }
        let result = match request(&args, rng.random_range(0..args.users)) {
            Ok(request) => sender.send(request).await,
            Err(e) => Err(e.to_string()),
        };
        tally.answered += u64::from(result.is_ok());
        if sent < window.measure_from {
            continue;
        }
        tally.latencies_us.push(sent.elapsed().as_micros().min(u128::from(u32::MAX)) as u32);
        match result {
            Ok(status) => tally.count(status),
            Err(e) => {
                tally.errors += 1;
                tally.first_error.get_or_insert(e);
                // A broken connection fails at once: do not spin on it.
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

/// The latency at quantile `q` of sorted samples (µs).
fn quantile(sorted: &[u32], q: f64) -> u32 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

fn report(args: &Args, mut total: Tally) {
    total.latencies_us.sort_unstable();
    let l = &total.latencies_us;
    let requests = l.len() as u64;
    let fields = [
        ("addr", args.addr.clone()),
        ("protocol", if args.http1 { "http1" } else { "http2" }.to_string()),
        ("users", args.users.to_string()),
        ("concurrency", args.concurrency.to_string()),
        ("connections", if args.http1 { args.concurrency } else { args.connections }.to_string()),
        ("seconds", args.duration.to_string()),
        ("requests", requests.to_string()),
        ("rps", format!("{:.0}", requests as f64 / args.duration)),
        ("p50_us", quantile(l, 0.50).to_string()),
        ("p99_us", quantile(l, 0.99).to_string()),
        ("p999_us", quantile(l, 0.999).to_string()),
        ("max_us", l.last().copied().unwrap_or(0).to_string()),
        ("ok", total.ok.to_string()),
        ("denied", total.denied.to_string()),
        ("other_status", total.other_status.to_string()),
        ("errors", total.errors.to_string()),
        ("answered", total.answered.to_string()),
    ];
    let line: Vec<String> = fields.iter().map(|(k, v)| format!("{k}={v}")).collect();
    println!("{}", line.join(" "));
    if let Some(e) = total.first_error {
        eprintln!("first error: {e}");
    }
}
