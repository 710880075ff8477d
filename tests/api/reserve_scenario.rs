//! The reservation scenario every store passes (`Store::reserve`): memory, one Redis node
//! (`reserve_store`), a Redis Cluster (`tests/cluster.rs`). Two limits on one descriptor
//! (their keys share a hash tag, as `rate_limits` entries' keys do) and one alone.

use std::time::Duration;

use tokio::time::Instant;
use tollgate::algorithm::reservation::Phase;
use tollgate::algorithm::{Algorithm, Hits, Params};
use tollgate::store::{Charge, Reservation, Reserved, Store};

const HOUR: u64 = 3_600_000_000;

fn deadline() -> Instant {
    Instant::now() + Duration::from_secs(2)
}

/// The two limits of one descriptor, under `tag`: 100 per hour (GCRA) and 80 per hour
/// (fixed window).
pub fn pair(tag: &str, hits: Hits) -> Vec<Charge> {
    let gcra = Params {
        algorithm: Algorithm::Gcra,
        limit: 100,
        unit_us: HOUR,
        burst: 100,
        penalty_us: 0,
        period: None,
    };
    let fixed = Params {
        algorithm: Algorithm::FixedWindow,
        limit: 80,
        unit_us: HOUR,
        burst: 80,
        penalty_us: 0,
        period: None,
    };
    vec![
        Charge { key: format!("tg:m:{{{tag}}}g2h:1:a"), params: gcra, hits },
        Charge { key: format!("tg:m:{{{tag}}}fh:1:b"), params: fixed, hits },
    ]
}

pub fn named(id: &str, ttl_us: u64) -> Reservation {
    Reservation { id: id.into(), ttl_us }
}

pub async fn reserve(store: &Store, group: &[Charge], id: &str) -> Reserved {
    store.reserve(group, &named(id, HOUR), deadline()).await.expect("the store answers")
}

/// What a plain peek of each bucket reports.
pub async fn peek(store: &Store, group: &[Charge]) -> Vec<u64> {
    let peeks: Vec<Charge> = group.iter().map(|c| Charge { hits: Hits::Peek, ..c.clone() }).collect();
    let results = store.charge(&peeks, deadline()).await;
    results.into_iter().map(|r| r.expect("the store answers").remaining).collect()
}

fn remaining(r: &Reserved) -> Vec<u64> {
    r.decisions.iter().map(|d| d.remaining).collect()
}

/// Reserve, hold, refuse, settle, and what a call after the settle is; `other` is another
/// instance's store on the same data (the same store for memory).
pub async fn reserve_hold_settle(store: &Store, other: &Store, tag: &str) {
    let group = |n| pair(tag, Hits::Consume(n));
    let held = reserve(store, &group(60), "r1").await;
    assert_eq!((held.phase, remaining(&held)), (Phase::Reserved, vec![40, 20]), "{held:?}");
    assert_eq!(peek(other, &group(1)).await, [40, 20], "a hold counts as spent, on every instance");
    let refused = reserve(other, &group(30), "r2").await;
    assert_eq!(refused.phase, Phase::Refused, "30 does not fit the fixed window's 20");
    assert!(!refused.decisions[1].allowed);
    assert_eq!(peek(store, &group(1)).await, [40, 20], "a refused reservation holds nothing");
    let settled = reserve(other, &group(10), "r1").await;
    assert_eq!((settled.phase, remaining(&settled)), (Phase::Settled, vec![90, 70]), "{settled:?}");
    let again = reserve(store, &group(5), "r1").await;
    assert_eq!((again.phase, remaining(&again)), (Phase::Plain, vec![85, 65]), "settled: a plain charge");
    let late = reserve(store, &pair(tag, Hits::Peek), "r2").await;
    assert_eq!((late.phase, remaining(&late)), (Phase::Plain, vec![85, 65]), "refused, 0 hits: a peek");
    // An overrun is recorded whatever it answers, within one unit of debt.
    assert_eq!(reserve(store, &group(10), "r3").await.phase, Phase::Reserved);
    let over = reserve(other, &group(500), "r3").await;
    assert_eq!(over.phase, Phase::Settled);
    assert!(over.decisions.iter().all(|d| !d.allowed), "{over:?}");
    assert_eq!(peek(store, &group(1)).await, [0, 0]);
}

/// Concurrent reservations of 10 against fresh budgets of 100 and 80: exactly 8 hold, and
/// settling each with less than its estimate leaves the budget spent by the usage alone.
pub async fn concurrent_reservations_never_overspend(store: &Store, tag: &str) {
    let calls =
        (0..20).map(|i| async move { reserve(store, &pair(tag, Hits::Consume(10)), &format!("c{i}")).await });
    let answers = futures_util::future::join_all(calls).await;
    let held: Vec<usize> = (0..20).filter(|&i| answers[i].phase == Phase::Reserved).collect();
    assert_eq!(held.len(), 8, "{answers:?}");
    let settles = held
        .iter()
        .map(|i| async move { reserve(store, &pair(tag, Hits::Consume(3)), &format!("c{i}")).await });
    let settled = futures_util::future::join_all(settles).await;
    assert!(settled.iter().all(|s| s.phase == Phase::Settled));
    assert_eq!(peek(store, &pair(tag, Hits::Peek)).await, [76, 56]);
}

/// A reservation not settled within its ttl stays charged; the next call beside it counts it.
pub async fn an_unsettled_reservation_stays_charged_and_is_counted(store: &Store, tag: &str) {
    let group = pair(tag, Hits::Consume(30));
    let held = store.reserve(&group, &named("lost", 300_000), deadline()).await.expect("answers");
    assert_eq!(held.phase, Phase::Reserved);
    tokio::time::sleep(Duration::from_millis(400)).await;
    let next =
        store.reserve(&pair(tag, Hits::Consume(1)), &named("next", HOUR), deadline()).await.expect("answers");
    assert_eq!((next.phase, next.expired), (Phase::Reserved, 1), "{next:?}");
    assert_eq!(remaining(&next), [69, 49], "the lost hold stays charged");
    let late =
        store.reserve(&pair(tag, Hits::Consume(0)), &named("lost", HOUR), deadline()).await.expect("answers");
    assert_eq!((late.phase, remaining(&late)), (Phase::Plain, vec![69, 49]), "too late to settle");
}
