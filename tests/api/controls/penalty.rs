//! `penalty` on a limit: once a bucket denies a request, it denies every request for that
//! long after the breach, whatever refills meanwhile, and the denials do not extend it;
//! `duration_until_reset` and `Retry-After` say when it ends, `/v1/usage` shows it and
//! `/v1/reset` lifts it. Exact across instances on one Redis (the production store
//! timeout), and on the memory store.
//!
//! The limit is one of two of a descriptor (`rate_limits`), so every charge is a joint
//! group: a breach vetoes the group, and the penalty must be written all the same.

use std::time::Duration;

use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use serde_json::Value;
use tokio::time::{sleep_until, Instant};
use tollgate::app::StoreKind;

use crate::support::*;

const TOKEN: &str = "penalty-t0ken";
const PENALTY: Duration = Duration::from_secs(3);
/// GCRA, 2 a second: a bucket emptied is whole again within a second.
const POLICY: &str = "domain: api\ndescriptors:\n  - key: client\n    rate_limits:\n      \
                      - { name: burst, unit: second, requests_per_unit: 2, penalty: 3s }\n      \
                      - { name: daily, unit: day, requests_per_unit: 1000 }\n";

fn client(id: &str) -> RateLimitRequest {
    request("api", &[&[("client", id)]])
}

/// `duration_until_reset` of the descriptor.
fn reset(response: &RateLimitResponse) -> Duration {
    let d = response.statuses[0].duration_until_reset.expect("duration_until_reset");
    Duration::new(u64::try_from(d.seconds).expect("positive"), u32::try_from(d.nanos).expect("positive"))
}

fn retry_after(response: &RateLimitResponse) -> Option<u64> {
    response
        .response_headers_to_add
        .iter()
        .find(|h| h.key == "retry-after")
        .map(|h| h.value.parse().expect("int"))
}

struct Token(tempfile::TempDir);

impl Token {
    fn new() -> Token {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("token"), format!("{TOKEN}\n")).expect("token");
        Token(dir)
    }

    fn options(&self, store: StoreKind) -> Options {
        let production = tollgate::app::ServeSettings::new(std::path::PathBuf::new());
        Options {
            store_timeout: production.store_timeout,
            admin_token_file: Some(self.0.path().join("token")),
            response_headers: true,
            ..Options::new(store)
        }
    }
}

async fn admin(app: &TestApp, method: &str, path: &str) -> (u16, Value) {
    let bearer = format!("Bearer {TOKEN}");
    let response =
        http_with(app.admin_addr(), method, path, &[("Authorization", &bearer)]).await.expect("admin");
    (response.status, serde_json::from_str(&response.body).unwrap_or(Value::String(response.body)))
}

/// Empties `id`'s bucket on `app` and breaches it: the breach's answer, and when it was
/// sent and received (the store decided it in between).
async fn breach(app: &TestApp, id: &str) -> (RateLimitResponse, Instant, Instant) {
    for n in 0..2 {
        assert!(!over(&app.check(client(id)).await), "{id}: request {n} within the limit");
    }
    let sent = Instant::now();
    let denied = app.check(client(id)).await;
    let received = Instant::now();
    assert!(over(&denied), "{id}: the third request in a second is denied");
    (denied, sent, received)
}

/// From the breach on, `checker` (another instance, or the same) is asked every 100 ms until
/// the penalty is surely over: every answer decided within it is a denial that says when it
/// ends, never later than the breach said (`duration_until_reset` is in whole seconds,
/// rounded up), including those a second and two after the breach, when the bucket itself
/// was whole again; and the first request after its end passes (had the denials extended
/// the penalty, it would not). How many of `id`'s requests passed in all.
async fn served_in_full(breaching: &TestApp, checker: &TestApp, id: &str) -> u64 {
    let (denied, sent, received) = breach(breaching, id).await;
    assert_eq!(reset(&denied), PENALTY, "duration_until_reset says when the penalty ends");
    assert_eq!(retry_after(&denied), Some(3), "Retry-After says when the penalty ends");
    let mut refilled_denials = 0;
    let mut passed = 2;
    loop {
        let asked = Instant::now();
        let response = checker.check(client(id)).await;
        let answered = Instant::now();
        if answered >= sent + PENALTY {
            // Decided at about the end: either way.
            passed += u64::from(!over(&response));
            break;
        }
        assert!(over(&response), "{id}: allowed {:?} after the breach, within the penalty", asked - sent);
        // The end it reports is the breach's, give or take the rounding up to a second.
        let end = asked + reset(&response);
        assert!(
            end <= received + PENALTY + Duration::from_secs(1) && end >= sent + PENALTY,
            "{id}: the penalty moved: it ends {:?} after the breach",
            end - sent
        );
        if asked >= received + Duration::from_secs(1) {
            refilled_denials += 1;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(refilled_denials >= 5, "{id}: only {refilled_denials} requests after the bucket refilled");
    // Surely over: the breach was decided before `received`.
    sleep_until(received + PENALTY + Duration::from_millis(20)).await;
    assert!(!over(&checker.check(client(id)).await), "{id}: the penalty ended");
    passed + 1
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_breach_is_denied_for_the_penalty_on_every_instance() {
    let token = Token::new();
    let a = spawn_with(token.options(StoreKind::Redis), &[("api.yaml", POLICY)]).await;
    let url = a.redis.as_ref().expect("own redis").url();
    let b = spawn_with(
        Options { redis_url: Some(url), ..token.options(StoreKind::Redis) },
        &[("api.yaml", POLICY)],
    )
    .await;

    // Breached on A, served on B.
    let passed = served_in_full(&a, &b, "mallory").await;

    // The denials vetoed their group: the day's limit counts only the requests that passed.
    let (status, usage) = admin(&b, "GET", "/v1/usage?domain=api&descriptor=client%3Dmallory").await;
    assert_eq!(status, 200, "{usage}");
    assert_eq!(usage["limits"][1]["name"], "daily", "{usage}");
    assert_eq!(usage["limits"][1]["consumed"].as_u64(), Some(passed), "{usage}");

    // During a penalty, /v1/usage shows it; /v1/reset lifts it.
    let (_, sent, _) = breach(&a, "trudy").await;
    let (status, usage) = admin(&b, "GET", "/v1/usage?domain=api&descriptor=client%3Dtrudy").await;
    assert_eq!(status, 200, "{usage}");
    let burst = &usage["limits"][0];
    assert_eq!(
        (burst["name"].as_str(), burst["penalty_seconds"].as_u64()),
        (Some("burst"), Some(3)),
        "{usage}"
    );
    assert_eq!(burst["remaining"], 0, "{usage}");
    let left = burst["reset_seconds"].as_u64().expect("reset_seconds");
    assert!(Instant::now() >= sent + PENALTY || (1..=3).contains(&left), "{usage}");
    let (status, reset) = admin(&a, "POST", "/v1/reset?domain=api&descriptor=client%3Dtrudy").await;
    assert_eq!(status, 200, "{reset}");
    assert!(!over(&a.check(client("trudy")).await), "the reset lifted the penalty");

    // Shown where operators look.
    let rlconfig = a.admin("GET", "/rlconfig").await.body;
    assert!(rlconfig.contains("burst: 2 per second (gcra) penalty 3s"), "{rlconfig}");
    let status: Value = serde_json::from_str(&a.admin("GET", "/v1/status").await.body).expect("json");
    let rule = &status["domains"][0]["rules"][0];
    assert_eq!(rule["limits"][0]["penalty_seconds"], 3, "{status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_memory_store_serves_the_penalty_the_same() {
    let token = Token::new();
    let app = spawn_with(token.options(StoreKind::Memory), &[("api.yaml", POLICY)]).await;
    served_in_full(&app, &app, "eve").await;
    breach(&app, "oscar").await;
    let (status, _) = admin(&app, "POST", "/v1/reset?domain=api&descriptor=client%3Doscar").await;
    assert_eq!(status, 200);
    assert!(!over(&app.check(client("oscar")).await), "the reset lifted the penalty");
}
