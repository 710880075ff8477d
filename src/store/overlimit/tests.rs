use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use super::*;
use crate::algorithm::Algorithm;

const PARAMS: Params = Params {
    algorithm: Algorithm::Gcra,
    limit: 5,
    unit_us: 60_000_000,
    burst: 5,
    penalty_us: 0,
    period: None,
};

fn charge(key: &str, hits: Hits) -> Charge {
    Charge { key: key.into(), params: PARAMS, hits }
}

fn denied(reset_us: u64) -> Result<Decision, StoreError> {
    Ok(Decision { allowed: false, remaining: 0, reset_us })
}

fn allowed() -> Result<Decision, StoreError> {
    Ok(Decision { allowed: true, remaining: 0, reset_us: 0 })
}

/// The hits of the key's entry, if any (expired or not).
fn cached_hits(cache: &OverLimitCache, key: &str) -> Option<u64> {
    cache.shard(cache.hash(key)).get(key).map(|d| d.hits)
}

/// A key whose stripe is not `key`'s.
fn in_another_stripe(cache: &OverLimitCache, key: &str) -> String {
    let stripe = |k: &str| std::ptr::from_ref(cache.stripe(cache.hash(k)));
    (0..1_000).map(|i| format!("o{i}")).find(|o| stripe(o) != stripe(key)).expect("another stripe")
}

#[test]
fn a_denied_consume_is_answered_locally_until_its_reset() {
    let cache = OverLimitCache::new(100);
    let c = charge("k", Hits::Consume(1));
    let sent = Instant::now();
    assert_eq!(cache.answer(&c, sent), None);
    cache.learn(&c, &denied(800_000), sent, cache.epoch());
    assert_eq!(cache.len(), 1);
    let later = sent + Duration::from_millis(200);
    let d = cache.answer(&c, later).expect("answered locally");
    assert_eq!(d, Decision { allowed: false, remaining: 0, reset_us: 600_000 });
    assert_eq!(cache.answer(&c, sent + Duration::from_millis(800)), None, "expired");
    assert!(cache.is_empty(), "an expired entry is dropped when seen");
    assert_eq!(cache.local_answers(), 1);
}

#[test]
fn other_hits_params_peeks_and_refunds_go_to_redis() {
    let cache = OverLimitCache::new(100);
    let sent = Instant::now();
    cache.learn(&charge("k", Hits::Consume(2)), &denied(5_000_000), sent, cache.epoch());
    assert_eq!(cache.answer(&charge("k", Hits::Consume(1)), sent), None);
    assert_eq!(cache.answer(&charge("k", Hits::Peek), sent), None);
    assert_eq!(cache.answer(&charge("k", Hits::Refund(2)), sent), None);
    let raised = Charge { params: Params { limit: 500, ..PARAMS }, ..charge("k", Hits::Consume(2)) };
    assert_eq!(cache.answer(&raised, sent), None);
    assert!(cache.answer(&charge("k", Hits::Consume(2)), sent).is_some());
    cache.learn(&charge("k", Hits::Refund(1)), &Err(StoreError::Timeout), sent, cache.epoch());
    assert!(cache.is_empty(), "a refund clears the entry whatever Redis answered");
}

#[test]
fn an_allowed_answer_clears_and_errors_teach_nothing() {
    let cache = OverLimitCache::new(100);
    let sent = Instant::now();
    let c = charge("k", Hits::Consume(1));
    cache.learn(&c, &Err(StoreError::Timeout), sent, cache.epoch());
    assert!(cache.is_empty());
    cache.learn(&c, &denied(1_000_000), sent, cache.epoch());
    cache.learn(&c, &Ok(Decision { allowed: true, remaining: 3, reset_us: 9 }), sent, cache.epoch());
    assert!(cache.is_empty());
    // An allowed consume is not a refund: a denial in flight is still learned.
    let epoch = cache.epoch();
    cache.learn(&c, &allowed(), sent, cache.epoch());
    cache.learn(&c, &denied(1_000_000), sent, epoch);
    assert_eq!(cached_hits(&cache, "k"), Some(1));
}

#[test]
fn long_denials_are_capped_and_never_overflow() {
    let cache = OverLimitCache::new(100);
    let sent = Instant::now();
    let c = charge("k", Hits::Consume(1));
    cache.learn(&c, &denied(3_600_000_000), sent, cache.epoch());
    let d = cache.answer(&c, sent + Duration::from_millis(900)).expect("still cached");
    assert_eq!(d.reset_us, 3_599_100_000, "the reported reset is Redis's, not the cap");
    assert_eq!(cache.answer(&c, sent + MAX_LOCAL_DENIAL), None);
    // The largest reset cannot overflow the clock: it is cached, capped like the others.
    cache.learn(&c, &denied(u64::MAX), sent, cache.epoch());
    assert!(cache.answer(&c, sent).is_some_and(|d| d.reset_us == u64::MAX));
    assert_eq!(cache.answer(&c, sent + MAX_LOCAL_DENIAL), None);
}

#[test]
fn the_cap_holds_and_expired_entries_go_first() {
    let cache = OverLimitCache::new(32);
    let sent = Instant::now();
    for i in 0..1_000 {
        cache.learn(&charge(&format!("k{i}"), Hits::Consume(1)), &denied(30_000_000), sent, cache.epoch());
    }
    assert!(cache.len() <= 32, "{}", cache.len());
    let total: usize = cache.shards.iter().map(|s| s.lock().map(|m| m.len()).unwrap_or(0)).sum();
    assert_eq!(total, cache.len());
    let mut shard = IndexMap::new();
    let soon = Denial { hits: 1, params: PARAMS, until: sent, expires: sent };
    let late = Denial { expires: sent + Duration::from_secs(9), ..soon };
    shard.insert(Box::<str>::from("late"), late);
    shard.insert(Box::<str>::from("soon"), soon);
    evict_one(&mut shard, sent + Duration::from_secs(1));
    assert!(shard.contains_key("late") && !shard.contains_key("soon"));
}

/// The race of the module doc: A's charge is sent, a refund of the same key runs and its
/// reply is learned, then A's (older) denial arrives.
#[test]
fn a_denial_overtaken_by_a_refund_is_not_learned() {
    let cache = OverLimitCache::new(100);
    let a = charge("k", Hits::Consume(1));
    let sent = Instant::now();
    let a_epoch = cache.epoch();
    // The refund: forgotten before it is sent (as `Guarded` does) and after its reply.
    cache.forget("k");
    let refund_epoch = cache.epoch();
    cache.learn(&charge("k", Hits::Refund(1)), &allowed(), sent, refund_epoch);
    cache.learn(&a, &denied(30_000_000), sent, a_epoch);
    assert_eq!(cache.answer(&a, sent), None, "Redis allows it now: ask Redis");
    assert!(cache.is_empty());
    // A denial sent after the refund's reply is exact, and learned.
    cache.learn(&a, &denied(30_000_000), sent, cache.epoch());
    assert!(cache.answer(&a, sent).is_some());
}

/// The other order: the denial is learned first, then the refund's reply drops it.
#[test]
fn a_denial_learned_before_the_refund_reply_is_dropped_by_it() {
    let cache = OverLimitCache::new(100);
    let a = charge("k", Hits::Consume(1));
    let sent = Instant::now();
    let a_epoch = cache.epoch();
    cache.learn(&a, &denied(30_000_000), sent, a_epoch);
    assert!(cache.answer(&a, sent).is_some());
    cache.learn(&charge("k", Hits::Refund(1)), &allowed(), sent, cache.epoch());
    assert_eq!(cache.answer(&a, sent), None);
}

#[test]
fn a_refund_of_another_key_in_the_stripe_only_skips_caching() {
    let cache = OverLimitCache::with_stripes(100, 1);
    let a = charge("k", Hits::Consume(1));
    let sent = Instant::now();
    cache.learn(&a, &denied(30_000_000), sent, cache.epoch());
    let epoch = cache.epoch();
    cache.learn(&charge("other", Hits::Refund(1)), &allowed(), sent, cache.epoch());
    assert!(cache.answer(&a, sent).is_some(), "a refund of another key does not end k's denial");
    // k's denial in flight across that refund is not learned: k goes back to Redis.
    let b = charge("k", Hits::Consume(2));
    cache.learn(&b, &denied(30_000_000), sent, epoch);
    assert_eq!(cache.answer(&b, sent), None);
    assert!(cache.answer(&a, sent).is_some(), "nor is the existing entry dropped");
    cache.learn(&b, &denied(30_000_000), sent, cache.epoch());
    assert!(cache.answer(&b, sent).is_some());
}

#[test]
fn a_refund_of_another_stripe_does_not_skip_caching() {
    let cache = OverLimitCache::new(100);
    let other = in_another_stripe(&cache, "k");
    let a = charge("k", Hits::Consume(1));
    let sent = Instant::now();
    let epoch = cache.epoch();
    cache.learn(&charge(&other, Hits::Refund(1)), &allowed(), sent, cache.epoch());
    cache.learn(&a, &denied(30_000_000), sent, epoch);
    assert!(cache.answer(&a, sent).is_some());
}

#[test]
fn a_failed_refund_keeps_its_stripe_from_learning_for_the_cap() {
    let cache = OverLimitCache::new(100);
    let sent = Instant::now();
    let a = charge("k", Hits::Consume(1));
    // The refund timed out: Redis may run it later than any reply we see.
    cache.learn(&charge("k", Hits::Refund(1)), &Err(StoreError::Timeout), sent, cache.epoch());
    let later = sent + Duration::from_millis(500);
    cache.learn(&a, &denied(30_000_000), later, cache.epoch());
    assert_eq!(cache.answer(&a, later), None);
    let much_later = sent + MAX_LOCAL_DENIAL;
    cache.learn(&a, &denied(30_000_000), much_later, cache.epoch());
    assert!(cache.answer(&a, much_later).is_some());
    // A refund the breaker stopped was never sent: nothing to wait for.
    let j = in_another_stripe(&cache, "k");
    let b = charge(&j, Hits::Consume(1));
    cache.learn(&charge(&j, Hits::Refund(1)), &Err(StoreError::CircuitOpen), sent, cache.epoch());
    cache.learn(&b, &denied(30_000_000), later, cache.epoch());
    assert!(cache.answer(&b, later).is_some());
}

/// Threads play Redis (one lock per key: a refund numbers the key's generation), clients
/// (a consume Redis denies at generation g is learned as `Consume(g + 1)`, after a random
/// pause) and refunds (forget, Redis, learn). A checker asserts that once refund g has
/// been learned, no entry computed before it (`hits <= g`) is ever cached or answered.
#[test]
fn concurrent_refunds_never_leave_a_denial_older_than_them() {
    const KEYS: usize = 4;
    // Two stripes for four keys: refunds of other keys of the stripe are exercised too.
    let cache = Arc::new(OverLimitCache::with_stripes(1_000, 2));
    let redis: Arc<Vec<Mutex<u64>>> = Arc::new((0..KEYS).map(|_| Mutex::new(0)).collect());
    let learned: Arc<Vec<AtomicU64>> = Arc::new((0..KEYS).map(|_| AtomicU64::new(0)).collect());
    let done = Arc::new(AtomicBool::new(false));
    let key = |k: usize| format!("key{k}");
    let pause = |rng: &mut rand::rngs::ThreadRng| {
        for _ in 0..rng.random_range(0..3) {
            std::thread::yield_now();
        }
    };
    let mut workers = Vec::new();
    for worker in 0..4 {
        let (cache, redis, learned) = (cache.clone(), redis.clone(), learned.clone());
        workers.push(std::thread::spawn(move || {
            let mut rng = rand::rng();
            for _ in 0..5_000 {
                let k = rng.random_range(0..KEYS);
                let refund = worker == 0 || rng.random_bool(0.1);
                if refund && !cache.is_empty() {
                    cache.forget(&key(k));
                }
                let (sent, epoch) = (Instant::now(), cache.epoch());
                let generation = {
                    let mut g = redis[k].lock().unwrap_or_else(|e| e.into_inner());
                    *g += u64::from(refund);
                    *g
                };
                pause(&mut rng);
                if refund {
                    cache.learn(&charge(&key(k), Hits::Refund(1)), &allowed(), sent, epoch);
                    learned[k].fetch_max(generation, Ordering::SeqCst);
                } else {
                    let c = charge(&key(k), Hits::Consume(generation + 1));
                    cache.learn(&c, &denied(30_000_000), sent, epoch);
                }
            }
        }));
    }
    let checker = {
        let (cache, learned, done) = (cache.clone(), learned.clone(), done.clone());
        std::thread::spawn(move || {
            let (mut checks, mut cached) = (0u64, 0u64);
            while !done.load(Ordering::SeqCst) || checks == 0 {
                for k in 0..KEYS {
                    let refunded = learned[k].load(Ordering::SeqCst);
                    let now = Instant::now();
                    let stale = cache.answer(&charge(&key(k), Hits::Consume(refunded.max(1))), now);
                    assert!(
                        stale.is_none() || refunded == 0,
                        "{}: answered a denial older than refund {refunded}",
                        key(k)
                    );
                    if let Some(hits) = cached_hits(&cache, &key(k)) {
                        assert!(
                            hits > refunded,
                            "{}: cached a denial of {hits} after refund {refunded}",
                            key(k)
                        );
                        cached += 1;
                    }
                    checks += 1;
                }
            }
            (checks, cached)
        })
    };
    for worker in workers {
        worker.join().expect("worker");
    }
    done.store(true, Ordering::SeqCst);
    let (checks, cached) = checker.join().expect("checker");
    assert!(cached > 0, "the cache was used at all ({checks} checks)");
    let total: usize = cache.shards.iter().map(|s| s.lock().map(|m| m.len()).unwrap_or(0)).sum();
    assert_eq!(total, cache.len(), "len counts the entries once every insert is done");
}
