//! Calendar periods (`rate_limit.calendar`) on a real Redis Cluster, through the service:
//! single charges of calendar buckets spread over the masters and a two-limit descriptor
//! (one joint script call on its slot) are charged to their limits, a peek reads each
//! count back with `duration_until_reset` at the period's next boundary, and the hash on
//! the owning master holds the period's bounds.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use envoy_types::pb::google::protobuf::UInt64Value;
use tollgate::config::rule::{Calendar, Unit};

use crate::support::*;

const POLICY: &str = r#"
domain: billing
descriptors:
  - key: plan
    rate_limit: { unit: month, requests_per_unit: 2, calendar: { time_zone: Europe/Berlin } }
  - key: seat
    rate_limits:
      - { name: daily, unit: day, requests_per_unit: 2, calendar: {} }
      - { name: yearly, unit: year, requests_per_unit: 9, calendar: { time_zone: America/New_York } }
"#;

fn now_us() -> u64 {
    u64::try_from(SystemTime::now().duration_since(UNIX_EPOCH).expect("after 1970").as_micros()).expect("u64")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calendar_windows_charge_and_read_back_on_a_cluster() {
    let cluster = start_cluster().await;
    let app = spawn_on(&cluster, Duration::from_secs(2), &[("billing.yaml", POLICY)]).await;
    let month = Calendar::new(Some("Europe/Berlin"), Unit::Month).expect("calendar");
    let before = now_us();
    let users: Vec<String> = (0..6).map(|i| format!("u{i}")).collect();
    for user in &users {
        let plan = request("billing", &[&[("plan", user)]]);
        assert_eq!(app.allowed_of(3, &plan).await, 2, "{user}: two a month");
        let mut peek = plan;
        peek.descriptors[0].hits_addend = Some(UInt64Value { value: 0 });
        let peeked = app.check(peek).await;
        let after = now_us();
        assert!(over(&peeked), "{user}: spent");
        let end = month.period_at(before).end_us;
        let reset = peeked.statuses[0].duration_until_reset.as_ref().map_or(-1, |d| d.seconds);
        let low = (end.saturating_sub(after) / 1_000_000) as i64;
        let high = end.saturating_sub(before).div_ceil(1_000_000) as i64;
        assert!((low..=high).contains(&reset), "{user}: reset {reset} s, boundary in {low}..={high} s");
    }
    // The keys spread over the masters; each holds the period's bounds.
    let period = month.period_at(before);
    let mut owners = std::collections::BTreeSet::new();
    for user in &users {
        let key = format!("tg:cM:7:billing4:plan{}:{user}@13:Europe/Berlin", user.len());
        let owner = cluster.owner_of(cluster.keyslot(&key));
        owners.insert(owner);
        let stored = cluster.cli(owner, &["HMGET", &key, "s", "c", "p"]);
        let expected = format!("{}\n2\n{}", period.start_us, period.end_us);
        assert_eq!(stored, expected, "{key} on node {owner}");
    }
    assert!(owners.len() > 1, "the buckets span masters: {owners:?}");
    // Two calendar limits of one descriptor: one call on their slot; the day denies first.
    let seat = request("billing", &[&[("seat", "s1")]]);
    assert_eq!(app.allowed_of(3, &seat).await, 2);
    let mut peek = seat;
    peek.descriptors[0].hits_addend = Some(UInt64Value { value: 0 });
    let peeked = app.check(peek).await;
    assert!(over(&peeked));
    let day_end = Calendar::new(None, Unit::Day).expect("calendar").period_at(before).end_us;
    let reset = peeked.statuses[0].duration_until_reset.as_ref().map_or(-1, |d| d.seconds);
    assert!(reset <= day_end.saturating_sub(before).div_ceil(1_000_000) as i64 && reset > 0, "{reset}");
}
