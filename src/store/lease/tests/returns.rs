//! The queue of returns: bounded by count, and by age (no credit once the tokens would
//! have refilled anyway); a request out of time spends only what a lease already holds.

use super::*;
use crate::store::lease::refund::refill_time;

const SECOND: Duration = Duration::from_secs(1);

/// A GCRA return of `tokens` queued at `since` (one token refills per second at 3,600 an
/// hour).
fn gcra_return(key: &str, tokens: u64, since: Instant) -> Return {
    Return { key: key.into(), params: gcra(3_600), tokens, by: None, since }
}

#[test]
fn refill_time_is_the_tokens_at_the_limits_rate() {
    assert_eq!(refill_time(&gcra(3_600), 4), 4 * SECOND);
    let per_second = Params {
        algorithm: Algorithm::Gcra,
        limit: 10,
        unit_us: 1_000_000,
        burst: 10,
        penalty_us: 0,
        period: None,
    };
    assert_eq!(refill_time(&per_second, 3), 300 * MS);
    assert_eq!(refill_time(&gcra(0), 5), Duration::ZERO, "a limit of 0 takes nothing back");
    let slowest = Params {
        algorithm: Algorithm::Gcra,
        limit: 1,
        unit_us: u64::MAX,
        burst: 1,
        penalty_us: 0,
        period: None,
    };
    assert_eq!(refill_time(&slowest, u64::MAX), Duration::from_micros(u64::MAX), "saturates");
}

#[test]
fn a_return_the_breaker_refused_is_kept_until_its_tokens_would_have_refilled() {
    let t = table(100);
    let now = Instant::now();
    let p = gcra(3_600);
    let block = leased(&t, "k", &p, 5, now, 900);
    assert_eq!(block, 5);
    served(t.take("k", &p, 1, now + MS, true));
    // The lease ends at 100 ms with 4 unused: they refill in 4 s at the limit's rate.
    let ended = now + 100 * MS;
    let out = t.sweep(ended, 10, false);
    assert_eq!(out, [Return { key: "k".into(), params: p, tokens: 4, by: None, since: ended }]);
    // The breaker is open: refused, queued again, handed out again while in time.
    let open: Result<Decision, StoreError> = Err(StoreError::CircuitOpen);
    for r in out {
        t.returned(r, &open, ended + SECOND);
    }
    assert_eq!(t.pending_returns(), 1);
    let out = t.sweep(ended + 4 * SECOND - MS, 10, false);
    assert_eq!(out.len(), 1, "still in time 1 ms before the 4 s");
    for r in out {
        t.returned(r, &open, ended + 4 * SECOND - MS);
    }
    // Now its tokens have refilled anyway: given up, never sent.
    assert_eq!(t.sweep(ended + 4 * SECOND, 10, false), []);
    let stats = t.stats();
    assert_eq!(stats.dropped, Dropped { refilled: 1, ..Dropped::default() });
    assert_eq!((stats.tokens_forfeited, stats.tokens_returned, stats.returns_queued), (4, 0, 0));
}

#[test]
fn a_refused_return_that_comes_back_late_is_given_up_at_once() {
    let t = table(100);
    let now = Instant::now();
    let overloaded: Result<Decision, StoreError> = Err(StoreError::Overloaded);
    t.returned(gcra_return("k", 2, now), &overloaded, now + 2 * SECOND);
    assert_eq!((t.pending_returns(), t.stats().dropped.refilled), (0, 1));
    // Sent and failed (it may have run): never sent again.
    t.returned(gcra_return("k", 2, now), &Err(StoreError::Timeout), now);
    assert_eq!((t.pending_returns(), t.stats().dropped.failed), (0, 1));
    t.returned(gcra_return("k", 2, now), &allowed(5, 0), now);
    assert_eq!(t.stats().tokens_returned, 2);
}

#[test]
fn the_queue_holds_twice_the_keys_and_gives_up_its_oldest() {
    // 8 keys: at least 16 returns are kept.
    let t = table(8);
    assert_eq!(t.max_returns(), 16);
    let now = Instant::now();
    for i in 0..20 {
        t.queue(gcra_return(&format!("k{i}"), i + 1, now));
    }
    let stats = t.stats();
    assert_eq!(stats.returns_queued, 16);
    assert_eq!(stats.dropped, Dropped { full: 4, ..Dropped::default() });
    assert_eq!(stats.tokens_forfeited, 1 + 2 + 3 + 4, "the four oldest");
    let out = t.sweep(now, 100, false);
    assert_eq!(out.first().map(|r| r.key.as_str()), Some("k4"), "oldest first");
    // The default table: 20,000.
    assert_eq!(LeaseTable::new(LeaseSettings::default()).max_returns(), 2 * LEASE_MAX_KEYS);
}

#[test]
fn a_late_look_spends_a_lease_and_starts_nothing() {
    let t = table(100);
    let now = Instant::now();
    let p = gcra(1_000);
    // Cold or unknown keys: nothing to spend, nothing tracked.
    assert_eq!(t.spend("cold", &p, 1, now), None);
    assert_eq!(t.len(), 0);
    warm(&t, "k", &p, 3, now);
    let r = refill(t.take("k", &p, 1, now, true));
    // The block is in flight: nothing to spend, and the refill stays the key's.
    assert_eq!(t.spend("k", &p, 1, now + MS), None);
    assert!(matches!(t.take("k", &p, 1, now + MS, false), Take::Wait(_)));
    t.filled(r, now, &allowed(500, 7_000), now + 2 * MS);
    let d = t.spend("k", &p, 1, now + 3 * MS).expect("the lease holds 3");
    assert!(d.allowed);
    assert_eq!(t.spend("k", &p, 3, now + 3 * MS), None, "2 left: not enough for 3");
    assert_eq!(t.spend("k", &gcra(7), 1, now + 3 * MS), None, "other params: not this lease");
    assert_eq!(t.spend("k", &p, 1, now + 100 * MS), None, "expired");
    assert_eq!(t.stats().served, 1);
}

#[test]
fn a_lease_retired_after_it_expired_is_aged_from_its_expiry() {
    let t = table(100);
    let now = Instant::now();
    let p = gcra(3_600);
    leased(&t, "k", &p, 5, now, 900);
    // No sweep until a request meets the expired lease 400 ms late.
    let _ = t.take("k", &p, 1, now + 500 * MS, true);
    let out = t.sweep(now + 500 * MS, 10, false);
    assert_eq!(out.iter().map(|r| (r.tokens, r.since)).collect::<Vec<_>>(), [(5, now + 100 * MS)]);
}
