//! Claims (a consume larger than a share, decided against Redis) and resets seen in the
//! log, on the table alone: what a claim takes, reserves and gives back, and what a reset
//! empties. The calls themselves run against a real Redis in `tests/approximate_surface.rs`.

use super::*;
use crate::store::memory::now_us;

fn level(approx: &Approx, key: &str, now: u64) -> u64 {
    approx.view_at(key, now).map_or(u64::MAX, |v| v.level)
}

fn read(current: u64, now: u64) -> Read {
    Read {
        counts: Counts { start: now - now % 60_000_000, current, previous: 0 },
        redis_now: now,
        answered: now,
        offset: 0,
    }
}

#[test]
fn a_consume_larger_than_a_share_is_claimed_reserved_and_settled_by_its_read() {
    let approx = table();
    let now = now_us();
    sync_empty(&approx, now);
    assert!(allowed(&approx.charge_group_at(&[charge("k", 10, Hits::Consume(1))], now)));
    sync_empty(&approx, now);
    // 6 of 10 with 1 spent: more than the whole share (⌈9 / 2⌉ = 5), room on the estimate.
    let big = [charge("k", 10, Hits::Consume(6))];
    assert!(!allowed(&approx.charge_group_at(&big, now)), "without claims: the share rule");
    let Local::Exact(claim) = approx.decide_group_at(&big, now, true) else { panic!("not claimed") };
    // Reserved: this instance admits nothing else of the bucket meanwhile.
    assert_eq!(level(&approx, "k", now), 7);
    assert!(!allowed(&approx.charge_group_at(&[charge("k", 10, Hits::Consume(1))], now)));
    assert!(collect(&approx, now, sync::Wake::Last).is_empty(), "the sync leaves it alone");
    // Redis admitted it: the read folds as a sync's answer.
    claim.settle(&[("k".into(), read(7, now))]);
    assert_eq!(level(&approx, "k", now), 7);
    assert!(allowed(&approx.charge_group_at(&[charge("k", 10, Hits::Consume(1))], now)));
    // Past the estimate's room: denied locally, no claim.
    let over = approx.decide_group_at(&[charge("k", 10, Hits::Consume(3))], now, true);
    assert!(matches!(over, Local::Decided(ref r) if !allowed(r)));
}

#[test]
fn a_claim_dropped_unsettled_gives_back_its_increments_and_is_read_again() {
    let approx = table();
    let now = now_us();
    sync_empty(&approx, now);
    assert!(allowed(&approx.charge_group_at(&[charge("k", 100, Hits::Consume(2))], now)));
    let Local::Exact(claim) = approx.decide_group_at(&[charge("k", 100, Hits::Consume(60))], now, true)
    else {
        panic!("not claimed")
    };
    // The increments not yet written go first.
    let writes = claim.writes();
    assert_eq!(writes.iter().map(|i| i.unsent.delta).collect::<Vec<_>>(), [2]);
    drop(claim);
    assert_eq!(level(&approx, "k", now), 2, "the reservation is taken off");
    assert_eq!(approx.view_at("k", now).map(|v| v.pending), Some(2), "the increments are back");
    assert_eq!(approx.unread(&[charge("k", 100, Hits::Peek)]), [0], "read again before its next decision");
    assert_eq!(collect(&approx, now, sync::Wake::Last).len(), 1, "and written by the next sync");
}

#[test]
fn a_bucket_with_a_sync_in_flight_is_busy_and_a_group_is_claimed_whole() {
    let approx = table();
    let now = now_us();
    sync_empty(&approx, now);
    assert!(allowed(&approx.charge_group_at(&[charge("k", 10, Hits::Consume(1))], now)));
    let inflight = collect(&approx, now, sync::Wake::Last);
    assert!(matches!(approx.decide_group_at(&[charge("k", 10, Hits::Consume(6))], now, true), Local::Busy));
    approx.settle_failed(inflight, now);
    // A group: one member larger than its share, the other within: both claimed.
    let group = [charge("k", 10, Hits::Consume(6)), charge("org", 1000, Hits::Consume(6))];
    let Local::Exact(mut claim) = approx.decide_group_at(&group, now, true) else { panic!("not claimed") };
    assert_eq!(claim.writes().len(), 1, "k's increment put back by the failed sync goes first");
    claim.written();
    let mut keys: Vec<String> = claim.reads().iter().map(|i| i.key.to_string()).collect();
    keys.sort();
    assert_eq!(keys, ["k", "org"]);
    claim.settle(&[("k".into(), read(7, now)), ("org".into(), read(6, now))]);
    // No room on the estimate for the group: denied as a whole, locally.
    let denied = approx.decide_group_at(&[charge("k", 10, Hits::Consume(4)), group[1].clone()], now, true);
    assert!(matches!(denied, Local::Decided(ref r) if !r[0].as_ref().is_ok_and(|d| d.allowed)));
}

#[test]
fn a_reset_seen_in_the_log_empties_a_bucket_read_before_it() {
    let approx = table();
    let now = now_us();
    for _ in 0..5 {
        approx.charge_group_at(&[charge("k", 10, Hits::Consume(1))], now);
    }
    let items = collect(&approx, now, sync::Wake::Last);
    let start = now - now % 60_000_000;
    approx.settle_ok(&items, &[Counts { start, current: 10, previous: 0 }], now, now, now);
    assert!(!allowed(&approx.charge_group_at(&[charge("k", 10, Hits::Consume(1))], now)), "spent");
    // A reset after the last read: emptied, read again before its next decision.
    approx.reset_seen("k", now + 1_000);
    assert_eq!(level(&approx, "k", now + 2_000), 0);
    assert_eq!(approx.unread(&[charge("k", 10, Hits::Consume(1))]), [0]);
    // An answer from before the reset is not folded; one from after it is.
    approx.seed(
        "k",
        charge("k", 10, Hits::Peek).params,
        Counts { start, current: 10, previous: 0 },
        now + 500,
        now,
        0,
    );
    assert_eq!(level(&approx, "k", now + 2_000), 0);
    approx.seed(
        "k",
        charge("k", 10, Hits::Peek).params,
        Counts { start, current: 1, previous: 0 },
        now + 1_500,
        now,
        0,
    );
    assert_eq!(level(&approx, "k", now + 2_000), 1);
    // A reset older than the last read changes nothing.
    approx.reset_seen("k", now + 1_000);
    assert_eq!(level(&approx, "k", now + 2_000), 1);
}
