//! The sync's side of the table: what a wake collects, the calls it makes of them, a
//! failed call's increments put back, and first reads.

use super::*;

#[test]
fn a_wake_sends_only_buckets_with_increments_hot_ones_every_half_interval() {
    let approx = table();
    let now = 1_000_000_000;
    assert!(allowed(&approx.charge_group_at(&[charge("idle", 100, Hits::Consume(1))], now)));
    for _ in 0..45 {
        approx.charge_group_at(&[charge("hot", 100, Hits::Consume(1))], now);
    }
    let items = collect(&approx, now, sync::Wake::Last);
    assert_eq!(items.len(), 2, "both have increments to write");
    let start = now - now % 60_000_000;
    let counts: Vec<Counts> = items
        .iter()
        .map(|i| Counts { start, current: if &*i.key == "idle" { 1 } else { 90 }, previous: 0 })
        .collect();
    approx.settle_ok(&items, &counts, now, now, now);
    assert_eq!(approx.view_at("idle", now).map(|v| v.tier), Some(Tier::Idle));
    assert_eq!(approx.view_at("hot", now).map(|v| v.tier), Some(Tier::Hot));
    // Nothing charged since: nothing is sent, however full a bucket is.
    for wake in [sync::Wake::Half, sync::Wake::Full, sync::Wake::Last] {
        assert!(collect(&approx, now + 125_000, wake).is_empty());
    }
    // A local denial is not asking: the full bucket stays unsent.
    let denied = approx.charge_group_at(&[charge("hot", 100, Hits::Consume(50))], now);
    assert!(denied[0].as_ref().is_ok_and(|d| !d.allowed));
    assert!(collect(&approx, now + 125_000, sync::Wake::Last).is_empty());
    // Admissions: the hot bucket goes on a half wake, the idle one once it waited 4
    // intervals, on whichever wake.
    approx.charge_group_at(&[charge("hot", 100, Hits::Consume(1))], now);
    approx.charge_group_at(&[charge("idle", 100, Hits::Consume(1))], now);
    let half = collect(&approx, now + 125_000, sync::Wake::Half);
    assert_eq!(half.iter().map(|i| &*i.key).collect::<Vec<_>>(), ["hot"]);
    assert!(collect(&approx, now + 250_000, sync::Wake::Full).is_empty(), "idle: every 4 intervals");
    let later = collect(&approx, now + 875_000, sync::Wake::Half);
    assert_eq!(later.iter().map(|i| &*i.key).collect::<Vec<_>>(), ["idle"]);
}

#[test]
fn a_wake_past_its_budget_leaves_the_rest_waiting_oldest_first() {
    let approx = Approx::new(ApproxSettings { max_keys: 64, ..ApproxSettings::default() });
    let now = 1_000_000_000;
    for i in 0..10u64 {
        approx.charge_group_at(&[charge(&format!("k{i}"), 100, Hits::Consume(1))], now + i);
    }
    let first = approx.collect(now + 100, sync::Wake::Last, 4);
    assert_eq!(first.len(), 4);
    assert_eq!(approx.backlog(now + 1_000), (6, 996), "6 due left, the oldest admitted at `now + 4`");
    let keys = |items: &[sync::Item]| items.iter().map(|i| i.key.to_string()).collect::<Vec<_>>();
    assert_eq!(keys(&first), ["k0", "k1", "k2", "k3"], "one shard here: oldest first");
    let rest = approx.collect(now + 200, sync::Wake::Last, 100);
    assert_eq!(keys(&rest), ["k4", "k5", "k6", "k7", "k8", "k9"]);
    assert_eq!(approx.backlog(now + 1_000), (0, 0));
}

#[test]
fn the_sync_call_writes_exact_modes_format() {
    // The layout `approx.lua` reads: 6 reserved arguments (the 6th the test clock), then
    // (algorithm, unit, window start, increment, the window before's increment) per
    // bucket; one key per bucket.
    let items = [sync::Item {
        key: "tg:k".into(),
        params: Params {
            algorithm: Algorithm::SlidingWindow,
            limit: 9,
            unit_us: 60_000_000,
            burst: 9,
            penalty_us: 0,
            period: None,
        },
        unsent: Unsent { start: 120_000_000, delta: -2, carry: 3 },
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
    assert_eq!(&args[10..], ["1", "60000000", "120000000", "-2", "3"]);
}

#[test]
fn a_cluster_wake_is_one_call_per_slot_of_at_most_a_chunk() {
    use crate::store::redis::cluster::{key_slot, ClusterSettings, ClusterStore, Lane};
    let params = Params {
        algorithm: Algorithm::FixedWindow,
        limit: 9,
        unit_us: 1_000_000,
        burst: 9,
        penalty_us: 0,
        period: None,
    };
    let unsent = Unsent { start: 0, delta: 1, carry: 0 };
    let item = |key: String| sync::Item { key: key.into(), params, unsent, orphan: false };
    // 600 buckets of one slot (a hash tag) among 40 of their own slots.
    let mut items: Vec<sync::Item> = (0..40).map(|i| item(format!("solo:{i}"))).collect();
    items.extend((0..600).map(|i| item(format!("{{tagged}}:{i}"))));
    let link = crate::store::redis::RedisSettings::new("redis://127.0.0.1:1")
        .link(std::time::Duration::from_millis(10));
    let settings = ClusterSettings { nodes: vec!["127.0.0.1:1".into()], tls: Default::default(), link };
    let cluster = ClusterStore::new(&settings).expect("lazy: no connection yet");
    let mut single = items.clone();
    let chunks = sync::Via::Cluster(&cluster, Lane::Sync).chunks(&mut items);
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
    let node = crate::store::redis::RedisSettings::new("redis://127.0.0.1:1");
    let store =
        crate::store::redis::RedisStore::new(&node, std::time::Duration::from_millis(10)).expect("lazy");
    assert_eq!(
        sync::Via::Link(store.link()).chunks(&mut single).iter().map(|c| c.len()).collect::<Vec<_>>(),
        [512, 128]
    );
}

#[test]
fn a_bucket_evicted_in_flight_and_made_anew_keeps_the_failed_calls_increments() {
    let approx = Approx::new(ApproxSettings { max_keys: 2, ..ApproxSettings::default() });
    let now = 1_000_000_000;
    approx.charge_group_at(&[charge("a", 100, Hits::Consume(3))], now);
    let items = collect(&approx, now, sync::Wake::Last);
    // While the call is in flight "a" is evicted (two newer buckets) and charged again.
    for key in ["b", "c"] {
        approx.charge_group_at(&[charge(key, 100, Hits::Consume(1))], now);
    }
    approx.remove("b");
    approx.remove("c");
    approx.charge_group_at(&[charge("a", 100, Hits::Consume(1))], now);
    approx.settle_failed(items, now);
    let again = collect(&approx, now, sync::Wake::Last);
    let a: i64 = again.iter().filter(|i| &*i.key == "a").map(|i| i.unsent.delta).sum();
    assert_eq!(a, 4, "the failed call's 3 and the new bucket's 1");
    assert_eq!(approx.counters.dropped_increments.load(Ordering::Relaxed), 0);
}

#[test]
fn a_peek_reads_again_a_bucket_last_read_a_sync_interval_ago_and_a_newer_read_folds() {
    let approx = table();
    approx.beaten(3, 1);
    let now = crate::store::memory::now_us();
    let (peek, one) = ([charge("k", 100, Hits::Peek)], [charge("k", 100, Hits::Consume(1))]);
    let start = now - now % 60_000_000;
    approx.seed("k", one[0].params, Counts { start, current: 10, previous: 0 }, now, now, 0);
    assert!(approx.unread(&peek).is_empty(), "read just now");
    // Read an interval ago (250 ms by default): a peek reads it again, a consume does not
    // (it is held to a share and synced).
    let old = now - 250_000;
    approx.seed("j", one[0].params, Counts { start, current: 10, previous: 0 }, old, old, 0);
    let (peek_j, one_j) = ([charge("j", 100, Hits::Peek)], [charge("j", 100, Hits::Consume(1))]);
    assert_eq!(approx.unread(&peek_j), [0]);
    assert!(approx.unread(&one_j).is_empty());
    // The peek's read, newer, folds over the old one; an older answer does not.
    approx.seed("j", one[0].params, Counts { start, current: 100, previous: 0 }, now, now, 0);
    assert_eq!(approx.view_at("j", now).map(|v| v.level), Some(100));
    approx.seed("j", one[0].params, Counts { start, current: 20, previous: 0 }, now - 1, now, 0);
    assert_eq!(approx.view_at("j", now).map(|v| v.level), Some(100), "an older read is not folded");
}

#[test]
fn a_first_read_of_an_exhausted_bucket_leaves_a_new_instance_nothing_to_spend() {
    let approx = table();
    approx.beaten(3, 1);
    let now = 1_000_000_000;
    let one = [charge("k", 100, Hits::Consume(1))];
    assert_eq!(approx.unread(&one), [0], "never read");
    let start = now - now % 60_000_000;
    approx.seed("k", one[0].params, Counts { start, current: 100, previous: 0 }, now, now, 0);
    assert!(approx.unread(&one).is_empty());
    let admitted = (0..50).filter(|_| allowed(&approx.charge_group_at(&one, now))).count();
    assert_eq!(admitted, 0, "Redis holds the whole limit");
    // Unread, the same bucket would have had a share of the whole limit.
    let fresh = table();
    fresh.beaten(3, 1);
    let admitted = (0..50).filter(|_| allowed(&fresh.charge_group_at(&one, now))).count();
    assert_eq!(admitted, 17);
    // A read does not overwrite what a sync answered since.
    approx.seed("k", one[0].params, Counts { start, current: 0, previous: 0 }, now, now + 5, 0);
    assert_eq!(approx.view_at("k", now).map(|v| v.level), Some(100));
}
