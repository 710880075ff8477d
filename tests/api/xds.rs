//! Policies over xDS, with real parts: an ADS management server in the test (go-control-plane's
//! snapshot-cache behaviour, mTLS with certificates made here) and the whole Tollgate
//! in-process answering ShouldRateLimit by the policies it sent.

use std::time::Duration;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::google::protobuf::Any;
use tollgate::app::{MetricsListener, ServeSettings};
use tollgate::config::xds::proto::RateLimitUnit;
use tollgate::config::xds::TYPE_URL;
use tollgate::sources::xds::{BackoffSettings, XdsSettings, XdsTls};

use crate::support::{eventually, is_ok, metric, request, TestApp};

use crate::ads::certs::Certs;
use crate::ads::server::ManagementServer;

/// A response that cannot be read whole: rejected whole, every last good version kept.
mod rejections;

/// Long enough for a loaded CI machine; every wait polls a condition.
const PATIENCE: Duration = Duration::from_secs(20);

/// A `RateLimitConfig` named and with domain `domain`: `user` limited to `per_minute`/minute;
/// `unit` UNKNOWN makes it invalid.
fn resource(domain: &str, per_minute: u32, unit: RateLimitUnit) -> Any {
    crate::ads::resource(domain, "user", per_minute, unit)
}

fn good(domain: &str, per_minute: u32) -> Any {
    resource(domain, per_minute, RateLimitUnit::Minute)
}

/// Tollgate on the xDS source, over mTLS to `server`, verifying the name `xds.test`.
async fn spawn(server: &ManagementServer, certs: &Certs, force_start: bool) -> TestApp {
    start(settings(server, certs, force_start)).await
}

/// The app of `settings`, ready, with a client.
async fn start(settings: ServeSettings) -> TestApp {
    let running = tollgate::app::spawn(settings).await.expect("app starts");
    let client =
        RateLimitServiceClient::connect(format!("http://{}", running.grpc_addr)).await.expect("connect");
    TestApp { running: Some(running), client, redis: None, config_dir: tempfile::tempdir().expect("dir") }
}

/// The settings of [`spawn`].
fn settings(server: &ManagementServer, certs: &Certs, force_start: bool) -> ServeSettings {
    let mut xds = XdsSettings::new(server.addr.to_string());
    xds.node_id = "envoy-ratelimit".into();
    xds.node_metadata = vec![("cluster".into(), "test".into())];
    xds.headers = vec![("x-tenant".into(), "t1".into())];
    xds.tls = Some(XdsTls {
        client_cert: Some(certs.path("tls.crt")),
        client_key: Some(certs.path("tls.key")),
        ca: Some(certs.path("ca.crt")),
        san: Some("xds.test".into()),
    });
    // The peer's reconnect defaults (10 s after a broken stream, 3 s between dials), as
    // production runs: the restart below is timed against them.
    assert_eq!(xds.backoff, BackoffSettings::default());
    xds.force_start = force_start;
    let mut settings = ServeSettings::new(std::path::PathBuf::new());
    settings.xds = Some(xds);
    settings.grpc_addr = "127.0.0.1:0".parse().expect("addr");
    settings.admin_addr = "127.0.0.1:0".parse().expect("addr");
    settings.drain = Duration::ZERO;
    settings
}

/// How many of `n` requests for `user` in `domain` pass.
async fn allowed(app: &TestApp, domain: &str, user: &str, n: usize) -> usize {
    app.allowed_of(n, &request(domain, &[&[("user", user)]])).await
}

async fn acked(app: &TestApp, version: &str) -> bool {
    let live = &app.running.as_ref().expect("running").live;
    live.xds_state().and_then(|s| s.acked_version).as_deref() == Some(version)
}

#[tokio::test]
async fn snapshots_apply_a_bad_domain_is_rejected_alone_and_a_restart_keeps_the_last_good_config() {
    let certs = Certs::new();
    let mut server = ManagementServer::start(certs.server.clone()).await;
    server.set("1", vec![good("a", 2), good("b", 1)]);
    let app = spawn(&server, &certs, false).await;

    // Version 1 applied before start-up returned (no force start).
    assert!(acked(&app, "1").await);
    assert_eq!(allowed(&app, "a", "u1", 5).await, 2);
    assert_eq!(allowed(&app, "b", "u1", 5).await, 1);
    let first = server.requests().first().cloned().expect("a request");
    let node = first.node.expect("node");
    assert_eq!(
        (node.id.as_str(), first.resource_names.len(), first.version_info.as_str()),
        ("envoy-ratelimit", 0, "")
    );
    assert!(node.metadata.expect("metadata").fields.contains_key("cluster"));
    assert_eq!(first.type_url, TYPE_URL);
    let opened = server.log.lock().unwrap().stream_headers.first().cloned().expect("a stream");
    assert!(opened.contains(&("x-tenant".to_string(), "t1".to_string())), "extra headers sent: {opened:?}");

    // Version 2: a turns bad, b changes, c is new. a keeps version 1; b and c apply.
    server.set("2", vec![resource("a", 9, RateLimitUnit::Unknown), good("b", 3), good("c", 1)]);
    assert!(eventually(PATIENCE, || acked(&app, "2")).await, "version 2 acknowledged");
    assert_eq!(allowed(&app, "a", "u2", 5).await, 2, "a keeps its last good version");
    assert_eq!(allowed(&app, "b", "u2", 5).await, 3, "b applied");
    assert_eq!(allowed(&app, "c", "u2", 5).await, 1, "c applied");
    let answer = server.requests().last().cloned().expect("the answer to version 2");
    assert_eq!((answer.version_info.as_str(), answer.response_nonce.as_str()), ("2", "2"));
    let detail = answer.error_detail.expect("the rejection names the resource").message;
    assert!(detail.starts_with("a: descriptors[0].rate_limit.unit:"), "{detail}");
    let metrics = app.metrics().await;
    assert_eq!(metric(&metrics, "tollgate_xds_rejected_resources{resource=\"a\"}"), Some(1.0), "{metrics}");
    let rlconfig = app.admin("GET", "/rlconfig").await.body;
    assert!(
        rlconfig.contains("acked version: 2") && rlconfig.contains("rejected resources: a"),
        "{rlconfig}"
    );
    // `tollgate explain --from`: against what the server serves, its source first.
    let admin = app.admin_addr().to_string();
    let descriptor: tollgate::operate::explain::DescriptorArg = "user=u9".parse().expect("descriptor");
    let explained = tollgate::operate::admin::client::explain(&admin, "b", std::slice::from_ref(&descriptor))
        .await
        .expect("explain --from");
    assert!(
        explained.starts_with("source: xds")
            && explained.contains("acked version: 2")
            && explained.contains("rejected resources: a")
            && explained.contains("3 per minute"),
        "{explained}"
    );
    let page = app.admin("GET", "/").await.body;
    assert!(
        page.contains("<dt>acked version</dt><dd><code>2</code>")
            && page.contains("<dt>rejected resources</dt><dd><span class=\"bad\">a</span>")
            && page.contains("<dt>last rejection</dt>"),
        "the status page shows the source: {page}"
    );
    let status = app.admin("GET", "/v1/status").await.body;
    assert!(status.contains("\"source\":\"xds\"") && status.contains("\"acked_version\":\"2\""), "{status}");
    // No NACK resend loop: the server sent versions 1 and 2, once each.
    assert_eq!(server.responses(), [("1".to_string(), "1".to_string()), ("2".to_string(), "2".to_string())]);

    // The server goes away: Tollgate keeps serving version 2's config meanwhile.
    server.stop().await;
    let broken = std::time::Instant::now();
    let live = app.running.as_ref().expect("running").live.clone();
    assert!(eventually(PATIENCE, || async { !live.xds_state().is_some_and(|s| s.connected) }).await);
    assert_eq!(allowed(&app, "c", "u3", 5).await, 1, "the last good config serves while disconnected");
    // Back, with a new snapshot (a fixed): Tollgate reconnects and applies it, the first
    // retry after the broken stream within 15 s at the peer's defaults (10 s).
    server.set("3", vec![good("a", 4), good("b", 3)]);
    server.restart().await;
    assert!(eventually(PATIENCE, || acked(&app, "3")).await, "reconnected and acknowledged version 3");
    let reconnected = broken.elapsed();
    println!("reconnected {} ms after the stream broke", reconnected.as_millis());
    assert!(reconnected < Duration::from_secs(15), "reconnected only after {reconnected:?}");
    assert_eq!(allowed(&app, "a", "u4", 9).await, 4);
    assert_eq!(allowed(&app, "c", "u4", 5).await, 5, "c was removed: not limited");
    let reconnect =
        server.requests().into_iter().find(|r| r.response_nonce.is_empty() && !r.version_info.is_empty());
    assert_eq!(
        reconnect.map(|r| r.version_info),
        Some("2".to_string()),
        "resubscribed with the acked version"
    );

    // An empty snapshot is a valid, empty config.
    server.set("4", vec![]);
    assert!(eventually(PATIENCE, || acked(&app, "4")).await);
    assert_eq!(allowed(&app, "a", "u5", 9).await, 9);
    assert!(app.running.as_ref().expect("running").live.load().snapshot.domains.is_empty());
    assert_eq!(app.admin("GET", "/readyz").await.status, 200);
    server.stop().await;
}

#[tokio::test]
async fn force_start_serves_unlimited_until_the_first_snapshot() {
    let certs = Certs::new();
    let mut server = ManagementServer::start(certs.server.clone()).await;
    let app = spawn(&server, &certs, true).await;
    let ready = app.admin("GET", "/readyz").await;
    assert_eq!(ready.status, 200);
    assert!(ready.body.contains("nothing is limited"), "{}", ready.body);
    let metrics = app.metrics().await;
    assert_eq!(metric(&metrics, "tollgate_xds_waiting_for_first_snapshot"), Some(1.0));
    let response = app.check(request("a", &[&[("user", "u")]])).await;
    assert!(response.statuses.iter().all(is_ok));

    server.set("1", vec![good("a", 1)]);
    assert!(eventually(PATIENCE, || acked(&app, "1")).await);
    assert_eq!(allowed(&app, "a", "u", 3).await, 1);
    assert_eq!(metric(&app.metrics().await, "tollgate_xds_waiting_for_first_snapshot"), Some(0.0));
    assert_eq!(app.admin("GET", "/readyz").await.body, "ready\n");
    server.stop().await;
}

/// Without force start, gRPC waits for the first snapshot; meanwhile the admin server
/// answers: `/readyz` 503 saying why, the metric of the wait at 1.
#[tokio::test]
async fn without_force_start_grpc_waits_for_the_first_snapshot_and_readyz_says_so() {
    let certs = Certs::new();
    let server = ManagementServer::start(certs.server.clone()).await;
    let mut settings = settings(&server, &certs, false);
    let admin = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    settings.admin_addr = admin.local_addr().expect("addr");
    drop(admin);
    let admin = settings.admin_addr;
    let starting = tokio::spawn(start(settings));
    let waiting = eventually(PATIENCE, || async {
        crate::support::http(admin, "GET", "/readyz")
            .await
            .is_ok_and(|r| r.status == 503 && r.body.contains("waiting for the first xDS snapshot"))
    })
    .await;
    assert!(waiting, "/readyz said it waits for the first snapshot");
    let metrics = crate::support::http(admin, "GET", "/metrics").await.expect("metrics").body;
    assert_eq!(metric(&metrics, "tollgate_xds_waiting_for_first_snapshot"), Some(1.0), "{metrics}");
    assert!(!starting.is_finished(), "start-up returned before the first snapshot");

    server.set("1", vec![good("a", 1)]);
    let app = tokio::time::timeout(PATIENCE, starting).await.expect("started").expect("start-up");
    assert_eq!(allowed(&app, "a", "u", 3).await, 1, "the first request is limited by the snapshot");
    assert_eq!(app.admin("GET", "/readyz").await.body, "ready\n");
}

/// envoyproxy/ratelimit's `/healthcheck` (`--healthcheck-addr`) follows `/readyz`: 500 with
/// an empty body while the first snapshot is awaited, 200 `OK` once it serves. The metrics
/// listener (`--metrics-addr`) answers meanwhile, at its path only.
#[tokio::test]
async fn the_peers_healthcheck_follows_readiness_and_the_metrics_listener_answers_while_waiting() {
    let certs = Certs::new();
    let server = ManagementServer::start(certs.server.clone()).await;
    let mut settings = settings(&server, &certs, false);
    let free = || {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
        listener.local_addr().expect("addr")
    };
    let (health, metrics) = (free(), free());
    settings.healthcheck_addr = Some(health);
    settings.metrics_listener = Some(MetricsListener { addr: metrics, path: "/stats/prometheus".into() });
    let starting = tokio::spawn(start(settings));
    let failing = eventually(PATIENCE, || async {
        crate::support::http(health, "GET", "/healthcheck")
            .await
            .is_ok_and(|r| r.status == 500 && r.body.is_empty())
    })
    .await;
    assert!(failing, "/healthcheck 500 while waiting for the first snapshot");
    let scraped = crate::support::http(metrics, "GET", "/stats/prometheus").await.expect("metrics");
    assert_eq!(
        metric(&scraped.body, "tollgate_xds_waiting_for_first_snapshot"),
        Some(1.0),
        "{}",
        scraped.body
    );
    assert_eq!(crate::support::http(metrics, "GET", "/metrics").await.expect("404").status, 404);

    server.set("1", vec![good("a", 1)]);
    let app = tokio::time::timeout(PATIENCE, starting).await.expect("started").expect("start-up");
    let running = app.running.as_ref().expect("running");
    assert_eq!((running.healthcheck_addr, running.metrics_addr), (Some(health), Some(metrics)));
    let ok = crate::support::http(health, "POST", "/healthcheck").await.expect("/healthcheck");
    assert_eq!((ok.status, ok.body.as_str()), (200, "OK"), "any method, as the peer's");
}
