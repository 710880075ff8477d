//! `memory_bytes`: resident memory per bucket of the memory store.
//!
//! Inserts `--keys` GCRA buckets (keys shaped like real ones, `tg:g2s:5:bench4:user…`) through
//! `MemoryStore::charge_at` and reports the growth of the resident set (`/proc/self/statm`)
//! divided by the number of keys, with the average key length. Linux only.
//!
//! ```sh
//! cargo run --release --example memory_bytes -- --keys 1000000
//! ```

use clap::Parser;
use tollgate::algorithm::{Algorithm, Hits, Params};
use tollgate::store::{Charge, MemoryStore};

#[derive(Debug, Parser)]
struct Args {
    #[arg(long, default_value_t = 1_000_000)]
    keys: usize,
    /// Extra bytes appended to every value, to see the cost of longer keys.
    #[arg(long, default_value_t = 0)]
    pad: usize,
}

/// Resident set size in bytes.
fn rss() -> anyhow::Result<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm")?;
    let pages: u64 = statm.split_whitespace().nth(1).ok_or_else(|| anyhow::anyhow!("statm"))?.parse()?;
    Ok(pages * 4096)
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let now = 1_700_000_000_000_000;
    let params = Params {
        algorithm: Algorithm::Gcra,
        limit: 1_000,
        unit_us: 60_000_000,
        burst: 1_000,
        penalty_us: 0,
        period: None,
    };
    let pad = "p".repeat(args.pad);
    // Twice the keys: shards are capped one by one, and a full shard evicts before the
    // whole store holds `--keys`. This measures the bytes of live buckets, not eviction.
    let store = MemoryStore::new(args.keys * 2);
    let before = rss()?;
    let mut key_bytes = 0;
    let mut key = String::new();
    for i in 0..args.keys {
        let value = format!("k{i}{pad}");
        key.clear();
        key.push_str(&format!("tg:g2s:5:bench4:user{}:{value}", value.len()));
        key_bytes += key.len();
        let charge = Charge { key: key.clone(), params, hits: Hits::Consume(1) };
        store.charge_at(&charge, now);
    }
    let after = rss()?;
    let stats = store.stats();
    anyhow::ensure!(stats.keys == args.keys, "expected {} keys, the store holds {}", args.keys, stats.keys);
    anyhow::ensure!(stats.lossy_evictions == 0, "{} lossy evictions", stats.lossy_evictions);
    println!(
        "keys={} avg_key_bytes={:.1} rss_growth_bytes={} bytes_per_key={:.1}",
        args.keys,
        key_bytes as f64 / args.keys as f64,
        after - before,
        (after - before) as f64 / args.keys as f64
    );
    Ok(())
}
