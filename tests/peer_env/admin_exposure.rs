//! Issue 37, hole 11: the admin port as peer mode binds it (every interface, the peer's
//! debug port) shows no client's value, nor an unkeyed hash of one, to whoever reaches it
//! without `--admin-token-file`. With a token, its holder sees what operators need; on
//! loopback, nothing changes.
//!
//! Each test starts the real binary as `ratelimit` on free ports, sends requests carrying
//! known client values, then reads every admin GET endpoint.

use std::net::SocketAddr;

use sha2::{Digest, Sha256};
use tonic::transport::Channel;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;

use crate::process::Peer;
use crate::redis_support::free_port;
use crate::support::{eventually, http, http_with, request, HttpResponse};
use crate::{local, PATIENCE};

/// The clients' values: an IPv4 address (its plain SHA-256 reverses in seconds) and a user.
const ADDRESSES: [&str; 2] = ["203.0.113.7", "198.51.100.23"];
const USER: &str = "alice@example.com";

/// A value no request carries, for the endpoints that take a descriptor.
const STRANGER: &str = "192.0.2.200";

/// Bearer token of the token-file case.
const TOKEN: &str = "an-admin-token-of-some-length-0123456789";

/// The peer's listeners on free ports, its file config, and `extra` variables.
struct Started {
    peer: Peer,
    grpc: u16,
    admin: SocketAddr,
    health: SocketAddr,
    _runtime: tempfile::TempDir,
}

async fn start(extra: &[(&str, &str)]) -> Started {
    let root = tempfile::tempdir().expect("runtime root");
    let config = root.path().join("ratelimit/config");
    std::fs::create_dir_all(&config).expect("config dir");
    let policy = "domain: api\ndescriptors:\n  - key: remote_address\n    \
                  rate_limit: { unit: hour, requests_per_unit: 1000 }\n  - key: user\n    \
                  rate_limit: { unit: hour, requests_per_unit: 1000 }\n";
    std::fs::write(config.join("api.yaml"), policy).expect("policy");
    let (grpc, health, debug) = (free_port(), free_port(), free_port());
    let mut env: Vec<(String, String)> = [
        ("RUNTIME_ROOT", root.path().to_str().expect("UTF-8").to_string()),
        ("RUNTIME_SUBDIRECTORY", "ratelimit".to_string()),
        ("GRPC_PORT", grpc.to_string()),
        ("PORT", health.to_string()),
        ("DEBUG_PORT", debug.to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    let mut peer = Peer::start(&env);
    peer.until_healthy(local(health)).await;
    Started { peer, grpc, admin: local(debug), health: local(health), _runtime: root }
}

/// Requests from each address (the busiest first) and from the user.
async fn traffic(grpc: u16) {
    let channel = Channel::from_shared(format!("http://{}", local(grpc))).expect("uri").connect().await;
    let mut client = RateLimitServiceClient::new(channel.expect("connect"));
    for (n, address) in [(12, ADDRESSES[0]), (6, ADDRESSES[1]), (3, USER)] {
        let key = if address == USER { "user" } else { "remote_address" };
        for _ in 0..n {
            client.should_rate_limit(request("api", &[&[(key, address)]])).await.expect("ShouldRateLimit");
        }
    }
}

/// SHA-256 of `value` in hex: the hot-key view's `value_hash` is its first 32 digits, the
/// status page its first 12.
fn sha256_hex(value: &str) -> String {
    Sha256::digest(value.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

/// Every GET the admin port answers (grep `.route(` in src/operate/admin.rs), those that take a
/// descriptor asked about a value no request carries (they echo what they are asked).
fn admin_gets() -> Vec<String> {
    let stranger = format!("descriptor=remote_address={STRANGER}");
    vec![
        "/".into(),
        "/v1/status".into(),
        "/healthz".into(),
        "/readyz".into(),
        "/metrics".into(),
        "/rlconfig".into(),
        "/rlconfig?format=json".into(),
        "/v1/hotkeys?domain=api".into(),
        "/v1/hotkeys?domain=api&top=100".into(),
        format!("/v1/usage?domain=api&{}", stranger),
        format!("/v1/usage?domain=api&descriptor=remote_address={}", ADDRESSES[0]),
        "/v1/override".into(),
        format!("/v1/explain?domain=api&{}", stranger),
    ]
}

/// Asserts that no answer of `gets` holds a client value or an unkeyed hash of one.
fn assert_no_client_value(answers: &[(String, HttpResponse)]) {
    for (path, answer) in answers {
        for value in ADDRESSES.iter().chain([&USER]) {
            assert!(!answer.body.contains(value), "{path} shows {value}:\n{}", answer.body);
            let digest = sha256_hex(value);
            assert!(!answer.body.contains(&digest[..12]), "{path} shows SHA-256({value}):\n{}", answer.body);
        }
    }
}

async fn get_all(admin: SocketAddr, headers: &[(&str, &str)]) -> Vec<(String, HttpResponse)> {
    let mut answers = Vec::new();
    for path in admin_gets() {
        let answer = http_with(admin, "GET", &path, headers).await.expect("admin GET");
        answers.push((path, answer));
    }
    answers
}

/// The busiest buckets of `api`, once the view has all three.
async fn hot_keys(admin: SocketAddr, headers: &[(&str, &str)]) -> serde_json::Value {
    let read = || async {
        let answer = http_with(admin, "GET", "/v1/hotkeys?domain=api", headers).await.ok()?;
        serde_json::from_str::<serde_json::Value>(&answer.body).ok()
    };
    let three = |view: &Option<serde_json::Value>| {
        view.as_ref().and_then(|v| v["keys"].as_array()).is_some_and(|keys| keys.len() == 3)
    };
    let ready = eventually(PATIENCE, || async { three(&read().await) }).await;
    assert!(ready, "three hot buckets in /v1/hotkeys: {:?}", read().await);
    read().await.expect("the view")
}

#[tokio::test]
async fn an_open_admin_port_shows_no_client_value_nor_its_plain_hash() {
    let started = start(&[]).await;
    traffic(started.grpc).await;
    let view = hot_keys(started.admin, &[]).await;
    // Still useful: the busiest bucket first, its value keyed-hashed (32 hex digits).
    let first = &view["keys"][0]["descriptor"][0];
    assert_eq!(first["key"], "remote_address", "{view}");
    let keyed = first["value_hmac"].as_str().expect("value_hmac");
    assert_eq!(keyed.len(), 32, "{view}");
    assert!(first.get("value_hash").is_none() && first.get("value").is_none(), "{view}");

    let mut answers = get_all(started.admin, &[]).await;
    answers.push(("/healthcheck".into(), http(started.health, "GET", "/healthcheck").await.expect("GET")));
    assert_no_client_value(&answers);
    let status = |path: &str| answers.iter().find(|(p, _)| p == path).map(|(_, a)| a.status);
    assert_eq!(status("/v1/hotkeys?domain=api"), Some(200));
    assert_eq!(status("/v1/status"), Some(200));
    assert_eq!(status("/"), Some(200));
    // `/v1/usage` answers for a value the caller names: an oracle of who is a client.
    assert_eq!(status(&format!("/v1/usage?domain=api&descriptor=remote_address={STRANGER}")), Some(403));
    let page = &answers.iter().find(|(p, _)| p == "/").expect("page").1.body;
    assert!(page.contains(&keyed[..12]), "the status page lists the keyed hash:\n{page}");

    let log = started.peer.log();
    let line =
        log.lines().find(|l| l.contains("per-process key")).unwrap_or_else(|| panic!("no line:\n{log}"));
    assert!(line.contains("without --admin-token-file") && line.contains("/v1/usage"), "{line}");
}

#[tokio::test]
async fn with_a_token_file_its_holder_sees_the_hashes_and_others_nothing() {
    let dir = tempfile::tempdir().expect("token dir");
    let file = dir.path().join("token");
    std::fs::write(&file, TOKEN).expect("token");
    let started = start(&[("TOLLGATE_ADMIN_TOKEN_FILE", file.to_str().expect("UTF-8"))]).await;
    traffic(started.grpc).await;
    let bearer = format!("Bearer {TOKEN}");
    let view = hot_keys(started.admin, &[("authorization", &bearer)]).await;
    let first = &view["keys"][0]["descriptor"][0];
    assert_eq!(first["value_hash"], sha256_hex(ADDRESSES[0])[..32], "the bucket keys' own hash: {view}");

    let answers = get_all(started.admin, &[]).await;
    assert_no_client_value(&answers);
    let refused =
        answers.iter().filter(|(_, a)| a.status == 401).map(|(p, _)| p.as_str()).collect::<Vec<_>>();
    assert!(refused.iter().any(|p| p.starts_with("/v1/hotkeys")), "{refused:?}");
    let usage = format!("/v1/usage?domain=api&descriptor=remote_address={}", ADDRESSES[0]);
    let held = http_with(started.admin, "GET", &usage, &[("authorization", &bearer)]).await.expect("usage");
    assert_eq!(held.status, 200, "{}", held.body);
    let usage: serde_json::Value = serde_json::from_str(&held.body).expect("JSON");
    assert!(usage["limits"][0]["consumed"].as_u64().is_some_and(|n| n >= 1), "{usage}");
    assert!(!started.peer.log().contains("per-process key"), "{}", started.peer.log());
}

#[tokio::test]
async fn on_loopback_the_view_is_as_before() {
    let started = start(&[("DEBUG_HOST", "127.0.0.1")]).await;
    traffic(started.grpc).await;
    let view = hot_keys(started.admin, &[]).await;
    let first = &view["keys"][0]["descriptor"][0];
    assert_eq!(first["value_hash"], sha256_hex(ADDRESSES[0])[..32], "{view}");
    let usage = format!("/v1/usage?domain=api&descriptor=remote_address={}", ADDRESSES[0]);
    assert_eq!(http(started.admin, "GET", &usage).await.expect("usage").status, 200);
    assert!(!started.peer.log().contains("per-process key"), "{}", started.peer.log());
}
