//! Peer-mode variables Envoy Gateway does not set, on free ports: the peer's client CA, a
//! file config from its runtime directory, Redis, and Redis requiring the peer's client
//! certificate (`REDIS_TLS_CLIENT_CERT` / `_KEY`).

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use tonic::transport::{Channel, Identity};

use crate::pki::Pki;
use crate::process::Peer;
use crate::redis_support::{free_port, RedisServer};
use crate::support::request;
use crate::{codes, local, rls_client, RLS_SANS};

/// Free ports for the peer's listeners, so these tests run beside the fixed-port one.
fn free_listeners() -> (u16, Vec<(String, String)>) {
    let grpc = free_port();
    let vars = [("GRPC_PORT", grpc), ("PORT", free_port()), ("DEBUG_PORT", free_port())];
    (grpc, vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect())
}

/// The peer on free listeners, its config from a [`runtime_dir`] (kept while the returned
/// directory lives) and `vars`, healthy; and a plain gRPC client of it.
async fn serving_runtime_dir(
    vars: &[(&str, String)],
) -> (Peer, RateLimitServiceClient<Channel>, tempfile::TempDir) {
    let runtime = runtime_dir();
    let (grpc, mut env) = free_listeners();
    let health = env.iter().find(|(k, _)| k == "PORT").map(|(_, v)| v.parse().expect("port")).expect("PORT");
    env.push(("RUNTIME_ROOT".into(), runtime.path().to_str().expect("UTF-8").to_string()));
    env.push(("RUNTIME_SUBDIRECTORY".into(), "ratelimit".into()));
    env.extend(vars.iter().map(|(k, v)| (k.to_string(), v.clone())));
    let mut peer = Peer::start(&env);
    peer.until_healthy(local(health)).await;
    let channel = Channel::from_shared(format!("http://{}", local(grpc)))
        .expect("uri")
        .connect()
        .await
        .expect("connect");
    (peer, RateLimitServiceClient::new(channel), runtime)
}

/// A runtime directory `<root>/ratelimit/config` with one policy: domain `api`, `user` 2 an hour.
fn runtime_dir() -> tempfile::TempDir {
    let root = tempfile::tempdir().expect("runtime root");
    let config = root.path().join("ratelimit/config");
    std::fs::create_dir_all(&config).expect("config dir");
    let policy =
        "domain: api\ndescriptors:\n  - key: user\n    rate_limit: { unit: hour, requests_per_unit: 2 }\n";
    std::fs::write(config.join("api.yaml"), policy).expect("policy");
    root
}

#[tokio::test]
async fn the_peers_client_ca_requires_client_certificates() {
    let mut pki = Pki::new();
    pki.leaf("rls", "*", RLS_SANS);
    pki.leaf("envoy", "envoy", &["envoy"]);
    let certs = pki.certs_dir("rls");
    let runtime = runtime_dir();
    let path = |name: &str| certs.path().join(name).to_str().expect("UTF-8").to_string();
    let (grpc, mut env) = free_listeners();
    env.extend([
        ("RUNTIME_ROOT".to_string(), runtime.path().to_str().expect("UTF-8").to_string()),
        ("RUNTIME_SUBDIRECTORY".to_string(), "ratelimit".to_string()),
        ("GRPC_SERVER_USE_TLS".to_string(), "true".to_string()),
        ("GRPC_SERVER_TLS_CERT".to_string(), path("tls.crt")),
        ("GRPC_SERVER_TLS_KEY".to_string(), path("tls.key")),
        ("GRPC_CLIENT_TLS_CACERT".to_string(), path("ca.crt")),
    ]);
    let health = env.iter().find(|(k, _)| k == "PORT").map(|(_, v)| v.parse().expect("port")).expect("PORT");
    let mut peer = Peer::start(&env);
    peer.until_healthy(local(health)).await;
    let identity = Identity::from_pem(pki.read("envoy.crt"), pki.read("envoy.key"));
    let mut with_cert = rls_client(grpc, pki.read("ca.crt"), Some(identity)).await.expect("mTLS connect");
    assert_eq!(codes(&mut with_cert, "api", "alice", 3).await, [Code::Ok, Code::Ok, Code::OverLimit]);
    let refused = match rls_client(grpc, pki.read("ca.crt"), None).await {
        Ok(mut client) => client.should_rate_limit(request("api", &[&[("user", "bob")]])).await.is_err(),
        Err(_) => true,
    };
    assert!(refused, "GRPC_CLIENT_TLS_CACERT: a client without a certificate is refused");
}

#[tokio::test]
async fn the_peers_file_config_and_redis_limit_requests() {
    let redis = RedisServer::start_with(&["--requirepass", "s3cret-pw"]);
    let (peer, mut client, _runtime) = serving_runtime_dir(&[
        ("REDIS_SOCKET_TYPE", "tcp".to_string()),
        ("REDIS_URL", format!("127.0.0.1:{}", redis.port())),
        ("REDIS_AUTH", "s3cret-pw".to_string()),
        ("CACHE_KEY_PREFIX", "eg:rl:".to_string()),
        ("LOG_FORMAT", "json".to_string()),
    ])
    .await;
    assert_eq!(codes(&mut client, "api", "alice", 3).await, [Code::Ok, Code::Ok, Code::OverLimit]);
    let keys = redis.cli(&["KEYS", "eg:rl:*"]);
    assert_eq!(keys.lines().count(), 1, "the bucket lives in Redis under CACHE_KEY_PREFIX: {keys:?}");
    let log = peer.log();
    assert!(log.lines().next().is_some_and(|line| line.starts_with('{')), "LOG_FORMAT=json:\n{log}");
    assert!(!log.contains("s3cret-pw"), "REDIS_AUTH must not be logged:\n{log}");
}

/// Envoy Gateway's `redis.tls.certificateRef`: `REDIS_TLS_CLIENT_CERT` / `_KEY` (a leaf shaped
/// as its certgen makes them: PKCS#1 key, no extended key usage) presented to a Redis that
/// requires a client certificate (`--tls-auth-clients yes`).
#[tokio::test]
async fn the_peers_redis_client_certificate_is_presented_to_a_redis_that_requires_one() {
    let mut pki = Pki::new();
    pki.leaf("redis", "localhost", &["localhost"]);
    pki.leaf("ratelimit", "envoy-ratelimit", &["envoy-ratelimit"]);
    let tls_port = free_port().to_string();
    let file = |name: &str| pki.path(name).display().to_string();
    let redis = RedisServer::start_with(&[
        "--tls-port",
        &tls_port,
        "--tls-cert-file",
        &file("redis.crt"),
        "--tls-key-file",
        &file("redis.key"),
        "--tls-ca-cert-file",
        &file("ca.crt"),
        "--tls-auth-clients",
        "yes",
    ]);
    let certs = pki.certs_dir("ratelimit");
    let cert = |name: &str| certs.path().join(name).display().to_string();
    let (peer, mut client, _runtime) = serving_runtime_dir(&[
        ("REDIS_SOCKET_TYPE", "tcp".to_string()),
        ("REDIS_URL", format!("localhost:{tls_port}")),
        ("REDIS_TLS", "true".to_string()),
        ("REDIS_TLS_CACERT", cert("ca.crt")),
        ("REDIS_TLS_CLIENT_CERT", cert("tls.crt")),
        ("REDIS_TLS_CLIENT_KEY", cert("tls.key")),
    ])
    .await;
    assert_eq!(
        codes(&mut client, "api", "alice", 3).await,
        [Code::Ok, Code::Ok, Code::OverLimit],
        "{}",
        peer.log()
    );
    let keys = redis.cli(&["KEYS", "*"]);
    assert_eq!(keys.lines().count(), 1, "the bucket lives in the mTLS Redis: {keys:?}");
    let key = String::from_utf8(std::fs::read(certs.path().join("tls.key")).expect("key")).expect("PEM");
    let material = key.lines().nth(1).expect("key material");
    assert!(!peer.log().contains(material), "the key never shows in the log");
}
