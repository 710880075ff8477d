//! Token budgets that cannot be overspent: a reservation through a real Envoy. The
//! request-time call carries the request's estimate (`hits_addend` from `x-max-tokens`) and
//! Envoy's `x-request-id` as the reservation entry; Tollgate holds the estimate or refuses
//! the request before the upstream is called. The stream-end call (`apply_on_stream_done`)
//! names the same reservation with the usage the upstream reported (dynamic metadata), and
//! settles it: what was not used comes back, what went over is charged.
//!
//! The upstream answers `x-tokens-used` from the request's `x-tokens` after `x-delay-ms`: a
//! long LLM stream whose usage is known only at its end.

use std::sync::{Arc, Barrier};
use std::time::{Duration, SystemTime};

use crate::harness::http;
use crate::harness::load::{sleep_until, window_start};
use crate::harness::topology::{Changes, Topology};
use crate::token_budgets::{consumed, USAGE_TO_METADATA};

/// 1,000 tokens an hour per user, reserved per request by `x-request-id`.
const BUDGET: &str = "
domain: edge
reservations: { key: reservation, ttl: 1m }
descriptors:
  - key: user
    rate_limit: { name: tokens-per-user, unit: hour, requests_per_unit: 1000, algorithm: fixed_window }
";

/// Reserve the estimate at request time, settle with the usage at stream end.
const RATE_LIMITS: &str = r#"
- actions:
    - { request_headers: { header_name: x-user, descriptor_key: user } }
    - { request_headers: { header_name: x-request-id, descriptor_key: reservation } }
  hits_addend: { format: "%REQ(x-max-tokens)%" }
- actions:
    - { request_headers: { header_name: x-user, descriptor_key: user } }
    - { request_headers: { header_name: x-request-id, descriptor_key: reservation } }
  apply_on_stream_done: true
  hits_addend: { format: "%DYNAMIC_METADATA(tollgate.usage:tokens)%" }
"#;

/// The budget's hour window, with at least two minutes left of it (a test that crossed the
/// edge would see a fresh budget).
fn inside_one_window() {
    const HOUR: Duration = Duration::from_secs(3600);
    let now = SystemTime::now();
    if window_start(now, HOUR) + HOUR < now + Duration::from_secs(120) {
        sleep_until(window_start(now, HOUR) + HOUR + Duration::from_millis(100));
    }
}

/// Waits (up to 10 s) until `user` has consumed exactly `tokens`: the stream-end calls go
/// after the responses, and a settle may take a reservation's amount down as well as up.
fn until_consumed(edge: &Topology, user: &str, tokens: u64) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let now = consumed(edge, user);
        if now == tokens {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "{user}: {now} tokens consumed, {tokens} expected");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn start() -> Topology {
    inside_one_window();
    Topology::start_changed(Changes {
        policies: &[("edge.yaml", BUDGET)],
        filter_rate_limits: Some(RATE_LIMITS),
        http_filters: Some(USAGE_TO_METADATA),
        ..Changes::default()
    })
}

/// `GET /` as `user`, estimating `estimate` tokens and using `used`, streaming for `delay`.
fn ask(edge: &Topology, user: &str, estimate: u64, used: u64, delay: Duration) -> http::Response {
    let (estimate, used, delay) = (estimate.to_string(), used.to_string(), delay.as_millis().to_string());
    edge.get(
        "/",
        &[("x-user", user), ("x-max-tokens", &estimate), ("x-tokens", &used), ("x-delay-ms", &delay)],
    )
}

/// Eight streams of 300 estimated (250 used) at once against 1,000: three are held, five are
/// refused before the upstream; while the three run, 900 is spent; when they end, 750.
#[test]
fn concurrent_streams_never_overspend_a_reserved_budget_and_what_is_unused_comes_back() {
    let edge = Arc::new(start());
    let barrier = Arc::new(Barrier::new(8));
    let streams: Vec<_> = (0..8)
        .map(|_| {
            let (edge, barrier) = (edge.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                ask(&edge, "erin", 300, 250, Duration::from_millis(1500)).status
            })
        })
        .collect();
    // The three held streams reach the upstream and stream there for 1.5 s: the budget
    // then shows their reservations, whichever instant it is read.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while edge.upstream.hits() < 3 {
        assert!(
            std::time::Instant::now() < deadline,
            "{} streams reached the upstream",
            edge.upstream.hits()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(consumed(&edge, "erin"), 900, "three reservations of 300 held while they stream");
    let mut statuses: Vec<u16> = streams.into_iter().map(|s| s.join().expect("stream thread")).collect();
    statuses.sort_unstable();
    assert_eq!(statuses, [200, 200, 200, 429, 429, 429, 429, 429], "{}", edge.envoy.log_tail());
    assert_eq!(edge.upstream.hits(), 3, "a refused request never reaches the upstream");
    // Each settles at 250: 150 of the 900 comes back.
    until_consumed(&edge, "erin", 750);
    // 250 left: an estimate of 300 is refused, one of 250 passes and leaves nothing.
    assert_eq!(ask(&edge, "erin", 300, 10, Duration::ZERO).status, 429);
    assert_eq!(edge.upstream.hits(), 3);
    let last = ask(&edge, "erin", 250, 250, Duration::ZERO);
    assert_eq!(last.status, 200, "{last:#?}");
    assert_eq!(last.int_header("x-ratelimit-remaining"), 0, "the headers describe the budget after the hold");
    until_consumed(&edge, "erin", 1000);
    assert_eq!(edge.envoy.stat_or_zero("cluster.upstream.ratelimit.error"), 0, "{}", edge.envoy.log_tail());
}

/// A stream that used more than it reserved is charged the overrun, past the budget if need
/// be; a stream that used less gives the rest back.
#[test]
fn an_overrun_is_charged_and_an_underrun_given_back() {
    let edge = start();
    let first = ask(&edge, "finn", 100, 400, Duration::ZERO);
    assert_eq!(first.status, 200, "{first:#?}");
    assert_eq!(first.int_header("x-ratelimit-remaining"), 900, "the state after the reservation of 100");
    until_consumed(&edge, "finn", 400);
    // 600 left: 700 does not fit; 600 does, and uses 50 of it.
    assert_eq!(ask(&edge, "finn", 700, 1, Duration::ZERO).status, 429);
    assert_eq!(ask(&edge, "finn", 600, 50, Duration::ZERO).status, 200);
    until_consumed(&edge, "finn", 450);
}
