//! Calendar periods (`rate_limit.calendar`) through the whole service, on the memory store
//! and on a real redis-server: a monthly budget in Europe/Berlin and a descriptor with a
//! UTC day and a Tokyo week (one joint script call) are charged to their limits, each
//! answer's `duration_until_reset` counts to the period's next boundary, `/v1/usage` reads
//! the count back with the period and its next reset, and a plain `unit: month` (30 days)
//! keeps its own bucket. On Redis, the stored hash holds the period's start and end.

use std::time::{SystemTime, UNIX_EPOCH};

use envoy_types::pb::google::protobuf::UInt64Value;
use serde_json::Value;
use tollgate::app::StoreKind;
use tollgate::config::rule::{Calendar, Unit};

use crate::support::*;

const POLICY: &str = r#"
domain: billing
descriptors:
  - key: plan
    rate_limit:
      unit: month
      requests_per_unit: 3
      calendar: { time_zone: Europe/Berlin }
  - key: seat
    rate_limits:
      - { name: daily, unit: day, requests_per_unit: 2, calendar: {} }
      - { name: weekly, unit: week, requests_per_unit: 5, calendar: { time_zone: Asia/Tokyo } }
  - key: legacy
    rate_limit: { unit: month, requests_per_unit: 3, algorithm: fixed_window }
"#;

fn now_us() -> u64 {
    u64::try_from(SystemTime::now().duration_since(UNIX_EPOCH).expect("after 1970").as_micros()).expect("u64")
}

/// The seconds `duration_until_reset` may say for a boundary at `end_us`, read between
/// `before` and `after` (µs): rounded up, as the service reports.
fn within(reset_s: i64, end_us: u64, before: u64, after: u64) -> bool {
    let low = (end_us.saturating_sub(after) / 1_000_000) as i64;
    let high = end_us.saturating_sub(before).div_ceil(1_000_000) as i64;
    (low..=high).contains(&reset_s)
}

fn resets(response: &envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse) -> Vec<i64> {
    response.statuses.iter().map(|s| s.duration_until_reset.as_ref().map_or(-1, |d| d.seconds)).collect()
}

async fn calendar_periods_charge_count_to_the_boundary_and_read_back(app: &TestApp) {
    let month = Calendar::new(Some("Europe/Berlin"), Unit::Month).expect("calendar");
    let day = Calendar::new(None, Unit::Day).expect("calendar");
    let before = now_us();
    let plan = request("billing", &[&[("plan", "pro")]]);
    assert_eq!(app.allowed_of(4, &plan).await, 3, "three a month");
    let denied = app.check(plan.clone()).await;
    let after = now_us();
    assert!(over(&denied));
    let end = month.period_at(before).end_us;
    assert_eq!(end, month.period_at(after).end_us, "the test did not straddle a month's end");
    let reset = resets(&denied)[0];
    assert!(within(reset, end, before, after), "Retry-After counts to the 1st in Berlin: {reset} s");

    // Two limits of one descriptor, one script call: the day denies the third.
    let seat = request("billing", &[&[("seat", "s1")]]);
    assert_eq!(app.allowed_of(3, &seat).await, 2);
    let denied = app.check(seat).await;
    let after = now_us();
    assert!(over(&denied));
    assert!(within(resets(&denied)[0], day.period_at(before).end_us, before, after), "{denied:?}");

    // A plain month is 30 epoch-aligned days and its own bucket.
    let legacy = request("billing", &[&[("legacy", "pro")]]);
    assert_eq!(app.allowed_of(4, &legacy).await, 3, "a plain month is not charged by the calendar one");

    // A peek and /v1/usage read the count back with the period and its next reset.
    let mut peek = plan.clone();
    peek.descriptors[0].hits_addend = Some(UInt64Value { value: 0 });
    let peeked = app.check(peek).await;
    assert!(over(&peeked) && within(resets(&peeked)[0], end, before, now_us()));
    let response = app.admin("GET", "/v1/usage?domain=billing&descriptor=plan%3Dpro").await;
    let json: Value = serde_json::from_str(&response.body).expect("usage json");
    let limit = &json["limits"][0];
    assert_eq!((limit["remaining"].as_u64(), limit["consumed"].as_u64()), (Some(0), Some(3)), "{json}");
    assert_eq!((limit["unit"].as_str(), limit["algorithm"].as_str()), (Some("month"), Some("fixed_window")));
    assert_eq!(limit["period"], "calendar month, Europe/Berlin");
    assert_eq!(limit["calendar"]["next_reset_unix"].as_u64(), Some(end / 1_000_000), "{json}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_calendar_periods_charge_count_to_the_boundary_and_read_back() {
    let app = spawn_app(StoreKind::Memory, &[("billing.yaml", POLICY)]).await;
    calendar_periods_charge_count_to_the_boundary_and_read_back(&app).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_calendar_periods_charge_count_to_the_boundary_and_read_back() {
    let mut app = spawn_app(StoreKind::Redis, &[("billing.yaml", POLICY)]).await;
    let now = now_us();
    calendar_periods_charge_count_to_the_boundary_and_read_back(&app).await;
    let period = Calendar::new(Some("Europe/Berlin"), Unit::Month).expect("calendar").period_at(now);
    let mut con = app.redis().client();
    let key = "tg:cM:7:billing4:plan3:pro@13:Europe/Berlin";
    let stored: Vec<Option<u64>> =
        redis::cmd("HMGET").arg(key).arg(&["s", "c", "p"]).query(&mut con).expect("HMGET");
    assert_eq!(
        stored,
        vec![Some(period.start_us), Some(3), Some(period.end_us)],
        "the period's bounds are stored"
    );
    let expires: i64 = redis::cmd("PEXPIRETIME").arg(key).query(&mut con).expect("PEXPIRETIME");
    let grace = tollgate::algorithm::fixed_window::CALENDAR_GRACE_US;
    assert_eq!(expires, i64::try_from((period.end_us + grace).div_ceil(1000)).expect("i64"));
    let plain: i64 =
        redis::cmd("EXISTS").arg("tg:fM:7:billing6:legacy3:pro").query(&mut con).expect("EXISTS");
    assert_eq!(plain, 1, "the plain month keeps today's key");
}
