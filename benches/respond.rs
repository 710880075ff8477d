//! Response assembly (`respond::respond`) for 1, 4 and 16 charged descriptors.

mod common;

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use tollgate::algorithm::Decision;
use tollgate::config::FailureMode;
use tollgate::service::plan::plan;
use tollgate::service::respond::respond;

fn responses(c: &mut Criterion) {
    let snapshot = common::snapshot(10);
    let domain = snapshot.domain("bench").expect("domain");
    let mut group = c.benchmark_group("respond");
    for n in [1usize, 4, 16] {
        let descriptors = common::user_descriptors(n);
        let (plans, charges, _) = plan(domain, &descriptors, 0, "");
        assert_eq!(charges.len(), n);
        let results: Vec<_> = (0..n as u64)
            .map(|i| Ok(Decision { allowed: i % 5 != 4, remaining: 1_000 - i, reset_us: 1_000_000 + i }))
            .collect();
        group.bench_function(BenchmarkId::from_parameter(n), |b| {
            b.iter(|| respond(black_box(&plans), black_box(&results), FailureMode::Open, 0.8))
        });
    }
    group.finish();
}

criterion_group!(benches, responses);
criterion_main!(benches);
