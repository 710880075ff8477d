//! Each algorithm function on a live bucket (allowed and denied), and the memory store's
//! whole charge (shard lock + map + algorithm) on 10k and 1M keys.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use tollgate::algorithm::{self, Algorithm, Hits, Params, State};
use tollgate::store::{Charge, MemoryStore};

const NOW: u64 = 1_700_000_000_000_000;

fn params(algorithm: Algorithm, limit: u64) -> Params {
    Params { algorithm, limit, unit_us: 60_000_000, burst: limit, penalty_us: 0, period: None }
}

fn algorithms(c: &mut Criterion) {
    let mut group = c.benchmark_group("algorithm");
    let gcra_state = Some(State::Gcra { tat: NOW + 30_000_000, rem: 0, until: 0 });
    let window_state =
        Some(State::Window { start: NOW - NOW % 60_000_000, current: 40, previous: 70, until: 0 });
    let cases = [
        ("gcra", Algorithm::Gcra, gcra_state),
        ("sliding_window", Algorithm::SlidingWindow, window_state),
        ("fixed_window", Algorithm::FixedWindow, window_state),
    ];
    for (name, algo, state) in cases {
        for (verdict, limit) in [("allowed", 1_000), ("denied", 50)] {
            let p = params(algo, limit);
            group.bench_function(format!("{name}/{verdict}"), |b| {
                b.iter(|| algorithm::apply(black_box(state), black_box(NOW), &p, Hits::Consume(1)))
            });
        }
    }
    group.finish();
}

fn memory_store(c: &mut Criterion) {
    let mut group = c.benchmark_group("memory_charge");
    for keys in [10_000u64, 1_000_000] {
        let store = MemoryStore::new(keys as usize * 2);
        let p = params(Algorithm::Gcra, 1_000_000_000);
        let charges: Vec<Charge> = (0..keys)
            .map(|i| Charge {
                key: format!("tg:g2s:5:bench4:user{}:k{i}", i.to_string().len() + 1),
                params: p,
                hits: Hits::Consume(1),
            })
            .collect();
        for charge in &charges {
            store.charge_at(charge, NOW);
        }
        let mut i = 0usize;
        group.bench_function(BenchmarkId::from_parameter(keys), |b| {
            b.iter(|| {
                i = (i + 7919) % charges.len();
                store.charge_at(&charges[i], NOW)
            })
        });
    }
    group.finish();
}

criterion_group!(benches, algorithms, memory_store);
criterion_main!(benches);
