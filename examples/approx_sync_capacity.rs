//! `approx_sync_capacity`: how many buckets per second approximate mode's sync writes to one
//! Redis (issue 22, "capacity stated and measured").
//!
//! Fills an approximate table with `--keys` buckets that each have an increment to write
//! (one charge each, sliding window), then runs sync wakes back to back — each at most
//! `MAX_PER_WAKE` buckets, as the server's task sends them — until every bucket is written,
//! and prints buckets per second and Redis's CPU per bucket. The server's own wakes come
//! every half `--sync-interval-ms`, so its capacity is the smaller of this rate and
//! `MAX_PER_WAKE` per half interval.
//!
//! ```sh
//! redis-server --port 6399 --save '' &
//! cargo run --release --example approx_sync_capacity -- --redis redis://127.0.0.1:6399/ --keys 200000
//! ```

use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use tollgate::algorithm::{Algorithm, Hits, Params};
use tollgate::store::approx::sync::{SyncTarget, Wake, MAX_PER_WAKE};
use tollgate::store::approx::ApproxSettings;
use tollgate::store::{Charge, Groups, Guarded, RedisSettings, RedisStore, Store};

#[derive(Debug, Parser)]
struct Args {
    #[arg(long, default_value = "redis://127.0.0.1:6379/")]
    redis: String,
    /// Buckets to write, per round.
    #[arg(long, default_value_t = 200_000)]
    keys: usize,
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// The Redis server's pid, for its CPU per bucket (`/proc/<pid>/stat`).
    #[arg(long)]
    redis_pid: Option<u32>,
}

/// utime + stime of a process, in seconds.
fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = stat.rsplit_once(") ")?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    Some(ticks / 100.0)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let settings =
        ApproxSettings { max_keys: (args.keys * (args.rounds + 1)).max(1024), ..ApproxSettings::default() };
    let client = RedisStore::new(&RedisSettings::new(&args.redis), Duration::from_millis(10))?;
    let store = Arc::new(Store::Redis(Guarded::new(client, None).with_approx(settings)));
    let table = store.approx().expect("a Redis store has a table").clone();
    let via = store.sync_via().expect("a Redis store syncs");
    let target = SyncTarget::new("capacity:");
    let params = Params {
        algorithm: Algorithm::SlidingWindow,
        limit: 1_000_000,
        unit_us: 60_000_000,
        burst: 1_000_000,
        penalty_us: 0,
        period: None,
    };
    println!("keys per round: {}, at most {MAX_PER_WAKE} buckets a wake", args.keys);
    for round in 0..args.rounds {
        let batch: Vec<Charge> = (0..args.keys)
            .map(|i| Charge { key: format!("capacity:tg:w1m:{round}:{i}"), params, hits: Hits::Consume(1) })
            .collect();
        for chunk in batch.chunks(1024) {
            table.charge_groups(chunk, &Groups::each());
        }
        let cpu_before = args.redis_pid.and_then(cpu_seconds);
        let started = Instant::now();
        let (mut sent, mut wakes) = (0, 0);
        while sent < args.keys {
            let n = table.tick(via, &target, Wake::Last, false, MAX_PER_WAKE).await;
            anyhow::ensure!(n > 0, "a wake sent nothing with {} buckets left", args.keys - sent);
            sent += n;
            wakes += 1;
        }
        let elapsed = started.elapsed().as_secs_f64();
        let redis_cpu = match (cpu_before, args.redis_pid.and_then(cpu_seconds)) {
            (Some(a), Some(b)) => format!(", Redis CPU {:.2} µs per bucket", (b - a) * 1e6 / sent as f64),
            _ => String::new(),
        };
        println!(
            "round {round}: {sent} buckets in {wakes} wakes, {elapsed:.3} s: {:.0} buckets/s, {:.1} ms per wake{redis_cpu}",
            sent as f64 / elapsed,
            elapsed * 1e3 / wakes as f64
        );
    }
    Ok(())
}
