use super::*;
use crate::algorithm::{Algorithm, Hits, Params};

const T0: u64 = 1_700_000_000_000_000;

fn gcra(limit: u64, unit_us: u64) -> Params {
    Params { algorithm: Algorithm::Gcra, limit, unit_us, burst: limit }
}

fn charge(key: &str, params: Params) -> Charge {
    Charge { key: key.into(), params, hits: Hits::Consume(1) }
}

#[test]
fn burst_then_one_per_emission_interval() {
    let store = MemoryStore::new(1000);
    let p = gcra(10, 1_000_000);
    let c = charge("k", p);
    let allowed = (0..11).filter(|_| store.charge_at(&c, T0).allowed).count();
    assert_eq!(allowed, 10);
    assert!(store.charge_at(&c, T0 + 99_999).allowed.eq(&false));
    assert!(store.charge_at(&c, T0 + 100_000).allowed);
    assert!(!store.charge_at(&c, T0 + 100_000).allowed);
}

#[test]
fn buckets_are_independent() {
    let store = MemoryStore::new(1000);
    let p = gcra(1, 60_000_000);
    assert!(store.charge_at(&charge("a", p), T0).allowed);
    assert!(!store.charge_at(&charge("a", p), T0).allowed);
    assert!(store.charge_at(&charge("b", p), T0).allowed);
}

#[test]
fn key_count_never_exceeds_the_cap() {
    let store = MemoryStore::new(4096);
    let p = gcra(10, 3_600_000_000);
    for i in 0..20_000 {
        store.charge_at(&charge(&format!("key-{i}"), p), T0 + i);
    }
    let stats = store.stats();
    assert!(stats.keys <= store.capacity(), "{stats:?}");
    assert!(store.capacity() < 4096 + 1024);
    assert!(stats.lossy_evictions > 0);
}

#[test]
fn expired_state_is_evicted_before_live_state() {
    let store = MemoryStore::new(2048);
    let cap = store.capacity();
    // Fill three quarters with buckets that expire after 1 s (GCRA, 1/s: TAT = now + 1 s).
    let short = gcra(1, 1_000_000);
    for i in 0..cap * 3 / 4 {
        store.charge_at(&charge(&format!("old-{i}"), short), T0);
    }
    // Two seconds later every old bucket is expired: new ones must replace them losslessly.
    // Half the cap again: shards overflow, and only expired state may make room.
    let long = gcra(1, 3_600_000_000);
    for i in 0..cap / 2 {
        store.charge_at(&charge(&format!("new-{i}"), long), T0 + 2_000_000 + i as u64);
    }
    let stats = store.stats();
    assert_eq!(stats.lossy_evictions, 0, "{stats:?}");
    assert!(stats.lossless_evictions > 0, "{stats:?}");
    assert!(stats.keys <= cap);
    // And the new, live buckets kept their state.
    let probe = charge("new-0", long);
    assert!(!store.charge_at(&probe, T0 + 3_000_000).allowed);
}

#[test]
fn denied_requests_keep_the_bucket_and_refunds_delete_full_buckets() {
    let store = MemoryStore::new(100);
    let p = gcra(1, 1_000_000);
    assert!(store.charge_at(&charge("k", p), T0).allowed);
    assert!(!store.charge_at(&charge("k", p), T0).allowed);
    assert_eq!(store.stats().keys, 1);
    let refund = Charge { key: "k".into(), params: p, hits: Hits::Refund(1) };
    assert!(store.charge_at(&refund, T0).allowed);
    assert_eq!(store.stats().keys, 0);
    assert!(store.charge_at(&charge("k", p), T0).allowed);
}

#[test]
fn sweep_removes_only_expired_buckets() {
    let store = MemoryStore::new(100);
    store.charge_at(&charge("short", gcra(1, 1_000_000)), T0);
    store.charge_at(&charge("long", gcra(1, 60_000_000)), T0);
    assert_eq!(store.sweep_expired(T0 + 2_000_000), 1);
    assert_eq!(store.stats().keys, 1);
    assert_eq!(store.stats().lossless_evictions, 1);
}

const HOUR: u64 = 3_600_000_000;

/// Charges `key` `n` times at `now`; returns how many were allowed.
fn charge_n(store: &MemoryStore, key: &str, p: Params, n: u64, now: u64) -> u64 {
    (0..n).filter(|_| store.charge_at(&charge(key, p), now).allowed).count() as u64
}

#[test]
fn a_flood_of_fresh_keys_never_evicts_an_exhausted_bucket() {
    let store = MemoryStore::new(2048);
    let login = gcra(5, HOUR);
    assert_eq!(charge_n(&store, "victim", login, 6, T0), 5);
    // Ten times the cap of fresh keys, one hit each: every shard overflows many times.
    for i in 0..store.capacity() as u64 * 10 {
        store.charge_at(&charge(&format!("flood-{i}"), login), T0 + i);
    }
    let stats = store.stats();
    assert!(stats.lossy_evictions > 0, "{stats:?}");
    assert_eq!(stats.at_limit_evictions, 0, "{stats:?}");
    assert!(!store.charge_at(&charge("victim", login), T0 + HOUR / 10).allowed, "no free reset");
}

#[test]
fn the_least_consumed_bucket_goes_first() {
    let store = MemoryStore::new(64);
    let login = gcra(5, HOUR);
    // A partly used bucket (3 of 5) among buckets with 1 hit each: it survives their churn.
    assert_eq!(charge_n(&store, "three", login, 3, T0), 3);
    for i in 0..store.capacity() as u64 * 20 {
        store.charge_at(&charge(&format!("one-{i}"), login), T0 + i);
    }
    assert_eq!(charge_n(&store, "three", login, 3, T0 + 1_000_000), 2, "its 3 hits still count");
}

#[test]
fn a_store_full_of_exhausted_buckets_counts_the_free_resets() {
    // One shard of 8: once all 8 are at their limit, a 9th key must evict one of them.
    let store = MemoryStore::new(8);
    let p = gcra(1, HOUR);
    for i in 0..9 {
        assert_eq!(charge_n(&store, &format!("k{i}"), p, 2, T0), 1);
    }
    let stats = store.stats();
    assert_eq!((stats.keys, stats.lossy_evictions, stats.at_limit_evictions), (8, 1, 1), "{stats:?}");
}

#[test]
fn eviction_ranks_window_buckets_by_their_count() {
    let store = MemoryStore::new(64);
    let window = Params { algorithm: Algorithm::SlidingWindow, limit: 5, unit_us: HOUR, burst: 0 };
    let start = T0 - T0 % HOUR;
    assert_eq!(charge_n(&store, "victim", window, 5, start), 5);
    for i in 0..store.capacity() as u64 * 20 {
        store.charge_at(&charge(&format!("flood-{i}"), window), start + i);
    }
    assert_eq!(store.stats().at_limit_evictions, 0);
    assert!(!store.charge_at(&charge("victim", window), start + HOUR / 2).allowed);
}

#[test]
fn a_mostly_exhausted_shard_still_evicts_only_buckets_below_their_limit() {
    // One shard, 70 % of it exhausted: a 16-bucket sample is all exhausted 0.3 % of the
    // time (~30 free resets in this flood); the extended look (64) makes that 1e-10.
    let store = MemoryStore::new(1000);
    let login = gcra(5, HOUR);
    let exhausted = store.capacity() * 7 / 10;
    for i in 0..exhausted {
        assert_eq!(charge_n(&store, &format!("done-{i}"), login, 5, T0), 5);
    }
    for i in 0..10_000 {
        store.charge_at(&charge(&format!("flood-{i}"), login), T0 + i);
    }
    let stats = store.stats();
    assert!(stats.lossy_evictions > 9_500, "{stats:?}");
    assert_eq!(stats.at_limit_evictions, 0, "{stats:?}");
}
