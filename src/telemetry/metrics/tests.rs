//! Unit tests of the metric families: saturation, buckets, config timestamps.

use super::families::latency_buckets;
use super::*;

#[test]
fn hits_saturate_instead_of_wrapping() {
    let metrics = Metrics::new();
    let counters = metrics.rule_counters("d", "r");
    counters.record(Outcome::OverLimit, u64::MAX);
    counters.record(Outcome::OverLimit, 5);
    assert_eq!(counters.hits.get(), u64::MAX);
    assert!(metrics
        .encode()
        .contains(&format!(r#"tollgate_hits_total{{domain="d",rule="r"}} {}"#, u64::MAX)));
}

#[test]
fn latency_buckets_read_envoys_timeout_exactly() {
    let buckets = latency_buckets();
    assert!(buckets.windows(2).all(|w| w[0] < w[1]), "{buckets:?}");
    for bound in [0.000_05, 0.01, 0.02, 3.2768] {
        assert!(buckets.contains(&bound), "{bound} in {buckets:?}");
    }
    let metrics = Metrics::new();
    metrics.observe_request(0.015);
    let text = metrics.encode();
    assert!(text.contains(r#"tollgate_request_duration_seconds_bucket{le="0.01"} 0"#), "{text}");
    assert!(text.contains(r#"tollgate_request_duration_seconds_bucket{le="0.02"} 1"#), "{text}");
}

#[test]
fn a_failed_reload_leaves_the_last_success_behind_the_last_attempt() {
    let metrics = Metrics::new();
    metrics.serving("v1");
    let success = metrics.config_last_success.get();
    assert!(success > 1.6e9, "a Unix time: {success}");
    assert_eq!(metrics.config_last_attempt.get(), success);
    metrics.reload(false);
    assert_eq!(metrics.config_last_success.get(), success);
    assert!(metrics.config_last_attempt.get() >= success);
    metrics.reload(true);
    assert_eq!(metrics.config_last_success.get(), metrics.config_last_attempt.get());
}
