//! The incident switch across a partition (issue 37, hole 6): two instances on one real
//! Redis at production flags, A reaching it through a TCP front (`support/front.rs`) that
//! the test cuts. A change A takes while cut stays pending; when A is back, it lands only if
//! nobody changed that scope in Redis since A last read it: an override ended through B
//! stays ended, a newer set through B is neither ended nor replaced by A's older change.
//! And overrides read back from Redis are capped at the maximum TTL, whoever wrote them.

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tollgate::app::StoreKind;
use tollgate::sources::overrides::{MAX_TTL_SECONDS, VISIBLE_WITHIN};

use super::incident::{admin, user, LOCKED, OTHER, POLICY, TOKEN};
use crate::front_support::Front;
use crate::support::*;

const SPARE: &str =
    "domain: spare\ndescriptors:\n  - key: user\n    rate_limit: { unit: hour, requests_per_unit: 1 }\n";
const FILES: [(&str, &str); 4] =
    [("api.yaml", POLICY), ("web.yaml", OTHER), ("locked.yaml", LOCKED), ("spare.yaml", SPARE)];
/// How long A may take to reach Redis again once its front is restored: its silenced
/// connections are replaced after no reply (`tests/resilience/faults.rs` holds 5 s).
const RECONNECT_WITHIN: Duration = Duration::from_secs(15);

/// Options of an instance with the admin token at the production store timeout.
fn production(token_file: &std::path::Path, redis_url: String) -> Options {
    let defaults = tollgate::app::ServeSettings::new(std::path::PathBuf::new());
    Options {
        store_timeout: defaults.store_timeout,
        admin_token_file: Some(token_file.to_path_buf()),
        redis_url: Some(redis_url),
        ..Options::new(StoreKind::Redis)
    }
}

fn token_file() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("admin-token");
    std::fs::write(&file, format!("{TOKEN}\n")).expect("write token");
    (dir, file)
}

/// The overrides `app` lists, as sorted `(scope, mode)` pairs.
async fn listed(app: &TestApp) -> Vec<(String, String)> {
    let (status, listed) = admin(app, "GET", "/v1/override", Some(TOKEN), "").await;
    assert_eq!(status, 200, "{listed}");
    let mut pairs: Vec<(String, String)> = listed["overrides"]
        .as_array()
        .expect("overrides[]")
        .iter()
        .map(|o| {
            (o["scope"].as_str().unwrap_or("?").to_string(), o["mode"].as_str().unwrap_or("?").to_string())
        })
        .collect();
    pairs.sort();
    pairs
}

fn pairs(of: &[(&str, &str)]) -> Vec<(String, String)> {
    of.iter().map(|(s, m)| (s.to_string(), m.to_string())).collect()
}

/// Polls until `app` lists `want`, at most `within`; how long it took.
async fn until_listed(app: &TestApp, want: &[(String, String)], within: Duration) -> Option<Duration> {
    let started = Instant::now();
    loop {
        if listed(app).await == want {
            return Some(started.elapsed());
        }
        if started.elapsed() > within {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `method path` on `app` with the token; the answer's status and `fleet`.
async fn call(app: &TestApp, method: &str, path: &str, body: &str) -> (u16, Value) {
    let (status, answer) = admin(app, method, path, Some(TOKEN), body).await;
    (status, answer["fleet"].clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_made_while_cut_from_redis_never_undo_newer_ones_made_elsewhere() {
    let (_dir, token) = token_file();
    let redis = RedisServer::start();
    let front = Front::to_port(redis.port());
    let a = spawn_with(production(&token, front.url()), &FILES).await;
    let b = spawn_with(production(&token, redis.url()), &FILES).await;

    // Two overrides set through B, which A reads (the readiness check before the cut).
    for scope in ["api", "web"] {
        let body = format!(r#"{{"scope": "{scope}", "mode": "shadow"}}"#);
        assert_eq!(call(&b, "POST", "/v1/override", &body).await, (200, json!("shared")));
    }
    let before = pairs(&[("api", "shadow"), ("web", "shadow")]);
    assert!(until_listed(&a, &before, VISIBLE_WITHIN).await.is_some(), "A reads B's overrides");

    // A is cut: its open connections go silent, new ones find nothing behind the front.
    front.silence_existing();
    front.set_target_port(crate::redis_support::free_port());
    // Changes through A: honoured there at once, pending for the fleet.
    let on_a = [
        ("POST", "/v1/override", r#"{"scope": "api", "mode": "open"}"#),
        ("DELETE", "/v1/override?scope=web", ""),
        ("POST", "/v1/override", r#"{"scope": "locked", "mode": "open"}"#),
        // Nobody else touches `spare`: A's change lands (and shows A has replayed).
        ("POST", "/v1/override", r#"{"scope": "spare", "mode": "open", "ttl_seconds": 600}"#),
    ];
    for (method, path, body) in on_a {
        assert_eq!(call(&a, method, path, body).await, (200, json!("pending")), "{method} {path} {body}");
    }
    // Later, through B: `api` ended, `web` set anew, `locked` set otherwise.
    assert_eq!(call(&b, "DELETE", "/v1/override?scope=api", "").await, (200, json!("shared")));
    assert_eq!(call(&b, "POST", "/v1/override", r#"{"scope": "web", "mode": "open"}"#).await.0, 200);
    assert_eq!(call(&b, "POST", "/v1/override", r#"{"scope": "locked", "mode": "shadow"}"#).await.0, 200);
    let newest = pairs(&[("locked", "shadow"), ("web", "open")]);
    assert_eq!(listed(&b).await, newest);

    // A is back. Once B lists `spare`, A has replayed every pending change (in order).
    let restored = Instant::now();
    front.set_target_port(redis.port());
    let fleet = pairs(&[("locked", "shadow"), ("spare", "open"), ("web", "open")]);
    let mut seen = listed(&b).await;
    while !seen.iter().any(|(scope, _)| scope == "spare") && restored.elapsed() <= RECONNECT_WITHIN {
        tokio::time::sleep(Duration::from_millis(20)).await;
        seen = listed(&b).await;
    }
    println!("figures: A's pending changes replayed {:?} after its front was restored", restored.elapsed());
    assert_eq!(seen, fleet, "B after A's replay: only `spare` is A's");
    assert!(until_listed(&a, &fleet, VISIBLE_WITHIN).await.is_some(), "A: {:?}", listed(&a).await);

    // And it stays so on both, at every sync: the ended override never returns, and no
    // request of `api` is answered under one (counted whatever the store answers).
    let watched = Instant::now();
    while watched.elapsed() <= 2 * VISIBLE_WITHIN {
        for (app, name) in [(&a, "A"), (&b, "B")] {
            assert_eq!(listed(app).await, fleet, "{name}, {:?} after the replay", watched.elapsed());
            app.check(user("api", "alice")).await;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for (app, name) in [(&a, "A"), (&b, "B")] {
        let text = app.metrics().await;
        for mode in ["open", "shadow"] {
            let series = format!(r#"tollgate_override_requests_total{{domain="api",mode="{mode}"}}"#);
            assert_eq!(metric(&text, &series), Some(0.0), "{name}: no `api` request under an override");
        }
    }
    let text = a.metrics().await;
    let refused = |change: &str| format!(r#"tollgate_override_replays_refused_total{{change="{change}"}}"#);
    assert_eq!(metric(&text, &refused("set")), Some(2.0), "api and locked: {text}");
    assert_eq!(metric(&text, &refused("end")), Some(1.0), "web: {text}");
    assert_eq!(metric(&b.metrics().await, &refused("set")), Some(0.0), "exported from startup");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_override_written_in_redis_with_a_longer_ttl_is_read_back_capped() {
    let (_dir, token) = token_file();
    let redis = RedisServer::start();
    let app = spawn_with(production(&token, redis.url()), &FILES).await;
    let now_ms = tollgate::sources::overrides::now_ms();
    let ten_years_ms = 10 * 365 * 86_400_000;
    // As a hand (or an older release, or a skewed clock) could write them: one that claims
    // ten years from its set time, one set "in ten years".
    for (scope, set_at) in [("api", now_ms), ("web", now_ms + ten_years_ms)] {
        let record = json!({
            "scope": scope, "mode": "open", "set_by": "redis-cli",
            "set_at_ms": set_at, "expires_at_ms": set_at + ten_years_ms,
        });
        let _: () = redis::cmd("HSET")
            .arg("tollgate:overrides")
            .arg(scope)
            .arg(record.to_string())
            .query(&mut redis.client())
            .expect("HSET");
    }
    let both = pairs(&[("api", "open"), ("web", "open")]);
    assert!(until_listed(&app, &both, VISIBLE_WITHIN).await.is_some(), "{:?}", listed(&app).await);
    let (_, answer) = admin(&app, "GET", "/v1/override", Some(TOKEN), "").await;
    for o in answer["overrides"].as_array().expect("overrides[]") {
        let left = o["expires_in_seconds"].as_u64().expect("expires_in_seconds");
        assert!(
            (MAX_TTL_SECONDS - 60..=MAX_TTL_SECONDS).contains(&left),
            "capped at a day from when it was read or set: {o}"
        );
    }
}
