//! `--key-secret-file`: request values enter bucket keys (so Redis), metrics, the hot-key
//! view, `/v1/status` and the audit log keyed-hashed, never in the clear; instances with the
//! same secret share buckets; `/v1/usage` and `/v1/reset` take the raw descriptor.

use serde_json::Value;
use sha2::{Digest, Sha256};
use tollgate::app::StoreKind;

use crate::support::*;

const IP: &str = "192.0.2.77";
const USER: &str = "alice-user-id";
const TOKEN: &str = "secret-t0ken";
/// `detailed_metric` and `value_to_metric`: without the secret, both values would be in
/// metric labels and the hot-key view.
const POLICY: &str = "domain: api\ndescriptors:\n  - key: remote_address\n    detailed_metric: true\n    \
                      rate_limit: { name: per-ip, unit: hour, requests_per_unit: 1 }\n  - key: user\n    \
                      value_to_metric: true\n    rate_limit: { name: per-user, unit: hour, requests_per_unit: 5 }\n";

struct Secrets {
    dir: tempfile::TempDir,
}

impl Secrets {
    fn new() -> Secrets {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("token"), TOKEN).expect("token");
        std::fs::write(
            dir.path().join("a"),
            "3f1c0e9a7b2d4c6e8f0a1b2c3d4e5f60718293a4b5c6d7e8f9012345678abcd\n",
        )
        .expect("a");
        std::fs::write(dir.path().join("b"), "another-secret-of-at-least-thirty-two-bytes-000000000\n")
            .expect("b");
        Secrets { dir }
    }

    fn options(&self, secret: &str, redis_url: Option<String>) -> Options {
        Options {
            key_secret_file: Some(self.dir.path().join(secret)),
            admin_token_file: Some(self.dir.path().join("token")),
            redis_url,
            ..Options::new(StoreKind::Redis)
        }
    }
}

async fn admin(app: &TestApp, method: &str, path: &str) -> (u16, Value) {
    let bearer = format!("Bearer {TOKEN}");
    let response =
        http_with(app.admin_addr(), method, path, &[("Authorization", &bearer)]).await.expect("admin");
    (response.status, serde_json::from_str(&response.body).unwrap_or(Value::String(response.body)))
}

fn clear(text: &str) -> bool {
    !text.contains(IP) && !text.contains(USER)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_values_never_leave_the_process_in_the_clear() {
    let secrets = Secrets::new();
    let a = spawn_with(secrets.options("a", None), &[("api.yaml", POLICY)]).await;
    let url = a.redis.as_ref().expect("redis").url();
    let b = spawn_with(secrets.options("a", Some(url.clone())), &[("api.yaml", POLICY)]).await;
    let ip = request("api", &[&[("remote_address", IP)]]);
    let user = request("api", &[&[("user", USER)]]);

    // The same secret: one bucket across instances.
    assert!(!over(&a.check(ip.clone()).await), "the first request of the hour");
    assert!(over(&b.check(ip.clone()).await), "B shares A's bucket");
    assert_eq!(b.allowed_of(3, &user).await, 3);

    // Nowhere in the clear: Redis, metrics, the hot-key view, the status page, /rlconfig.
    let keys = a.redis.as_ref().expect("redis").cli(&["KEYS", "*"]);
    assert!(keys.lines().filter(|k| k.contains("tg:")).count() >= 2, "{keys}");
    assert!(clear(&keys), "Redis holds a raw value: {keys}");
    let keyed: Vec<&str> = keys.lines().filter(|k| k.contains("tg:")).collect();
    assert!(keyed.iter().all(|k| k.contains("33:~")), "each value is a 33-character keyed part: {keys}");
    for app in [&a, &b] {
        let metrics = app.metrics().await;
        assert!(clear(&metrics), "{metrics}");
        assert!(metrics.contains("rule=\"per-ip:remote_address_~"), "detailed_metric shows the keyed value");
        let (status, hot) = admin(app, "GET", "/v1/hotkeys?domain=api").await;
        assert_eq!(status, 200);
        assert!(clear(&hot.to_string()) && !hot["keys"].as_array().is_none_or(Vec::is_empty), "{hot}");
        // A value hash is keyed too: not the plain SHA-256 prefix anyone could compute.
        let plain: String =
            Sha256::digest(USER.as_bytes())[..16].iter().map(|b| format!("{b:02x}")).collect();
        assert!(!hot.to_string().contains(&plain), "{hot}");
        let (_, status) = admin(app, "GET", "/v1/status").await;
        assert!(clear(&status.to_string()), "{status}");
        let rlconfig = app.admin("GET", "/rlconfig").await.body;
        assert!(rlconfig.contains("key_secret: on"), "{rlconfig}");
    }

    // Usage and reset take the raw descriptor and key it the same way.
    let (status, usage) =
        admin(&b, "GET", &format!("/v1/usage?domain=api&descriptor=remote_address%3D{IP}")).await;
    assert_eq!(status, 200, "{usage}");
    assert_eq!(usage["limits"][0]["consumed"], 1, "{usage}");
    let (status, reset) =
        admin(&a, "POST", &format!("/v1/reset?domain=api&descriptor=remote_address%3D{IP}")).await;
    assert_eq!(status, 200, "{reset}");
    // (On A: B's over-limit cache keeps its denial for a moment, as after any reset.)
    assert!(!over(&a.check(ip.clone()).await), "the reset bucket is full again");

    // Another secret (a rotation) starts every bucket afresh: C does not see A's count.
    let c = spawn_with(secrets.options("b", Some(url)), &[("api.yaml", POLICY)]).await;
    assert!(!over(&c.check(ip.clone()).await), "a new secret, a new bucket");
}

#[tokio::test]
async fn a_short_or_missing_secret_file_stops_the_server_at_startup() {
    let dir = tempfile::tempdir().expect("tempdir");
    let short = dir.path().join("short");
    std::fs::write(&short, "too-short\n").expect("write");
    for (file, says) in
        [(short, "at least 32 are needed"), (dir.path().join("missing"), "reading the key secret")]
    {
        let mut settings = tollgate::app::ServeSettings::new(dir.path().to_path_buf());
        settings.grpc_addr = "127.0.0.1:0".parse().expect("addr");
        settings.admin_addr = "127.0.0.1:0".parse().expect("addr");
        settings.key_secret_file = Some(file);
        std::fs::write(dir.path().join("api.yaml"), POLICY).expect("policy");
        let error = match tollgate::app::spawn(settings).await {
            Ok(_) => panic!("started with a bad key secret"),
            Err(e) => format!("{e:#}"),
        };
        assert!(error.contains(says), "{error}");
        assert!(!error.contains("too-short"), "the secret is never shown: {error}");
    }
}
