//! `rollout: r` on a limit: a stable share r of its buckets is enforced, the rest decided
//! and counted as `shadow_rollout`. Two instances on one Redis agree on which buckets are
//! in, a restart keeps them, and raising r by reload changes no bucket's state.

use std::collections::BTreeSet;

use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use tollgate::app::StoreKind;

use crate::support::*;

const USERS: usize = 2_000;

fn policy(rollout: &str) -> String {
    format!(
        "domain: api\ndescriptors:\n  - key: user\n    rate_limit:\n      name: per-user\n      unit: hour\n      \
         requests_per_unit: 1\n      rollout: {rollout}\n"
    )
}

fn user(i: usize) -> RateLimitRequest {
    request("api", &[&[("user", &format!("u{i}"))]])
}

/// A second instance on `first`'s Redis with its own copy of the policy.
async fn another(first: &TestApp, yaml: &str) -> TestApp {
    let url = first.redis.as_ref().expect("own redis").url();
    let options = Options { redis_url: Some(url), ..Options::new(StoreKind::Redis) };
    spawn_with(options, &[("api.yaml", yaml)]).await
}

fn denied(response: &RateLimitResponse) -> bool {
    !is_ok(&response.statuses[0])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stable_share_of_buckets_is_enforced_the_rest_counted_as_shadow_rollout() {
    let yaml = policy("0.25");
    let a = spawn_with(Options::new(StoreKind::Redis), &[("api.yaml", &yaml)]).await;
    let b = another(&a, &yaml).await;

    // Each user's first request on A (allowed: 1 per hour), the second on B: it is over the
    // limit in every bucket, and OVER_LIMIT only in the enforced ones.
    let mut enforced = BTreeSet::new();
    for i in 0..USERS {
        let first = a.check(user(i)).await;
        assert!(is_ok(&first.statuses[0]) && !over(&first), "user {i}'s first request");
        let second = b.check(user(i)).await;
        assert_eq!(over(&second), denied(&second), "the overall code follows the descriptor's");
        if over(&second) {
            enforced.insert(i);
        } else {
            // Staged: over its limit all the same, so it reports 0 remaining.
            assert_eq!(second.statuses[0].limit_remaining, 0, "user {i}: staged, but counted");
        }
    }
    let share = enforced.len() as f64 / USERS as f64;
    assert!((0.22..=0.28).contains(&share), "{} of {USERS} enforced: {share}", enforced.len());

    // The same users are in on A, and on an instance started afresh.
    let c = another(&a, &yaml).await;
    for (app, name) in [(&a, "A"), (&c, "C")] {
        for i in 0..USERS {
            assert_eq!(over(&app.check(user(i)).await), enforced.contains(&i), "user {i} on {name}");
        }
    }

    // The metrics tell the two apart: B's second requests, as decided.
    let text = b.metrics().await;
    let series = |result: &str| {
        metric(
            &text,
            &format!(r#"tollgate_decisions_total{{domain="api",rule="per-user",result="{result}"}}"#),
        )
    };
    assert_eq!(series("over_limit"), Some(enforced.len() as f64), "{text}");
    assert_eq!(series("shadow_rollout"), Some((USERS - enforced.len()) as f64), "{text}");

    // Raising the rollout by reload changes no bucket: every user is at its limit already,
    // so every one is now denied, and those enforced before stay so.
    std::fs::write(a.config_path().join("api.yaml"), policy("1")).expect("write");
    assert_eq!(a.admin("POST", "/reload").await.status, 200);
    let rlconfig = a.admin("GET", "/rlconfig").await.body;
    assert!(!rlconfig.contains("rollout"), "rollout 1 is the default: {rlconfig}");
    for i in 0..USERS {
        assert!(over(&a.check(user(i)).await), "user {i} after rollout 1");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_staged_denial_spares_no_enforced_limit_its_charge() {
    // Two limits on one descriptor: `burst` enforced (3 per hour), `daily` staged for every
    // bucket but a millionth (1 per day): `daily`'s denial must not stop `burst` counting.
    let yaml = "domain: api\ndescriptors:\n  - key: user\n    rate_limits:\n      \
                - { name: burst, unit: hour, requests_per_unit: 3 }\n      \
                - { name: daily, unit: day, requests_per_unit: 1, rollout: 0.000001 }\n";
    let app = spawn_with(Options::new(StoreKind::Redis), &[("api.yaml", yaml)]).await;
    // A user whose `daily` bucket is staged (all but one in a million are).
    let alice = request("api", &[&[("user", "alice")]]);
    let codes: Vec<bool> = {
        let mut codes = Vec::new();
        for _ in 0..5 {
            codes.push(over(&app.check(alice.clone()).await));
        }
        codes
    };
    assert_eq!(codes, [false, false, false, true, true], "burst counts every request: 3 pass");
    let status = app.admin("GET", "/v1/status").await.body;
    let json: serde_json::Value = serde_json::from_str(&status).expect("status JSON");
    let limits = &json["domains"][0]["rules"][0]["limits"];
    assert_eq!(limits[1]["rollout"], serde_json::json!(0.000001), "{status}");
    assert_eq!(limits[0]["rollout"], serde_json::json!(1.0), "{status}");
    let page = app.admin("GET", "/").await.body;
    assert!(page.contains("(rollout 0.0001%)"), "the status page shows the staged limit");
}
