use std::sync::atomic::Ordering;
use std::time::Duration;

use super::tier::Tier;
use super::window::{Counts, Unsent};
use super::*;
use crate::algorithm::{Algorithm, Decision, Hits, Params};
use crate::store::charge::{Charge, StoreError};

fn charge(key: &str, limit: u64, hits: Hits) -> Charge {
    Charge {
        key: key.into(),
        params: Params {
            algorithm: Algorithm::SlidingWindow,
            limit,
            unit_us: 60_000_000,
            burst: limit,
            penalty_us: 0,
            period: None,
        },
        hits,
    }
}

fn table() -> Approx {
    Approx::new(ApproxSettings { max_keys: 1024, ..ApproxSettings::default() })
}

/// Everything a wake of `wake` would send, no budget.
fn collect(approx: &Approx, now: u64, wake: sync::Wake) -> Vec<sync::Item> {
    approx.collect(now, wake, usize::MAX)
}

/// Syncs every bucket `approx` holds as if Redis held nothing else: as after a first sync.
fn sync_empty(approx: &Approx, now: u64) {
    let items = collect(approx, now, sync::Wake::Last);
    let counts: Vec<Counts> = items
        .iter()
        .map(|i| {
            let start = now - now % i.params.unit_us;
            Counts { start, current: u64::try_from(i.unsent.delta).unwrap_or(0), previous: 0 }
        })
        .collect();
    approx.settle_ok(&items, &counts, now, now, now);
}

fn allowed(results: &[Result<Decision, StoreError>]) -> bool {
    results.iter().all(|r| r.as_ref().is_ok_and(|d| d.allowed))
}

#[test]
fn one_instance_spends_half_the_headroom_per_sync_and_reaches_the_limit_exactly() {
    let approx = table();
    let now = 1_000_000_000;
    let one = [charge("k", 10, Hits::Consume(1))];
    // Before its first sync a bucket gets a share only: Redis may hold counts it never read.
    let first = (0..15).filter(|_| allowed(&approx.charge_group_at(&one, now))).count();
    assert_eq!(first, 5);
    // Alone too, half of the headroom per sync (an instance that believes itself alone
    // may have company its heartbeat has not counted yet): 5, then 3, 1, 1 — the limit.
    let (mut total, mut redis) = (first, 0);
    for expected in [3, 1, 1, 0] {
        // A sync: Redis holds what this instance wrote, nothing else.
        let items = collect(&approx, now, sync::Wake::Last);
        redis += items.iter().map(|i| i.unsent.delta).sum::<i64>();
        let start = now - now % 60_000_000;
        let counts = vec![Counts { start, current: redis as u64, previous: 0 }; items.len()];
        approx.settle_ok(&items, &counts, now, now, now);
        let admitted = (0..15).filter(|_| allowed(&approx.charge_group_at(&one, now))).count();
        assert_eq!(admitted, expected);
        total += admitted;
    }
    assert_eq!(total, 10, "exactly the limit");
    let view = approx.view_at("k", now).expect("held");
    assert_eq!((view.level, view.tier), (10, Tier::Hot));
}

#[test]
fn a_share_of_the_headroom_per_sync_with_several_instances() {
    let approx = table();
    approx.instances.store(3, Ordering::Relaxed);
    let now = 1_000_000_000;
    let one = [charge("k", 100, Hits::Consume(1))];
    let admitted = (0..100).filter(|_| allowed(&approx.charge_group_at(&one, now))).count();
    assert_eq!(admitted, 17, "⌈100 / 6⌉ before a sync");
    assert_eq!(approx.counters.share_denials.load(Ordering::Relaxed), 83);
    // A sync shows 17 + 57 from the others: the share is now ⌈26 / 6⌉ = 5 more.
    let items = collect(&approx, now, sync::Wake::Last);
    assert_eq!(items.len(), 1);
    assert_eq!(items[0].unsent.delta, 17);
    let start = now - now % 60_000_000;
    approx.settle_ok(&items, &[Counts { start, current: 74, previous: 0 }], now, now, now);
    let admitted = (0..100).filter(|_| allowed(&approx.charge_group_at(&one, now))).count();
    assert_eq!(admitted, 5);
}

#[test]
fn a_failed_sync_keeps_the_increments_and_staleness_hands_over_to_the_failure_policy() {
    let approx = Approx::new(ApproxSettings {
        staleness: Duration::from_secs(1),
        max_keys: 1024,
        ..ApproxSettings::default()
    });
    let now = 1_000_000_000;
    let one = [charge("k", 100, Hits::Consume(1))];
    assert!(allowed(&approx.charge_group_at(&one, now)));
    let items = collect(&approx, now, sync::Wake::Last);
    approx.settle_failed(items, now);
    let again = collect(&approx, now + 250_000, sync::Wake::Last);
    assert_eq!(again[0].unsent.delta, 1, "the increment goes with the next tick");
    approx.settle_failed(again, now + 250_000);
    // Within the staleness limit: decided from the estimate.
    assert!(allowed(&approx.charge_group_at(&one, now + 900_000)));
    // Past it, a bucket not synced within it is answered by the failure policy.
    let late = approx.charge_group_at(&one, now + 1_200_000);
    assert!(matches!(late[0], Err(StoreError::Unavailable(_))));
    assert_eq!(approx.counters.stale.load(Ordering::Relaxed), 1);
}

#[test]
fn all_or_nothing_groups_charge_nothing_when_one_member_is_denied() {
    let approx = table();
    let now = 1_000_000_000;
    let group = [charge("a", 100, Hits::Consume(1)), charge("b", 1, Hits::Consume(1))];
    assert!(allowed(&approx.charge_group_at(&group, now)));
    let denied = approx.charge_group_at(&group, now);
    assert!(denied[0].as_ref().is_ok_and(|d| d.allowed));
    assert!(denied[1].as_ref().is_ok_and(|d| !d.allowed));
    assert_eq!(approx.view_at("a", now).map(|v| v.level), Some(1), "the denied group charged nothing");
}

#[test]
fn eviction_keeps_unsent_increments_for_the_next_sync() {
    let approx = Approx::new(ApproxSettings { max_keys: 8, ..ApproxSettings::default() });
    let now = 1_000_000_000;
    for i in 0..10 {
        approx.charge_group_at(&[charge(&format!("k{i}"), 100, Hits::Consume(1))], now);
    }
    assert!(approx.len() <= 8);
    assert_eq!(approx.counters.evictions.load(Ordering::Relaxed), 2);
    let items = collect(&approx, now, sync::Wake::Last);
    let total: i64 = items.iter().map(|i| i.unsent.delta).sum();
    assert_eq!(total, 10, "every admission is written, evicted or not");
    assert_eq!(approx.counters.dropped_increments.load(Ordering::Relaxed), 0);
}

#[test]
fn fixed_windows_start_again_at_their_edge() {
    let approx = table();
    let fixed = |hits| Charge {
        key: "f".into(),
        params: Params {
            algorithm: Algorithm::FixedWindow,
            limit: 3,
            unit_us: 1_000_000,
            burst: 3,
            penalty_us: 0,
            period: None,
        },
        hits,
    };
    let now = 1_000_000_000;
    assert!(allowed(&approx.charge_group_at(&[fixed(Hits::Consume(1))], now)));
    sync_empty(&approx, now);
    let admitted =
        (0..5).filter(|_| allowed(&approx.charge_group_at(&[fixed(Hits::Consume(1))], now))).count();
    assert_eq!(admitted, 1, "half of the 2 left in the window, until the next sync");
    let items = collect(&approx, now, sync::Wake::Last);
    approx.settle_ok(&items, &[Counts { start: now, current: 2, previous: 0 }], now, now, now);
    assert!(allowed(&approx.charge_group_at(&[fixed(Hits::Consume(1))], now)), "the third");
    let denied = approx.charge_group_at(&[fixed(Hits::Consume(1))], now + 400_000);
    assert_eq!(denied[0].as_ref().map(|d| (d.allowed, d.reset_us)), Ok((false, 600_000)));
    // The next window: empty again, locally, before any sync.
    assert!(allowed(&approx.charge_group_at(&[fixed(Hits::Consume(1))], now + 1_000_000)));
}

#[test]
fn peeks_charge_nothing_and_refunds_are_sent_as_negative_increments() {
    let approx = table();
    let now = 1_000_000_000;
    for _ in 0..4 {
        approx.charge_group_at(&[charge("k", 10, Hits::Consume(1))], now);
    }
    let peek = approx.charge_group_at(&[charge("k", 10, Hits::Peek)], now);
    assert_eq!(peek[0].as_ref().map(|d| (d.allowed, d.remaining)), Ok((true, 6)));
    approx.charge_group_at(&[charge("k", 10, Hits::Refund(3))], now);
    assert_eq!(approx.view_at("k", now).map(|v| (v.level, v.pending)), Some((1, 1)));
    approx.charge_group_at(&[charge("k", 10, Hits::Refund(5))], now);
    let items = collect(&approx, now, sync::Wake::Last);
    assert_eq!(items[0].unsent.delta, -4, "the refunds beyond the admissions go to Redis too");
    assert_eq!(approx.view_at("k", now).map(|v| v.level), Some(0));
}

#[test]
fn a_reload_changes_the_limit_of_a_live_bucket() {
    let approx = table();
    let now = 1_000_000_000;
    for _ in 0..5 {
        approx.charge_group_at(&[charge("k", 10, Hits::Consume(1))], now);
    }
    // The same bucket under a limit of 5 (a reload): full.
    let denied = approx.charge_group_at(&[charge("k", 5, Hits::Consume(1))], now);
    assert!(denied[0].as_ref().is_ok_and(|d| !d.allowed));
    assert_eq!(approx.view_at("k", now).map(|v| v.tier), Some(Tier::Hot));
}

#[test]
fn staleness_is_per_bucket_so_one_failing_master_does_not_hide_behind_the_others() {
    let approx = Approx::new(ApproxSettings {
        staleness: Duration::from_secs(1),
        max_keys: 1024,
        ..ApproxSettings::default()
    });
    let now = 1_000_000_000;
    for key in ["down", "up"] {
        assert!(allowed(&approx.charge_group_at(&[charge(key, 100, Hits::Consume(1))], now)));
    }
    // Every wake: the call for "down" fails (its master is down), the one for "up" answers.
    for step in 0..6u64 {
        let at = now + step * 250_000;
        for key in ["down", "up"] {
            approx.charge_group_at(&[charge(key, 100, Hits::Consume(1))], at);
        }
        let items = collect(&approx, at, sync::Wake::Last);
        let (failed, ok): (Vec<_>, Vec<_>) = items.into_iter().partition(|i| &*i.key == "down");
        let start = at - at % 60_000_000;
        let counts: Vec<Counts> =
            ok.iter().map(|_| Counts { start, current: 2 + step, previous: 0 }).collect();
        approx.settle_ok(&ok, &counts, at, at, at);
        approx.settle_failed(failed, at);
    }
    let late = now + 1_400_000;
    assert!(approx.charge_group_at(&[charge("up", 100, Hits::Consume(1))], late)[0].is_ok());
    let down = approx.charge_group_at(&[charge("down", 100, Hits::Consume(1))], late);
    assert!(matches!(down[0], Err(StoreError::Unavailable(_))), "past the limit on its own failures");
    // Its increments are all still waiting for its master: 6 admitted (the charge of the
    // last wake, 1.25 s after the first failure, was already stale).
    let waiting: i64 = collect(&approx, late, sync::Wake::Last)
        .iter()
        .filter(|i| &*i.key == "down")
        .map(|i| i.unsent.delta)
        .sum();
    assert_eq!(waiting, 6);
}

#[test]
fn a_group_meeting_one_bucket_twice_spends_its_share_once_for_both() {
    let approx = table();
    approx.beaten(2, 1);
    let now = 1_000_000_000;
    // Share of an unread bucket of 100 with N = 2: 25.
    let twice = [charge("k", 100, Hits::Consume(15)), charge("k", 100, Hits::Consume(15))];
    let decided = approx.charge_group_at(&twice, now);
    assert!(decided.iter().any(|d| d.as_ref().is_ok_and(|d| !d.allowed)), "30 > 25: {decided:?}");
    assert_eq!(approx.view_at("k", now).map(|v| v.level), Some(0), "nothing charged");
    let fits = [charge("k", 100, Hits::Consume(12)), charge("k", 100, Hits::Consume(12))];
    assert!(allowed(&approx.charge_group_at(&fits, now)));
}

#[test]
fn a_group_never_evicts_its_own_members() {
    // One shard of two: a group of two new buckets fills it; a group with a third must
    // drop a bucket that is not its own.
    let approx = Approx::new(ApproxSettings { max_keys: 2, ..ApproxSettings::default() });
    let now = 1_000_000_000;
    // "a" is the lowest: the one a sample would drop first.
    approx.charge_group_at(&[charge("old", 100, Hits::Consume(9))], now);
    approx.charge_group_at(&[charge("a", 100, Hits::Consume(1))], now);
    for _ in 0..3 {
        let group = [charge("a", 100, Hits::Consume(1)), charge("new", 100, Hits::Consume(1))];
        approx.charge_group_at(&group, now);
        assert!(approx.view_at("a", now).is_some(), "a member was evicted mid-group");
        approx.remove("new");
    }
}

#[test]
fn n_is_the_largest_count_of_the_last_30_s_and_the_warm_up_ends_an_interval_after_the_first_beat() {
    let approx = table();
    assert!(!approx.is_ready());
    let t = 5_000_000;
    approx.beaten(1, t);
    assert!(!approx.is_ready(), "one beat: the others may not have counted this one yet");
    approx.beaten(3, t + 100_000);
    assert!(!approx.is_ready());
    approx.beaten(3, t + 250_000);
    assert!(approx.is_ready(), "an interval after the first beat");
    assert_eq!(approx.instances(), 3);
    // One leaves (a rolling restart): N stays 3 for 30 s, then follows the count.
    approx.beaten(2, t + 1_000_000);
    assert_eq!((approx.instances(), approx.live_instances()), (3, 2));
    approx.beaten(2, t + 1_000_000 + PEAK_SPAN_US + 1);
    assert_eq!(approx.instances(), 2);
}

#[test]
fn a_refund_waiting_across_a_window_edge_frees_nothing_in_the_next_window() {
    let approx = table();
    let now = 60_000_000_000;
    let fixed = |hits| Charge {
        key: "f".into(),
        params: Params {
            algorithm: Algorithm::FixedWindow,
            limit: 10,
            unit_us: 1_000_000,
            burst: 10,
            penalty_us: 0,
            period: None,
        },
        hits,
    };
    approx.charge_group_at(&[fixed(Hits::Consume(4))], now);
    let items = collect(&approx, now, sync::Wake::Last);
    approx.settle_ok(&items, &[Counts { start: now, current: 4, previous: 0 }], now, now, now);
    // Refunded in the next window: it is that window's, and Redis's count of it is 0.
    approx.charge_group_at(&[fixed(Hits::Refund(3))], now + 1_000_000);
    let items = collect(&approx, now + 1_000_000, sync::Wake::Last);
    assert_eq!(items[0].unsent, Unsent { start: now + 1_000_000, delta: -3, carry: 0 });
    // An admission of the last window written after its edge goes to that window.
    let approx = table();
    approx.charge_group_at(&[charge("s", 100, Hits::Consume(2))], now);
    approx.charge_group_at(&[charge("s", 100, Hits::Consume(1))], now + 60_000_000);
    let items = collect(&approx, now + 60_000_000, sync::Wake::Last);
    assert_eq!(items[0].unsent, Unsent { start: now + 60_000_000, delta: 1, carry: 2 });
}

mod claims;
mod heartbeat;
mod wakes;
