//! The heartbeat's side of the table under time: `N` over the last 30 s of samples, and
//! clocks that step (times injected).

use super::*;
use crate::store::approx::health::{midpoint, sent_before};

#[test]
fn n_keeps_a_count_seen_after_the_maximum_for_its_own_30_s() {
    let approx = table();
    let t = 5_000_000;
    approx.beaten(5, t);
    approx.beaten(4, t + 20_000_000);
    // The 5 is 31 s old; the 4 was answered 11 s ago: N is 4, not the 2 answered now.
    approx.beaten(2, t + 31_000_000);
    assert_eq!((approx.instances(), approx.live_instances()), (4, 2));
    // 31.5 s after the 4: the count now.
    approx.beaten(2, t + 51_500_000);
    assert_eq!(approx.instances(), 2);
}

#[test]
fn a_clock_stepped_back_during_the_clock_read_scores_the_beat_in_redis_time() {
    let approx = table();
    let redis = 1_800_000_000_000_000;
    // Our clock 2 s behind Redis's, then stepped back an hour while `TIME` was in flight.
    let sent = redis - 2_000_000;
    let answered = sent - 3_600_000_000 + 300;
    approx.clock(redis, midpoint(sent, answered));
    // The beat is scored at Redis's now: not an hour ahead (its `ZREMRANGEBYSCORE` would
    // drop every other instance), not an hour behind (the others would drop this one).
    let score = approx.redis_now(answered);
    assert!(
        score.abs_diff(redis) < 1_000_000,
        "scored {} s off Redis's clock",
        score.abs_diff(redis) / 1_000_000
    );
    // As the calls take it: `sent` from the monotonic duration, so a step either way
    // during the call moves neither reading apart.
    for step in [-3_600_000_000i64, 3_600_000_000] {
        let answered = sent.saturating_add_signed(step) + 300;
        approx.clock(redis, midpoint(sent_before(answered, Duration::from_micros(300)), answered));
        let score = approx.redis_now(answered);
        assert!(score.abs_diff(redis) < 1_000, "step {step} µs: scored {} µs off", score.abs_diff(redis));
    }
}

#[test]
fn the_clock_is_asked_again_when_no_call_measured_it_within_an_interval() {
    let approx = table();
    assert!(!approx.clock_is_fresh(), "never measured: `TIME` before the first beat");
    approx.clock(1_800_000_000_000_000, 1_800_000_000_000_000);
    assert!(approx.clock_is_fresh());
    // The monotonic clock, not the wall clock: a quarter second later it is old.
    std::thread::sleep(Duration::from_millis(260));
    assert!(!approx.clock_is_fresh());
}

#[test]
fn a_clock_stepped_back_after_the_first_beat_delays_the_warm_up_by_one_interval_not_the_step() {
    let approx = table();
    let t = 1_800_000_000_000_000;
    approx.beaten(2, t);
    let back = t - 3_600_000_000;
    approx.beaten(2, back);
    assert!(!approx.is_ready());
    approx.beaten(2, back + 250_000);
    assert!(approx.is_ready(), "an interval after a beat on the new clock");
}

#[test]
fn a_lost_sync_task_means_a_new_warm_up_increments_written_again_and_buckets_read_again() {
    let approx = table();
    let now = 1_800_000_000_000_000;
    approx.beaten(2, now);
    approx.beaten(2, now + 250_000);
    assert!(approx.is_ready());
    approx.clock(now, now);
    let charge_both = |at: u64| {
        assert!(allowed(&approx.charge_group_at(&[charge("sent", 100, Hits::Consume(3))], at)));
        assert!(allowed(&approx.charge_group_at(&[charge("waiting", 100, Hits::Consume(2))], at + 1)));
    };
    // Both read once (a sync), then charged again.
    charge_both(now);
    sync_empty(&approx, now);
    charge_both(now + 2);
    assert!(approx.unread(&[charge("sent", 100, Hits::Consume(1))]).is_empty());
    // "sent" is in flight in a call that dies with its task; "waiting" is not sent yet.
    let in_flight = approx.collect(now, sync::Wake::Last, 1);
    assert_eq!(in_flight.len(), 1);
    approx.sync_lost(now + 10);
    assert!(!approx.is_ready(), "decided exactly until the heartbeat answers again");
    assert!(!approx.clock_is_fresh(), "the clock asked again");
    assert_eq!(approx.counters.sync_restarts.load(Ordering::Relaxed), 1);
    let unread = [charge("sent", 100, Hits::Consume(1)), charge("waiting", 100, Hits::Consume(1))];
    assert_eq!(approx.unread(&unread), [0, 1], "read again before their next local decision");
    // Both buckets' increments go with the next wake, the one in flight included.
    let mut again = collect(&approx, now + 20, sync::Wake::Last);
    again.sort_by(|a, b| a.key.cmp(&b.key));
    let sent: Vec<(&str, i64)> = again.iter().map(|i| (&*i.key, i.unsent.delta)).collect();
    assert_eq!(sent, [("sent", 3), ("waiting", 2)]);
    // A new warm-up: two beats an interval apart.
    approx.beaten(2, now + 1_000_000);
    assert!(!approx.is_ready());
    approx.beaten(2, now + 1_250_000);
    assert!(approx.is_ready());
}
