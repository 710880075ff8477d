use std::sync::atomic::Ordering;

use super::bucket::{Counts, Tier};
use super::*;

fn charge(key: &str, limit: u64, hits: Hits) -> Charge {
    Charge {
        key: key.into(),
        params: Params { algorithm: Algorithm::SlidingWindow, limit, unit_us: 60_000_000, burst: limit },
        hits,
    }
}

fn table() -> Approx {
    Approx::new(ApproxSettings { max_keys: 1024, ..ApproxSettings::default() })
}

/// Syncs every bucket `approx` holds as if Redis held nothing else: as after a first sync.
fn sync_empty(approx: &Approx, now: u64) {
    let items = approx.collect(now, sync::Wake::Long);
    let counts: Vec<Counts> = items
        .iter()
        .map(|i| {
            let start = now - now % i.params.unit_us;
            Counts { start, current: u64::try_from(i.delta).unwrap_or(0), previous: 0 }
        })
        .collect();
    approx.settle_ok(&items, &counts, now, now);
}

fn allowed(results: &[Result<Decision, StoreError>]) -> bool {
    results.iter().all(|r| r.as_ref().is_ok_and(|d| d.allowed))
}

#[test]
fn one_instance_admits_exactly_the_limit_locally_once_synced() {
    let approx = table();
    let now = 1_000_000_000;
    // Before its first sync a bucket gets a share only: Redis may hold counts it never read.
    let first = (0..15)
        .filter(|_| allowed(&approx.charge_group_at(&[charge("k", 10, Hits::Consume(1))], now)))
        .count();
    assert_eq!(first, 5);
    sync_empty(&approx, now);
    let admitted = (0..15)
        .filter(|_| allowed(&approx.charge_group_at(&[charge("k", 10, Hits::Consume(1))], now)))
        .count();
    assert_eq!(admitted, 5, "the rest of the limit");
    let view = approx.view_at("k", now).expect("held");
    assert_eq!((view.level, view.pending, view.tier), (10, 5, Tier::Hot));
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
    let items = approx.collect(now, sync::Wake::Long);
    assert_eq!(items.len(), 1);
    assert_eq!(items[0].delta, 17);
    let start = now - now % 60_000_000;
    approx.settle_ok(&items, &[Counts { start, current: 74, previous: 0 }], now, now);
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
    let items = approx.collect(now, sync::Wake::Long);
    approx.settle_failed(items, now);
    let again = approx.collect(now + 250_000, sync::Wake::Long);
    assert_eq!(again[0].delta, 1, "the increment goes with the next tick");
    approx.settle_failed(again, now + 250_000);
    // Within the staleness limit: decided from the estimate.
    assert!(allowed(&approx.charge_group_at(&one, now + 900_000)));
    // Past it, a bucket not synced within it is answered by the failure policy.
    let late = approx.charge_group_at(&one, now + 1_200_000);
    assert!(matches!(late[0], Err(StoreError::Unavailable(_))));
    assert_eq!(approx.counters.stale.load(Ordering::Relaxed), 1);
}

#[test]
fn idle_buckets_are_not_read_and_hot_ones_every_half_interval() {
    let approx = table();
    let now = 1_000_000_000;
    assert!(allowed(&approx.charge_group_at(&[charge("idle", 100, Hits::Consume(1))], now)));
    for _ in 0..90 {
        approx.charge_group_at(&[charge("hot", 100, Hits::Consume(1))], now);
    }
    let items = approx.collect(now, sync::Wake::Long);
    assert_eq!(items.len(), 2, "both have increments to write");
    let start = now - now % 60_000_000;
    let counts = [Counts { start, current: 1, previous: 0 }, Counts { start, current: 90, previous: 0 }];
    let (first, second) =
        if &*items[0].key == "idle" { (counts[0], counts[1]) } else { (counts[1], counts[0]) };
    approx.settle_ok(&items, &[first, second], now, now);
    assert_eq!(approx.view_at("idle", now).map(|v| v.tier), Some(Tier::Idle));
    assert_eq!(approx.view_at("hot", now).map(|v| v.tier), Some(Tier::Hot));
    // Half an interval later only the hot bucket is due; a full interval later too (the
    // idle one has nothing to write).
    let half = approx.collect(now + 125_000, sync::Wake::Half);
    assert_eq!(half.iter().map(|i| &*i.key).collect::<Vec<_>>(), ["hot"]);
    assert_eq!(half[0].delta, 0, "a read");
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
    let items = approx.collect(now, sync::Wake::Long);
    let total: i64 = items.iter().map(|i| i.delta).sum();
    assert_eq!(total, 10, "every admission is written, evicted or not");
    assert_eq!(approx.counters.dropped_increments.load(Ordering::Relaxed), 0);
}

#[test]
fn fixed_windows_start_again_at_their_edge() {
    let approx = table();
    let fixed = |hits| Charge {
        key: "f".into(),
        params: Params { algorithm: Algorithm::FixedWindow, limit: 3, unit_us: 1_000_000, burst: 3 },
        hits,
    };
    let now = 1_000_000_000;
    assert!(allowed(&approx.charge_group_at(&[fixed(Hits::Consume(1))], now)));
    sync_empty(&approx, now);
    let admitted =
        (0..5).filter(|_| allowed(&approx.charge_group_at(&[fixed(Hits::Consume(1))], now))).count();
    assert_eq!(admitted, 2, "3 in the window");
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
    let items = approx.collect(now, sync::Wake::Long);
    assert_eq!(items[0].delta, -4, "the refunds beyond the admissions go to Redis too");
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
fn the_sync_call_writes_exact_modes_format() {
    // The layout `approx.lua` reads: 6 reserved arguments (the 6th the test clock), then
    // (algorithm, unit, increment) per bucket; one key per bucket.
    let items = [sync::Item {
        key: "tg:k".into(),
        params: Params { algorithm: Algorithm::SlidingWindow, limit: 9, unit_us: 60_000_000, burst: 9 },
        delta: -2,
        orphan: false,
    }];
    let packed = sync::command_for_tests(&items);
    let args: Vec<String> = packed
        .args_iter()
        .map(|a| match a {
            redis::Arg::Simple(b) => String::from_utf8_lossy(b).into_owned(),
            _ => String::new(),
        })
        .collect();
    assert_eq!(args[0], "EVALSHA");
    assert_eq!(&args[2..4], ["1", "tg:k"]);
    assert_eq!(&args[4..10], ["", "", "", "", "", ""]);
    assert_eq!(&args[10..], ["1", "60000000", "-2"]);
}

#[test]
fn a_cluster_wake_is_one_call_per_slot_of_at_most_a_chunk() {
    use crate::store::cluster::{key_slot, ClusterSettings, ClusterStore};
    let params = Params { algorithm: Algorithm::FixedWindow, limit: 9, unit_us: 1_000_000, burst: 9 };
    let item = |key: String| sync::Item { key: key.into(), params, delta: 1, orphan: false };
    // 600 buckets of one slot (a hash tag) among 40 of their own slots.
    let mut items: Vec<sync::Item> = (0..40).map(|i| item(format!("solo:{i}"))).collect();
    items.extend((0..600).map(|i| item(format!("{{tagged}}:{i}"))));
    let link =
        crate::store::RedisSettings::new("redis://127.0.0.1:1").link(std::time::Duration::from_millis(10));
    let settings = ClusterSettings { nodes: vec!["127.0.0.1:1".into()], ca_file: None, link };
    let cluster = ClusterStore::new(&settings).expect("lazy: no connection yet");
    let mut single = items.clone();
    let chunks = sync::Via::Cluster(&cluster).chunks(&mut items);
    assert_eq!(chunks.iter().map(|c| c.len()).sum::<usize>(), 640, "every bucket sent once");
    for chunk in &chunks {
        let slot = key_slot(chunk[0].key.as_bytes());
        assert!(chunk.iter().all(|i| key_slot(i.key.as_bytes()) == slot), "one slot per call");
        assert!(chunk.len() <= sync::CHUNK);
    }
    let slots: std::collections::BTreeSet<u16> =
        chunks.iter().map(|c| key_slot(c[0].key.as_bytes())).collect();
    // One call per slot, and the tagged slot's 600 in two.
    assert_eq!(chunks.len(), slots.len() + 1);
    // A single node: runs of a chunk, in collection order, whatever the slots.
    let node = crate::store::RedisSettings::new("redis://127.0.0.1:1");
    let store = crate::store::RedisStore::new(&node, std::time::Duration::from_millis(10)).expect("lazy");
    assert_eq!(
        sync::Via::Link(store.link()).chunks(&mut single).iter().map(|c| c.len()).collect::<Vec<_>>(),
        [512, 128]
    );
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
        let items = approx.collect(at, sync::Wake::Long);
        let (failed, ok): (Vec<_>, Vec<_>) = items.into_iter().partition(|i| &*i.key == "down");
        let start = at - at % 60_000_000;
        let counts: Vec<Counts> =
            ok.iter().map(|_| Counts { start, current: 2 + step, previous: 0 }).collect();
        approx.settle_ok(&ok, &counts, at, at);
        approx.settle_failed(failed, at);
    }
    let late = now + 1_400_000;
    assert!(approx.charge_group_at(&[charge("up", 100, Hits::Consume(1))], late)[0].is_ok());
    let down = approx.charge_group_at(&[charge("down", 100, Hits::Consume(1))], late);
    assert!(matches!(down[0], Err(StoreError::Unavailable(_))), "past the limit on its own failures");
    // Its increments are all still waiting for its master: 6 admitted (the charge of the
    // last wake, 1.25 s after the first failure, was already stale).
    let waiting: i64 =
        approx.collect(late, sync::Wake::Long).iter().filter(|i| &*i.key == "down").map(|i| i.delta).sum();
    assert_eq!(waiting, 6);
}
