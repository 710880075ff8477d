//! Descriptor matching and planning: the cost must not grow with the number of rules.
//!
//! `lookup/<rules>`: one two-entry descriptor `(route, /r<i>), (user, alice)` walked through
//! configs of 10, 1,000 and 10,000 rules (routes cycled, so the walk is not one hot path).
//! `plan/<rules>`: the same descriptor through `plan::plan` (lookup + bucket key + charge).
//! `plan_request/<n>`: a request of n `user` descriptors through `plan::plan`.

mod common;

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use tollgate::config::Lookup;
use tollgate::service::plan::plan;

const SIZES: [usize; 3] = [10, 1_000, 10_000];

fn lookup(c: &mut Criterion) {
    let mut group = c.benchmark_group("lookup");
    for rules in SIZES {
        let snapshot = common::snapshot(rules);
        let domain = snapshot.domain("bench").expect("domain");
        let routes: Vec<String> = (0..64).map(|i| format!("/r{}", (i * 7919) % (rules / 2))).collect();
        let mut i = 0;
        group.bench_function(BenchmarkId::from_parameter(rules), |b| {
            b.iter(|| {
                i = (i + 1) % routes.len();
                let entries = [("route", routes[i].as_str()), ("user", "alice")];
                let found = domain.lookup(black_box(entries));
                assert!(matches!(found, Lookup::Rule(_)));
                found
            })
        });
    }
    group.finish();
}

fn planning(c: &mut Criterion) {
    let mut group = c.benchmark_group("plan");
    for rules in SIZES {
        let snapshot = common::snapshot(rules);
        let domain = snapshot.domain("bench").expect("domain");
        let descriptors: Vec<_> = (0..64)
            .map(|i| {
                common::descriptor(&[
                    ("route", &format!("/r{}", (i * 7919) % (rules / 2))),
                    ("user", "alice"),
                ])
            })
            .collect();
        let mut i = 0;
        group.bench_function(BenchmarkId::from_parameter(rules), |b| {
            b.iter(|| {
                i = (i + 1) % descriptors.len();
                plan(domain, black_box(std::slice::from_ref(&descriptors[i])), 0, "")
            })
        });
    }
    group.finish();
}

/// A whole request's plan: 1, 4 and 16 `user` descriptors (lookup, key, charge each).
fn request_plans(c: &mut Criterion) {
    let snapshot = common::snapshot(10);
    let domain = snapshot.domain("bench").expect("domain");
    let mut group = c.benchmark_group("plan_request");
    for n in [1usize, 4, 16] {
        let descriptors = common::user_descriptors(n);
        group.bench_function(BenchmarkId::from_parameter(n), |b| {
            b.iter(|| plan(domain, black_box(&descriptors), 0, ""))
        });
    }
    group.finish();
}

criterion_group!(benches, lookup, planning, request_plans);
criterion_main!(benches);
