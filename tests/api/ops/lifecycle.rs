//! Admin views and the server's life: `/rlconfig`, `/healthz`, `/readyz`, gRPC health, and a
//! graceful stop (not ready and NOT_SERVING at once, still answering through the drain).

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tollgate::app::{StoreKind, SERVICE_NAME};
use tonic::transport::Channel;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

use crate::support::*;

const POLICY: &str = r#"
domain: api
failure_mode: open
descriptors:
  - key: user
    rate_limit: { name: per-user, unit: minute, requests_per_unit: 600, burst: 50 }
    descriptors:
      - key: path
        value: "/v1/search*"
        rate_limit: { name: per-user-search, unit: minute, requests_per_unit: 60 }
  - key: api_key
    shadow_mode: true
    rate_limit: { unit: hour, requests_per_unit: 10000, algorithm: sliding_window }
"#;

const LOGIN: &str =
    "domain: login\nfailure_mode: closed\ndescriptors:\n  - key: ip\n    rate_limit: { unlimited: true }\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rlconfig_shows_domains_rules_version_and_store() {
    let app = spawn_app(StoreKind::Memory, &[("api.yaml", POLICY), ("login.yaml", LOGIN)]).await;
    let json = app.admin("GET", "/rlconfig?format=json").await;
    assert_eq!(json.status, 200);
    let json: serde_json::Value = serde_json::from_str(&json.body).expect("json");
    let version = json["version"].as_str().expect("version").to_string();
    assert_eq!(version.len(), 16);
    let now = SystemTime::now().duration_since(UNIX_EPOCH).expect("clock").as_secs();
    let loaded_at = json["loaded_at"].as_u64().expect("loaded_at");
    assert!(loaded_at <= now && now - loaded_at < 120, "{loaded_at} vs {now}");
    assert_eq!(json["store"]["kind"], "memory");
    assert_eq!(json["store"]["healthy"], true);
    let domains: Vec<&str> =
        json["domains"].as_array().expect("domains").iter().filter_map(|d| d["domain"].as_str()).collect();
    assert_eq!(domains, ["api", "login"]);
    let api = &json["domains"][0];
    assert_eq!(api["failure_mode"], "open");
    let rule = |i: usize| &api["rules"][i];
    assert_eq!((rule(0)["name"].as_str(), rule(0)["algorithm"].as_str()), (Some("per-user"), Some("gcra")));
    assert_eq!((rule(0)["requests_per_unit"].as_u64(), rule(0)["burst"].as_u64()), (Some(600), Some(50)));
    assert_eq!(rule(0)["unit"], "minute");
    assert_eq!(rule(1)["path"], "descriptors[0].descriptors[0]");
    assert_eq!(rule(2)["algorithm"], "sliding_window");
    assert_eq!(rule(2)["flags"], serde_json::json!(["shadow_mode"]));
    assert_eq!(json["domains"][1]["rules"][0]["unlimited"], true);

    let text = app.admin("GET", "/rlconfig").await;
    assert_eq!(text.status, 200);
    for expected in [
        format!("version: {version}"),
        format!("loaded_at: {loaded_at}"),
        "store: memory (up)".to_string(),
        "domain api (failure_mode open".to_string(),
        "per-user [user]: 600 per minute (gcra) burst 50".to_string(),
        "per-user-search [user > path]: 60 per minute (gcra)".to_string(),
        "descriptors[1] [api_key]: 10000 per hour (sliding_window) shadow_mode".to_string(),
        "domain login (failure_mode closed".to_string(),
        "unlimited".to_string(),
    ] {
        assert!(text.body.contains(&expected), "missing {expected:?} in:\n{}", text.body);
    }
    assert_eq!(app.admin("GET", "/healthz").await.status, 200);
    assert_eq!(app.admin("GET", "/readyz").await.status, 200);
}

async fn health(client: &mut HealthClient<Channel>, service: &str) -> Result<i32, tonic::Status> {
    let request = HealthCheckRequest { service: service.to_string() };
    client.check(request).await.map(|r| r.into_inner().status)
}

async fn both_health(client: &HealthClient<Channel>, want: ServingStatus) -> bool {
    for service in ["", SERVICE_NAME] {
        if health(&mut client.clone(), service).await.ok() != Some(want as i32) {
            return false;
        }
    }
    true
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_flips_health_and_readiness_then_drains_and_closes() {
    let drain = Duration::from_secs(2);
    let mut app =
        spawn_with(Options { drain, ..Options::new(StoreKind::Memory) }, &[("api.yaml", POLICY)]).await;
    let running = app.running.take().expect("running");
    let (grpc_addr, admin_addr) = (running.grpc_addr, running.admin_addr);
    let channel =
        Channel::from_shared(format!("http://{grpc_addr}")).expect("uri").connect().await.expect("connect");
    let health_client = HealthClient::new(channel);
    assert!(both_health(&health_client, ServingStatus::Serving).await);
    let ready = |addr| async move { http(addr, "GET", "/readyz").await.map(|r| r.status).ok() };
    assert_eq!(ready(admin_addr).await, Some(200));

    let started = Instant::now();
    let stopping = tokio::spawn(running.stop());
    let flipped =
        eventually(Duration::from_secs(1), || both_health(&health_client, ServingStatus::NotServing)).await;
    assert!(flipped, "gRPC health did not go NOT_SERVING");
    assert!(eventually(Duration::from_secs(1), || async { ready(admin_addr).await == Some(503) }).await);
    // Still answering while Kubernetes withdraws the endpoint.
    let response = app.call(request("api", &[&[("user", "alice")]])).await;
    assert!(response.is_ok_and(|r| limits(&r) == [600]), "a request during the drain must be answered");
    assert!(!stopping.is_finished() && started.elapsed() < drain, "checked after the drain: test too slow");

    // `stop` takes the drain, then at most the drain again for in-flight requests; the
    // margin is for a loaded machine (a browser test may run beside this one).
    let stopped = tokio::time::timeout(drain * 2 + Duration::from_secs(5), stopping).await;
    assert!(matches!(stopped, Ok(Ok(Ok(())))), "stop did not finish cleanly: {stopped:?}");
    assert!(started.elapsed() >= drain, "stopped before the drain period was over");
    assert!(tokio::net::TcpStream::connect(grpc_addr).await.is_err(), "gRPC still accepts");
    assert!(tokio::net::TcpStream::connect(admin_addr).await.is_err(), "admin still accepts");
}
