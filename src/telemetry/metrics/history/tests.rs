use super::*;

#[test]
fn a_minute_counts_complete_seconds_and_averages_over_sixty() {
    let ring = RuleRing::default();
    for _ in 0..30 {
        ring.record(100, Class::Ok);
    }
    ring.record(100, Class::OverLimit);
    ring.record(101, Class::Failure);
    ring.record(101, Class::Failure);
    // The second in progress (102) is left out; so far nothing else.
    ring.record(102, Class::Ok);
    let minute = ring.minute(102);
    assert_eq!(minute.seconds.len(), SECONDS);
    assert_eq!(minute.seconds[SECONDS - 2], [30, 1, 0]);
    assert_eq!(minute.seconds[SECONDS - 1], [0, 0, 2]);
    let rates = minute.per_second();
    assert_eq!(rates, Rates { ok: 0.5, over_limit: 1.0 / 60.0, failure: 2.0 / 60.0 });
    assert_eq!(minute.series(Class::Failure).sum::<u64>(), 2);
}

#[test]
fn slots_roll_over_and_old_seconds_are_ignored() {
    let ring = RuleRing::default();
    ring.record(5, Class::Ok);
    ring.record(5, Class::Ok);
    // 65 uses the slot of 5: it starts afresh, it does not add to the old count.
    ring.record(65, Class::Ok);
    assert_eq!(ring.minute(66).seconds[SECONDS - 1], [1, 0, 0]);
    assert_eq!(ring.minute(66).per_second().ok, 1.0 / 60.0);
    // Second 5 is more than a minute before 66, and a slot nobody wrote since a minute
    // ago reads as zero even though its counter still holds an old second.
    ring.record(10, Class::OverLimit);
    assert_eq!(ring.minute(70).seconds.iter().map(|s| s[1]).sum::<u64>(), 1);
    assert_eq!(ring.minute(71).seconds.iter().map(|s| s[1]).sum::<u64>(), 0);
    assert_eq!(ring.minute(200).per_second(), Rates::default());
}

#[test]
fn the_first_minute_is_zero_filled_at_its_start() {
    let ring = RuleRing::default();
    ring.record(1, Class::Ok);
    let minute = ring.minute(2);
    assert_eq!(minute.seconds.len(), SECONDS);
    assert_eq!(minute.seconds[SECONDS - 1], [1, 0, 0]);
    assert!(minute.seconds[..SECONDS - 1].iter().all(|s| *s == [0, 0, 0]));
}

#[test]
fn classes_follow_the_outcome_and_the_local_fallback() {
    assert_eq!(Class::of(Outcome::WithinLimit, false), Class::Ok);
    assert_eq!(Class::of(Outcome::NearLimit, false), Class::Ok);
    assert_eq!(Class::of(Outcome::ShadowMode, false), Class::Ok);
    assert_eq!(Class::of(Outcome::Unlimited, false), Class::Ok);
    assert_eq!(Class::of(Outcome::OverLimit, false), Class::OverLimit);
    assert_eq!(Class::of(Outcome::FailureOpen, false), Class::Failure);
    assert_eq!(Class::of(Outcome::FailureClosed, false), Class::Failure);
    assert_eq!(Class::of(Outcome::WithinLimit, true), Class::Failure);
    assert_eq!(Class::of(Outcome::OverLimit, true), Class::Failure);
}

#[test]
fn buckets_are_contiguous_and_bound_their_values() {
    for micros in 0..100_000u64 {
        let b = bucket(micros);
        assert!(micros < upper_micros(b), "{micros} in bucket {b}");
        if b > 0 {
            assert!(micros >= upper_micros(b - 1), "{micros} in bucket {b}");
        }
        assert!(upper_micros(b) as f64 <= (micros as f64 * 1.25).max(micros as f64 + 1.0));
    }
    assert_eq!(bucket(u64::MAX), BUCKETS - 1);
}

#[test]
fn p99_is_the_bucket_of_the_99th_percentile_over_the_minute() {
    let ring = LatencyRing::default();
    assert_eq!(ring.p99_ms(10), None);
    for _ in 0..99 {
        ring.observe(10, 0.000_100); // 100 µs: bucket [96, 112)
    }
    ring.observe(10, 0.050); // one slow call: the 100th
    assert_eq!(ring.p99_ms(11), Some(0.112));
    ring.observe(11, 0.050);
    ring.observe(11, 0.050);
    // 3 of 102 are slow: the 99th percentile is a slow one, 50 ms in [49.152, 57.344).
    assert_eq!(ring.p99_ms(12), Some(57.344));
    // A minute later every call has aged out.
    assert_eq!(ring.p99_ms(72), None);
}

#[test]
fn rings_survive_a_reload_for_rules_that_stay_only() {
    let yaml = |rules: &[&str]| {
        let descriptors: String = rules
            .iter()
            .map(|name| {
                format!(
                    "  - key: {name}\n    rate_limit: {{ name: {name}, unit: second, requests_per_unit: 5 }}\n"
                )
            })
            .collect();
        format!("domain: api\ndescriptors:\n{descriptors}")
    };
    let snapshot = |rules: &[&str]| {
        crate::config::compile_sources(&[(std::path::PathBuf::from("api.yaml"), yaml(rules))])
            .expect("valid config")
    };
    let history = History::new();
    let first = history.for_snapshot(&snapshot(&["kept", "dropped"]));
    let rings = first.domain("api").expect("domain");
    rings[0].record(3, Class::Ok);
    rings[1].record(3, Class::Ok);
    let second = history.for_snapshot(&snapshot(&["added", "kept"]));
    let rings = second.domain("api").expect("domain");
    assert_eq!(rings[1].minute(4).seconds[SECONDS - 1], [1, 0, 0], "kept keeps its minute");
    assert_eq!(rings[0].minute(4).seconds[SECONDS - 1], [0, 0, 0], "added starts empty");
    // `dropped` is forgotten: bringing it back starts it empty.
    let third = history.for_snapshot(&snapshot(&["dropped"]));
    assert_eq!(third.domain("api").expect("domain")[0].minute(4).per_second(), Rates::default());
    assert!(third.domain("other").is_none());
}
