use super::*;

const MS: Duration = Duration::from_millis(1);

fn breaker(failures: u32) -> Breaker {
    Breaker::new(BreakerSettings { failures, ..Default::default() })
}

/// An instant well in the past, so that a drop (which reads the real clock) happens later
/// than every instant a test passes in.
fn past() -> Instant {
    Instant::now().checked_sub(Duration::from_secs(60)).unwrap_or_else(Instant::now)
}

fn fail(b: &Breaker, at: Instant) {
    if let Some(call) = b.admit(at) {
        call.record(true, at);
    }
}

fn succeed(b: &Breaker, at: Instant) {
    if let Some(call) = b.admit(at) {
        call.record(false, at);
    }
}

/// Opens `b` (whatever its minimum) at `t`.
fn open(b: &Breaker, t: Instant) {
    while b.state() == BreakerState::Closed {
        fail(b, t);
    }
}

#[test]
fn a_rate_below_the_threshold_never_opens_however_many_failures() {
    let b = breaker(5);
    let t = past();
    // One call in three fails, for ten windows: 10,000 failures, never half.
    for ms in 0..30_000 {
        let at = t + ms / 3 * MS;
        if ms % 3 == 0 {
            fail(&b, at);
        } else {
            succeed(&b, at);
        }
    }
    assert_eq!(b.state(), BreakerState::Closed);
    assert_eq!(b.opened_total(), 0);
}

#[test]
fn a_stall_seen_by_every_call_in_flight_is_not_an_outage() {
    let b = breaker(5);
    let t = past();
    for ms in 0..1000 {
        for _ in 0..20 {
            succeed(&b, t + ms * MS);
        }
    }
    // 16 calls in flight all time out in one 15 ms stall: 16 failures in a row.
    for _ in 0..16 {
        fail(&b, t + 1015 * MS);
    }
    assert_eq!(b.state(), BreakerState::Closed);
}

#[test]
fn opens_at_the_minimum_of_failures_and_not_before() {
    let b = breaker(5);
    let t = past();
    for _ in 0..4 {
        fail(&b, t);
    }
    assert_eq!(b.state(), BreakerState::Closed, "4 failures, 100 %: under the minimum");
    fail(&b, t + 10 * MS);
    assert_eq!(b.state(), BreakerState::Open);
    assert!(b.admit(t + 20 * MS).is_none());
    assert_eq!(b.opened_total(), 1);
}

#[test]
fn the_rate_counts_successes_in_the_window() {
    let b = breaker(5);
    let t = past();
    for _ in 0..6 {
        succeed(&b, t);
    }
    for _ in 0..5 {
        fail(&b, t);
    }
    assert_eq!(b.state(), BreakerState::Closed, "5 of 11 failed: under half");
    fail(&b, t);
    assert_eq!(b.state(), BreakerState::Open, "6 of 12: half");
}

#[test]
fn old_failures_slide_out_of_the_window() {
    let b = breaker(5);
    let t = past();
    for _ in 0..4 {
        fail(&b, t);
    }
    // 1.1 s later those four are out of the 1 s window: four more do not open it.
    let later = t + 1100 * MS;
    for _ in 0..4 {
        fail(&b, later);
    }
    assert_eq!(b.state(), BreakerState::Closed);
    fail(&b, later + 500 * MS);
    assert_eq!(b.state(), BreakerState::Open, "five within one window");
}

#[test]
fn successes_slide_out_too() {
    let b = breaker(1);
    let t = past();
    for _ in 0..100 {
        succeed(&b, t);
    }
    fail(&b, t + 500 * MS);
    assert_eq!(b.state(), BreakerState::Closed, "1 of 101");
    fail(&b, t + 1100 * MS);
    assert_eq!(b.state(), BreakerState::Open, "the successes left the window, the failures did not");
}

#[test]
fn one_probe_after_the_cooldown_closes_on_success() {
    let b = breaker(1);
    let t = past();
    fail(&b, t);
    assert!(b.admit(t + 700 * MS).is_none());
    let later = t + 1300 * MS;
    let probe = b.admit(later).expect("a probe after the cool-down");
    assert!(probe.is_probe());
    assert_eq!(b.state(), BreakerState::HalfOpen);
    assert!(b.admit(later).is_none(), "one probe at a time");
    probe.record(false, later);
    assert_eq!(b.state(), BreakerState::Closed);
    let call = b.admit(later).expect("closed");
    assert!(!call.is_probe());
    call.record(false, later);
}

#[test]
fn closing_forgets_the_failures_that_opened_it() {
    let b = breaker(3);
    let t = past();
    open(&b, t);
    let later = t + 1300 * MS;
    b.admit(later).expect("probe").record(false, later);
    fail(&b, later);
    fail(&b, later);
    assert_eq!(b.state(), BreakerState::Closed, "2 failures since closing");
}

#[test]
fn failed_probes_back_off() {
    let b = breaker(1);
    let t = past();
    fail(&b, t);
    let t1 = t + 1300 * MS;
    b.admit(t1).expect("probe").record(true, t1);
    assert_eq!(b.state(), BreakerState::Open);
    // Second cool-down is 2 s ± 20 %: still open after 1.5 s, probing after 2.5 s.
    assert!(b.admit(t1 + 1500 * MS).is_none());
    let t2 = t1 + 2500 * MS;
    b.admit(t2).expect("probe").record(true, t2);
    // Third: capped at 2 s ± 20 % (MAX_COOLDOWN), not 4 s: limiting resumes within a
    // cool-down of Redis coming back, however long it was away.
    assert!(b.admit(t2 + 1500 * MS).is_none());
    let t3 = t2 + 2500 * MS;
    b.admit(t3).expect("probe after 2 s ± 20 %").record(true, t3);
    assert!(b.admit(t3 + 2500 * MS).is_some_and(|c| c.is_probe()), "still 2 s ± 20 %");
}

#[test]
fn a_cooldown_set_above_the_cap_is_kept() {
    let b = Breaker::new(BreakerSettings { failures: 1, cooldown: 5000 * MS, ..Default::default() });
    let t = past();
    fail(&b, t);
    let t1 = t + 6100 * MS;
    b.admit(t1).expect("probe").record(true, t1);
    assert!(b.admit(t1 + 3900 * MS).is_none(), "5 s ± 20 %, not the 2 s cap");
    assert!(b.admit(t1 + 6100 * MS).is_some_and(|c| c.is_probe()));
}

#[test]
fn a_dropped_probe_reopens_with_the_same_cooldown() {
    let b = breaker(1);
    let t = past();
    fail(&b, t);
    let t1 = t + 1300 * MS;
    b.admit(t1).expect("probe").record(true, t1); // the cool-down is now 2 s ± 20 %
    let t2 = t1 + 2500 * MS;
    let probe = b.admit(t2).expect("probe");
    assert_eq!(b.state(), BreakerState::HalfOpen);
    drop(probe); // cancelled: no result
    let dropped = Instant::now();
    assert_eq!(b.state(), BreakerState::Open, "not left half-open");
    assert_eq!(b.opened_total(), 3);
    // Same 2 s ± 20 % from the drop, not 4 s.
    assert!(b.admit(dropped + 1500 * MS).is_none());
    let t3 = dropped + 2500 * MS;
    let probe = b.admit(t3).expect("probing again after the same cool-down");
    probe.record(false, t3);
    assert_eq!(b.state(), BreakerState::Closed);
}

#[test]
fn dropped_ordinary_calls_count_for_nothing() {
    let b = breaker(1);
    let t = past();
    for _ in 0..100 {
        drop(b.admit(t));
    }
    assert_eq!(b.state(), BreakerState::Closed);
}

#[test]
fn late_results_of_calls_admitted_before_opening_change_nothing() {
    let b = breaker(1);
    let t = past();
    let early_success = b.admit(t).expect("closed");
    let early_failure = b.admit(t).expect("closed");
    fail(&b, t);
    assert_eq!(b.state(), BreakerState::Open);
    early_success.record(false, t + 10 * MS);
    assert_eq!(b.state(), BreakerState::Open, "a late success does not close it");
    let later = t + 1300 * MS;
    b.admit(later).expect("probe").record(false, later);
    assert_eq!(b.state(), BreakerState::Closed);
    early_failure.record(true, later);
    assert_eq!(b.state(), BreakerState::Closed, "a failure from before does not reopen it");
}

#[test]
fn zero_failures_disables_it() {
    let b = breaker(0);
    let t = past();
    for _ in 0..100 {
        fail(&b, t);
    }
    assert!(b.admit(t).is_some_and(|c| !c.is_probe()));
    assert_eq!(b.opened_total(), 0);
}
