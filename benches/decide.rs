//! One whole decision without gRPC: `RateLimiter::decide` on the memory store (validate
//! excluded) for 1, 4 and 16 descriptors — plan, charge, respond and metrics together, the
//! per-request cost the memory store adds to the null RLS.

mod common;

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use tollgate::service::{RateLimitRequest, RateLimiter, Settings};
use tollgate::sources::serving::Live;
use tollgate::store::{MemoryStore, Store};
use tollgate::telemetry::metrics::Metrics;

const POLICY: &str = "domain: bench\ndescriptors:\n  - key: user\n    \
                      rate_limit: { unit: hour, requests_per_unit: 1, burst: 100000 }\n";

fn decide(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("bench.yaml"), POLICY).expect("policy");
    let metrics = Arc::new(Metrics::new());
    let live = Arc::new(Live::load_initial(dir.path(), metrics.clone()).expect("config"));
    let store = Arc::new(Store::Memory(MemoryStore::new(1_000_000)));
    let limiter = RateLimiter::new(live, store, metrics, Settings::default());
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let mut group = c.benchmark_group("decide_memory");
    for n in [1usize, 4, 16] {
        // 64 requests over 10,000 keys, cycled: the buckets stay warm but not one hot line.
        let requests: Vec<RateLimitRequest> = (0..64)
            .map(|r| RateLimitRequest {
                domain: "bench".into(),
                descriptors: (0..n)
                    .map(|d| common::descriptor(&[("user", &format!("k{}", (r * 157 + d * 7919) % 10_000))]))
                    .collect(),
                hits_addend: 0,
            })
            .collect();
        let mut i = 0;
        group.bench_function(BenchmarkId::from_parameter(n), |b| {
            b.iter(|| {
                i = (i + 1) % requests.len();
                let deadline = tokio::time::Instant::now() + Duration::from_millis(50);
                runtime.block_on(limiter.decide(black_box(&requests[i]), deadline))
            })
        });
    }
    group.finish();
}

criterion_group!(benches, decide);
criterion_main!(benches);
