//! Bucket key building: a short literal value, a value long enough to be hashed, a
//! two-level key, and a request's `limit` override.

mod common;

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use tollgate::algorithm::Algorithm;
use tollgate::config::{Lookup, Rule, Unit};
use tollgate::store::key::{override_key, rule_key};

fn rule<'a>(snapshot: &'a tollgate::config::Snapshot, entries: &[(&str, &str)]) -> &'a Rule {
    match snapshot.domain("bench").expect("domain").lookup(entries.iter().copied()) {
        Lookup::Rule(rule) => rule,
        other => panic!("fixture does not match a rule: {other:?}"),
    }
}

fn keys(c: &mut Criterion) {
    let snapshot = common::snapshot(10);
    let user = rule(&snapshot, &[("user", "x")]);
    let nested = rule(&snapshot, &[("route", "/r1"), ("user", "x")]);
    let long = "x".repeat(200);
    let mut group = c.benchmark_group("key");
    group.bench_function("short", |b| {
        b.iter(|| {
            let entries = [("user", black_box("alice-0123456789"))];
            rule_key("", "bench", user, Algorithm::Gcra, Unit::Second, entries.into_iter())
        })
    });
    group.bench_function("hashed_200B", |b| {
        b.iter(|| {
            let entries = [("user", black_box(long.as_str()))];
            rule_key("", "bench", user, Algorithm::Gcra, Unit::Second, entries.into_iter())
        })
    });
    group.bench_function("two_levels", |b| {
        b.iter(|| {
            let entries = [("route", black_box("/r1")), ("user", black_box("alice"))];
            rule_key("", "bench", nested, Algorithm::Gcra, Unit::Minute, entries.into_iter())
        })
    });
    group.bench_function("override", |b| {
        b.iter(|| {
            let entries = [("user", black_box("alice-0123456789"))];
            override_key("", "bench", Algorithm::Gcra, Unit::Minute, entries.into_iter())
        })
    });
    group.finish();
}

criterion_group!(benches, keys);
criterion_main!(benches);
