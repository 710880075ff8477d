use std::time::Duration;

use tokio::time::Instant;

use super::entry::{Entry, Meter};
use super::table::SHARDS;
use super::*;
use crate::algorithm::{Algorithm, Decision, Params};
use crate::store::charge::StoreError;

const MS: Duration = Duration::from_millis(1);
const HOUR_US: u64 = 3_600_000_000;

fn params(algorithm: Algorithm, limit: u64) -> Params {
    Params { algorithm, limit, unit_us: HOUR_US, burst: limit, penalty_us: 0, period: None }
}

fn gcra(limit: u64) -> Params {
    params(Algorithm::Gcra, limit)
}

fn table(max_keys: usize) -> LeaseTable {
    LeaseTable::new(LeaseSettings { time: 100 * MS, max_keys, ..LeaseSettings::default() })
}

fn allowed(remaining: u64, reset_us: u64) -> Result<Decision, StoreError> {
    Ok(Decision { allowed: true, remaining, reset_us })
}

fn refill(take: Take) -> Refill {
    match take {
        Take::Refill(r) => r,
        other => panic!("expected a refill, got {other:?}"),
    }
}

fn served(take: Take) -> Decision {
    match take {
        Take::Served(d) => d,
        other => panic!("expected a lease answer, got {other:?}"),
    }
}

/// `key` as if it had seen `rate` hits in the previous lease time (no lease yet).
fn warm(t: &LeaseTable, key: &str, p: &Params, rate: u64, now: Instant) {
    let meter = Meter { start: now, current: 0, previous: rate };
    let entry = Entry { params: *p, meter, lease: None, refill: None, hint: None };
    t.shard(key).insert(key.into(), entry);
}

/// A lease of `block` tokens on `key`, granted at `now` (Redis left `remaining`).
fn leased(t: &LeaseTable, key: &str, p: &Params, rate: u64, now: Instant, remaining: u64) -> u64 {
    warm(t, key, p, rate, now);
    let r = refill(t.take(key, p, 1, now, true));
    let block = r.block;
    t.filled(r, now, &allowed(remaining, 1_000_000), now);
    block
}

#[test]
fn a_cold_key_goes_to_redis_and_a_warm_one_takes_its_rate() {
    let t = table(100);
    let now = Instant::now();
    let p = gcra(1_000_000);
    assert!(matches!(t.take("k", &p, 1, now, true), Take::Remote), "one hit: below two per lease time");
    let r = refill(t.take("k", &p, 1, now, true));
    assert_eq!(r.block, 2, "rate × lease time, at least two");
    // Others wait for the block in flight.
    assert!(matches!(t.take("k", &p, 1, now, true), Take::Wait(_)));
    t.filled(r, now, &allowed(500, 7_000), now);
    assert!(t.is_leased("k", now));
    let d = served(t.take("k", &p, 1, now + MS, false));
    assert_eq!(d, Decision { allowed: true, remaining: 501, reset_us: 6_000 }, "Redis's numbers + the lease");
    served(t.take("k", &p, 1, now + MS, true));
    // Empty: the next request takes a block sized by the rate seen (five first looks; a
    // look after a wait is not counted again).
    assert_eq!(refill(t.take("k", &p, 1, now + MS, true)).block, 5);
    assert_eq!(t.stats().served, 2);
}

#[test]
fn a_block_is_at_most_a_tenth_of_the_bucket_and_what_fits() {
    let t = table(100);
    let now = Instant::now();
    let p = gcra(100);
    warm(&t, "k", &p, 50, now);
    assert_eq!(refill(t.take("k", &p, 1, now, true)).block, 10, "a tenth of burst 100");
    // Redis said 3 fit: the next block holds 3 at most.
    let t = table(100);
    warm(&t, "k", &p, 50, now);
    t.learn("k", &p, &allowed(3, 0), now);
    assert_eq!(refill(t.take("k", &p, 1, now, true)).block, 3);
    // A small bucket: two at least; a bucket of one: no lease.
    let t = table(100);
    warm(&t, "s", &gcra(5), 10, now);
    assert_eq!(refill(t.take("s", &gcra(5), 1, now, true)).block, 2);
    warm(&t, "one", &gcra(1), 10, now);
    assert!(matches!(t.take("one", &gcra(1), 1, now, true), Take::Remote));
}

#[test]
fn a_denied_block_sends_singles_until_redis_says_what_fits() {
    let t = table(100);
    let now = Instant::now();
    let p = gcra(100);
    warm(&t, "k", &p, 5, now);
    let r = refill(t.take("k", &p, 1, now, true));
    t.filled(r, now, &Ok(Decision { allowed: false, remaining: 0, reset_us: 9 }), now);
    assert!(!t.is_leased("k", now));
    assert!(matches!(t.take("k", &p, 1, now, false), Take::Remote), "the waiters go alone");
    assert!(matches!(t.take("k", &p, 1, now + MS, true), Take::Remote), "nothing fits for a lease time");
    t.learn("k", &p, &allowed(4, 0), now + 2 * MS);
    assert_eq!(refill(t.take("k", &p, 1, now + 2 * MS, true)).block, 4);
}

#[test]
fn a_lease_is_spent_for_one_lease_time_then_its_tokens_go_back() {
    let t = table(100);
    let now = Instant::now();
    let p = gcra(1_000);
    let block = leased(&t, "k", &p, 8, now, 900);
    assert_eq!(block, 8);
    served(t.take("k", &p, 1, now + 99 * MS, true));
    // Expired: not spent, queued back by the sweeper.
    let later = now + 100 * MS;
    assert!(!t.is_leased("k", later));
    let returns = t.sweep(later, 10, false);
    assert_eq!(returns, [Return { key: "k".into(), params: p, tokens: block - 1, by: None, since: later }]);
    for r in returns {
        t.returned(r, &allowed(0, 0), later);
    }
    assert_eq!(t.stats().tokens_returned, block - 1);
    assert_eq!(t.sweep(later, 10, false), [], "returned once");
}

#[test]
fn the_sweeper_drops_quiet_keys_and_gives_everything_back_at_shutdown() {
    let t = table(100);
    let now = Instant::now();
    let p = gcra(1_000);
    warm(&t, "quiet", &p, 1, now);
    leased(&t, "hot", &p, 4, now, 900);
    assert_eq!(t.len(), 2);
    assert_eq!(t.sweep(now + 250 * MS, 10, false).len(), 1, "the hot key's lease expired");
    assert_eq!(t.sweep(now + 250 * MS, 10, false), []);
    assert_eq!(t.len(), 0, "idle for two lease times: forgotten");
    leased(&t, "hot", &p, 4, now, 900);
    let all = t.sweep(now + MS, 10, true);
    assert_eq!(all.iter().map(|r| r.tokens).sum::<u64>(), 4, "shutdown returns unexpired leases");
}

#[test]
fn a_reload_that_changes_the_params_gives_the_lease_back() {
    let t = table(100);
    let now = Instant::now();
    let old = gcra(1_000);
    let block = leased(&t, "k", &old, 6, now, 900);
    let new = gcra(0);
    assert!(matches!(t.take("k", &new, 1, now + MS, true), Take::Remote), "the new limit decides at once");
    let returns = t.sweep(now + MS, 10, false);
    assert_eq!(
        returns,
        [Return { key: "k".into(), params: old, tokens: block, by: None, since: now + MS }],
        "under the old params"
    );
}

#[test]
fn evicting_a_leased_key_gives_its_tokens_back() {
    // One key per shard: a second key in the same shard evicts the first.
    let t = table(1);
    let now = Instant::now();
    let p = gcra(1_000);
    let block = leased(&t, "k0", &p, 5, now, 900);
    let mut evicted = false;
    for i in 1..200 {
        let key = format!("k{i}");
        let _ = t.take(&key, &p, 1, now, true);
        if !t.is_leased("k0", now) {
            evicted = true;
            break;
        }
    }
    assert!(evicted, "some key shares k0's shard");
    assert!(t.len() <= SHARDS);
    let back: u64 = t.sweep(now, 1000, false).iter().filter(|r| r.key == "k0").map(|r| r.tokens).sum();
    assert_eq!(back, block);
}

#[test]
fn an_answer_for_a_key_dropped_meanwhile_goes_back() {
    let t = table(100);
    let now = Instant::now();
    let p = gcra(1_000);
    warm(&t, "k", &p, 3, now);
    let r = refill(t.take("k", &p, 1, now, true));
    let block = r.block;
    t.drop_key("k", now, false);
    t.filled(r, now, &allowed(10, 10), now);
    assert!(!t.is_leased("k", now));
    let back = t.sweep(now, 10, false);
    assert_eq!(back.iter().map(|r| r.tokens).sum::<u64>(), block);
    // A reset voids a lease (the bucket starts full); a refund gives it back.
    leased(&t, "r", &p, 4, now, 900);
    t.drop_key("r", now, false);
    assert_eq!(t.sweep(now, 10, false), []);
    leased(&t, "g", &p, 4, now, 900);
    t.drop_key("g", now, true);
    assert_eq!(t.sweep(now, 10, false).iter().map(|r| r.tokens).sum::<u64>(), 4);
}

#[test]
fn a_window_lease_ends_with_its_window_and_is_not_returned_into_the_next() {
    let t = table(100);
    let now = Instant::now();
    let p = params(Algorithm::FixedWindow, 1_000);
    warm(&t, "w", &p, 9, now);
    let r = refill(t.take("w", &p, 1, now, true));
    // 50 ms left in the window: the lease ends then, not after 100 ms.
    t.filled(r, now, &allowed(500, 50_000), now);
    served(t.take("w", &p, 1, now + 49 * MS, true));
    assert!(!t.is_leased("w", now + 50 * MS));
    // Past a quarter lease time before the end: the tokens are forfeited, not refunded.
    assert_eq!(t.sweep(now + 50 * MS, 10, false), []);
    assert_eq!(t.stats().tokens_forfeited, 8);
    assert_eq!(t.stats().dropped, Dropped { window_end: 1, ..Dropped::default() });
    // The window's tail (less than a lease time left, known from Redis): no new lease.
    t.learn("w", &p, &allowed(400, 80_000), now + 60 * MS);
    assert!(matches!(t.take("w", &p, 1, now + 60 * MS, true), Take::Remote));
}

#[test]
fn a_window_lease_that_ends_early_is_returned_in_time() {
    let t = table(100);
    let now = Instant::now();
    let p = params(Algorithm::SlidingWindow, 1_000);
    warm(&t, "w", &p, 3, now);
    let r = refill(t.take("w", &p, 1, now, true));
    // Sliding: an allowed answer's reset is the time left plus a whole window.
    t.filled(r, now, &allowed(500, HOUR_US + 600_000_000), now);
    let returns = t.sweep(now + 100 * MS, 10, false);
    assert_eq!(returns.len(), 1);
    let by = returns[0].by.expect("a window return has a last moment");
    assert_eq!(by, now + Duration::from_secs(600) - 25 * MS);
}

mod returns;
