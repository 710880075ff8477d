//! Eviction under a key flood: a capped memory store — and the `failure_mode: local`
//! limiter, the same store — must never hand a client a free reset by evicting its
//! exhausted bucket to make room for an attacker's fresh keys (issue #12, item 2).
//!
//! The policy is `config/login.yaml`'s per-address-and-user rule (5/hour; GCRA here, so
//! that no window boundary can fall inside a test). Victim checks and the at-limit flood go
//! through gRPC; the 1,000,000-key flood is charged directly into the server's own store
//! (`Admin::memory`, the store the gRPC path charges) because a debug build needs ~25 s to
//! send it through gRPC.

use std::time::Instant;

use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use tollgate::algorithm::{Algorithm, Hits, Params};
use tollgate::app::StoreKind;
use tollgate::store::{Charge, MemoryStore};

use crate::support::*;

const CAP: usize = 100_000;
/// Keys of flood (b), each charged to its limit.
const FLOOD_B: usize = CAP * 6 / 10;
const LOGIN: [(&str, &str); 1] = [(
    "login.yaml",
    "domain: login\nfailure_mode: local\ndescriptors:\n  - key: remote_address\n    descriptors:\n      - key: username\n        rate_limit: { name: per-ip-user, unit: hour, requests_per_unit: 5 }\n",
)];
/// The rule's numbers, for the keys charged straight into the store.
const RULE: Params = Params {
    algorithm: Algorithm::Gcra,
    limit: 5,
    unit_us: 3_600_000_000,
    burst: 5,
    penalty_us: 0,
    period: None,
};
const AT_LIMIT: &str = "tollgate_memory_at_limit_evictions_total";
const LOSSY: &str = "tollgate_memory_evictions_total{lossy=\"true\"}";

fn attempt(user: &str) -> RateLimitRequest {
    request("login", &[&[("remote_address", "198.51.100.7"), ("username", user)]])
}

/// (a) `keys` fresh keys with one hit each, straight into the store, on the system clock
/// like the server.
fn flood_store(store: &MemoryStore, keys: usize) {
    let mut batch: Vec<Charge> =
        (0..64).map(|_| Charge { key: String::new(), params: RULE, hits: Hits::Consume(1) }).collect();
    for start in (0..keys).step_by(64) {
        for (j, charge) in batch.iter_mut().enumerate() {
            charge.key = format!("flood:a:{:x}", start + j);
        }
        store.charge(&batch);
    }
}

/// (b) `keys` fresh usernames charged to their limit (5 hits each) through gRPC, 64
/// descriptors per request.
async fn flood_grpc_to_limit(app: &TestApp, keys: usize) {
    let names: Vec<String> = (0..keys).map(|i| format!("b{i:x}")).collect();
    for chunk in names.chunks(64) {
        let entries: Vec<[(&str, &str); 2]> =
            chunk.iter().map(|u| [("remote_address", "203.0.113.9"), ("username", u.as_str())]).collect();
        let descriptors: Vec<&[(&str, &str)]> = entries.iter().map(|d| &d[..]).collect();
        let flood = request("login", &descriptors);
        for _ in 0..RULE.limit {
            app.call(flood.clone()).await.expect("flood request answered");
        }
    }
}

async fn metrics_of(app: &TestApp) -> (f64, f64) {
    let text = app.metrics().await;
    let at_limit = metric(&text, AT_LIMIT).expect("at-limit counter exported");
    (at_limit, metric_value(&text, LOSSY))
}

/// The victim uses its 5 guesses, then the two floods; it stays denied throughout and no
/// bucket at its limit is ever evicted.
async fn no_free_reset(app: &TestApp, label: &str) {
    let victim = attempt("alice");
    assert_eq!(app.allowed_of(6, &victim).await, 5, "{label}: 5 guesses, then denied");
    let store = app.running.as_ref().expect("running").admin.memory();
    assert!(store.capacity() < CAP + 1024, "{label}: cap {}", store.capacity());

    let started = Instant::now();
    tokio::task::block_in_place(|| flood_store(store, 1_000_000));
    let took_a = started.elapsed();
    assert!(over(&app.check(victim.clone()).await), "{label}: (a) victim still denied");
    let (at_limit, lossy_a) = metrics_of(app).await;
    assert!(lossy_a >= 800_000.0, "{label}: (a) the flood overflowed the cap: {lossy_a}");
    assert_eq!(at_limit, 0.0, "{label}: (a) no at-limit eviction");

    // (b) 60 % of the cap in exhausted keys (300,000 charged requests), each evicting one
    // of (a)'s: the sharding balances to a few percent, so no shard gets more than ~2/3
    // exhausted, where a sample finds only exhausted buckets with probability < 1e-11.
    let started = Instant::now();
    flood_grpc_to_limit(app, FLOOD_B).await;
    let took_b = started.elapsed();
    assert!(over(&app.check(victim.clone()).await), "{label}: (b) victim still denied");
    let exhausted = request("login", &[&[("remote_address", "203.0.113.9"), ("username", "b0")]]);
    assert!(over(&app.check(exhausted).await), "{label}: (b) the flood keys are at their limit");
    let (at_limit, lossy_b) = metrics_of(app).await;
    assert!(lossy_b - lossy_a >= 55_000.0, "{label}: (b) evicted to make room: {}", lossy_b - lossy_a);
    assert_eq!(at_limit, 0.0, "{label}: (b) no at-limit eviction");
    let keys = store.stats().keys;
    // Figures for docs/reliability.md (`cargo test --test resilience eviction -- --nocapture`).
    println!(
        "figures: {label}: (a) 1,000,000 keys in {took_a:?}, (b) {} keys x 5 in {took_b:?}; \
         {keys} keys, {lossy_b} lossy evictions, {at_limit} at limit",
        FLOOD_B
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_store_flood_gives_no_free_reset() {
    let mut options = Options::new(StoreKind::Memory);
    options.memory_max_keys = CAP;
    let app = spawn_with(options, &LOGIN).await;
    no_free_reset(&app, "memory").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_limiter_flood_gives_no_free_reset() {
    let mut options = Options::new(StoreKind::Redis);
    options.memory_max_keys = CAP;
    options.store_timeout = std::time::Duration::from_millis(100);
    let mut app = spawn_with(options, &LOGIN).await;
    app.redis().stop();
    no_free_reset(&app, "local").await;
    let text = app.metrics().await;
    let local = metric_value(&text, "tollgate_failure_local_decisions_total{domain=\"login\"}");
    assert!(local >= 300_000.0, "the gRPC flood was decided by the local limiter: {local}");
}
