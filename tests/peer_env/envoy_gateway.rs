//! Issue 25's "environment table" test: exactly the environment Envoy Gateway generates,
//! on the peer's fixed ports, against an ADS server with Envoy Gateway's TLS settings.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::google::protobuf::Any;
use tollgate::config::xds::proto::RateLimitUnit;
use tollgate::config::xds::TYPE_URL;
use tonic::transport::Channel;

use crate::ads::server::{ManagementServer, ServerTls};
use crate::pki::Pki;
use crate::process::{listing, Peer};
use crate::support::{eventually, http, metric, request};
use crate::{codes, local, rls_client, PATIENCE, RLS_SANS};

/// The environment Envoy Gateway generates for the ratelimit container
/// (`internal/infrastructure/kubernetes/ratelimit/resource.go`, `expectedRateLimitContainerEnv`,
/// in its order), default case without Redis: the variables it always sets, then the
/// Prometheus ones (set unless `telemetry.metrics.prometheus.disable`). No `REDIS_*` (no
/// `rateLimit.backend.redis`: Tollgate uses its memory store) and no `TRACING_*`/`OTEL_*`
/// (no tracing provider).
const ENVOY_GATEWAY: &[(&str, &str)] = &[
    ("RUNTIME_ROOT", "/data"),
    ("RUNTIME_SUBDIRECTORY", "ratelimit"),
    ("RUNTIME_IGNOREDOTFILES", "true"),
    ("RUNTIME_WATCH_ROOT", "false"),
    ("LOG_LEVEL", "info"),
    ("USE_STATSD", "false"),
    ("CONFIG_TYPE", "GRPC_XDS_SOTW"),
    ("CONFIG_GRPC_XDS_SERVER_URL", "envoy-gateway:18001"),
    ("CONFIG_GRPC_XDS_NODE_ID", "envoy-ratelimit"),
    ("GRPC_SERVER_USE_TLS", "true"),
    ("GRPC_SERVER_TLS_CERT", "/certs/tls.crt"),
    ("GRPC_SERVER_TLS_KEY", "/certs/tls.key"),
    ("GRPC_SERVER_TLS_CA_CERT", "/certs/ca.crt"),
    ("CONFIG_GRPC_XDS_SERVER_USE_TLS", "true"),
    ("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "/certs/tls.crt"),
    ("CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "/certs/tls.key"),
    ("CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "/certs/ca.crt"),
    ("FORCE_START_WITHOUT_INITIAL_CONFIG", "true"),
    ("USE_PROMETHEUS", "true"),
    ("PROMETHEUS_ADDR", ":19001"),
    ("PROMETHEUS_MAPPER_YAML", "/etc/statsd-exporter/conf.yaml"),
];

/// The peer's default ports. Envoy Gateway sets none of `PORT`, `GRPC_PORT`, `DEBUG_PORT`,
/// and its probes (`/healthcheck` on 8080), Service (8081) and scrape annotations (19001)
/// rely on these defaults; 6070 is the peer's debug port, Tollgate's admin server in peer
/// mode.
const HEALTHCHECK: u16 = 8080;
const GRPC: u16 = 8081;
const METRICS: u16 = 19001;
const DEBUG: u16 = 6070;

/// A `RateLimitConfig` as Envoy Gateway's translator emits one (`name` = `domain`): `user`
/// limited to `per_minute` a minute.
fn policy(domain: &str, per_minute: u32) -> Any {
    crate::ads::resource(domain, "user", per_minute, RateLimitUnit::Minute)
}

/// Fails with a clear message if a fixed port this test needs is taken.
fn ports_free() {
    for (port, what) in [
        (HEALTHCHECK, "/healthcheck (PORT)"),
        (GRPC, "gRPC (GRPC_PORT)"),
        (METRICS, "metrics (PROMETHEUS_ADDR)"),
        (DEBUG, "the admin server (DEBUG_PORT)"),
    ] {
        if let Err(e) = std::net::TcpListener::bind(("0.0.0.0", port)) {
            panic!(
                "port {port} is taken ({e}): this test runs Tollgate on envoyproxy/ratelimit's default \
                 ports as Envoy Gateway's probes expect them, {port} for {what}; free it and run again"
            );
        }
    }
}

/// Envoy Gateway's environment with the only two changes this test makes: the `/certs/…`
/// paths point into `certs`, and the xDS server is `localhost:<xds_port>` (the test's ADS
/// server, whose certificate carries the SANs `envoy-gateway` and `localhost`: Tollgate
/// verifies the host name `localhost` of the URL as it verifies `envoy-gateway` under
/// Envoy Gateway, no SAN override).
fn envoy_gateway_env(certs: &Path, xds_port: u16) -> Vec<(String, String)> {
    let env: Vec<(String, String)> = ENVOY_GATEWAY
        .iter()
        .map(|(name, value)| {
            let value = match (*name, value.strip_prefix("/certs/")) {
                ("CONFIG_GRPC_XDS_SERVER_URL", _) => format!("localhost:{xds_port}"),
                (_, Some(file)) => certs.join(file).to_str().expect("UTF-8 path").to_string(),
                (_, None) => value.to_string(),
            };
            (name.to_string(), value)
        })
        .collect();
    let changed: Vec<&str> = env
        .iter()
        .zip(ENVOY_GATEWAY)
        .filter(|((_, ours), (_, theirs))| ours != theirs)
        .map(|((name, _), _)| name.as_str())
        .collect();
    assert_eq!(
        changed,
        [
            "CONFIG_GRPC_XDS_SERVER_URL",
            "GRPC_SERVER_TLS_CERT",
            "GRPC_SERVER_TLS_KEY",
            "GRPC_SERVER_TLS_CA_CERT",
            "CONFIG_GRPC_XDS_CLIENT_TLS_CERT",
            "CONFIG_GRPC_XDS_CLIENT_TLS_KEY",
            "CONFIG_GRPC_XDS_SERVER_TLS_CACERT"
        ],
        "only the xDS address and the certificate paths differ from Envoy Gateway's"
    );
    env
}

#[tokio::test]
async fn envoy_gateways_container_serves_the_policies_it_sends_over_xds() {
    ports_free();
    let mut pki = Pki::new();
    // Envoy Gateway's own server certificate (CN envoy-gateway), plus `localhost`: see
    // `envoy_gateway_env`.
    pki.leaf("xds", "envoy-gateway", &["envoy-gateway", "localhost"]);
    // The `envoy-rate-limit` secret: CN `*`, for the RLS gRPC server and the xDS client
    // alike.
    pki.leaf("rls", "*", RLS_SANS);
    let certs = pki.certs_dir("rls");
    let tls =
        ServerTls { cert: pki.read("xds.crt"), key: pki.read("xds.key"), client_ca: pki.read("ca.crt") };
    let server = ManagementServer::start_as_envoy_gateway(tls).await;
    let domain = "default/eg/http";
    let env = envoy_gateway_env(certs.path(), server.addr.port());
    let mut peer = Peer::start(&env);
    peer.until_healthy(local(HEALTHCHECK)).await;

    // Before the first snapshot: FORCE_START_WITHOUT_INITIAL_CONFIG=true, so Tollgate serves
    // at once and /healthcheck answers 200 (as the peer's, which has no config component
    // unless HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED); /readyz says nothing is limited yet.
    let readyz = http(local(DEBUG), "GET", "/readyz").await.expect("/readyz");
    assert_eq!(readyz.status, 200);
    assert!(readyz.body.contains("no xDS snapshot yet, nothing is limited"), "{}", readyz.body);
    // GRPC_SERVER_TLS_CA_CERT asks clients for no certificate (the peer has no such
    // variable): Envoy connects with TLS and no client certificate.
    let mut client = rls_client(GRPC, pki.read("ca.crt"), None).await.expect("TLS connect, no client cert");
    assert_eq!(
        codes(&mut client, domain, "early", 3).await,
        [Code::Ok; 3],
        "no policy yet: nothing is limited"
    );

    server.set("1", vec![policy(domain, 2)]);
    let acked = eventually(PATIENCE, || async {
        server.requests().iter().any(|r| r.version_info == "1" && r.error_detail.is_none())
    })
    .await;
    assert!(acked, "version 1 acknowledged:\n{}", peer.log());
    assert_eq!(
        codes(&mut client, domain, "alice", 3).await,
        [Code::Ok, Code::Ok, Code::OverLimit],
        "2 a minute, from the policy sent over xDS"
    );
    let health = http(local(HEALTHCHECK), "GET", "/healthcheck").await.expect("/healthcheck");
    assert_eq!((health.status, health.body.as_str()), (200, "OK"));

    // The xDS stream: the node id of the environment, TLS 1.3 with the client certificate
    // (the server requires both, as Envoy Gateway's does).
    let first = server.requests().first().cloned().expect("a discovery request");
    assert_eq!(first.node.expect("node").id, "envoy-ratelimit");
    assert_eq!(first.type_url, TYPE_URL);
    let handshakes = server.handshakes();
    assert!(
        !handshakes.is_empty() && handshakes.iter().all(|h| *h == ("TLSv1_3".to_string(), true)),
        "{handshakes:?}"
    );

    // Plaintext gRPC is not served (GRPC_SERVER_USE_TLS=true).
    let plaintext =
        match Channel::from_shared(format!("http://{}", local(GRPC))).expect("uri").connect().await {
            Ok(channel) => {
                RateLimitServiceClient::new(channel).should_rate_limit(request(domain, &[])).await.is_err()
            }
            Err(_) => true,
        };
    assert!(plaintext, "plaintext gRPC must be refused");

    // Tollgate's metrics on PROMETHEUS_ADDR (:19001), at the default PROMETHEUS_PATH.
    let metrics = http(local(METRICS), "GET", "/metrics").await.expect("/metrics on :19001");
    assert_eq!(metrics.status, 200);
    assert_eq!(metric(&metrics.body, "tollgate_xds_connected"), Some(1.0), "{}", metrics.body);
    let over = metrics.body.lines().any(|line| {
        line.starts_with("tollgate_decisions_total{")
            && line.contains(&format!("domain=\"{domain}\""))
            && line.contains("over_limit")
            && line.ends_with(" 1")
    });
    assert!(over, "the over-limit decision is counted:\n{}", metrics.body);
    assert_eq!(http(local(METRICS), "GET", "/other").await.expect("404").status, 404);

    // What the log says: peer mode, the variables not used (names only).
    let log = peer.log();
    assert!(log.contains("peer mode"), "{log}");
    for unused in ["GRPC_SERVER_TLS_CA_CERT", "PROMETHEUS_MAPPER_YAML", "RUNTIME_ROOT", "RUNTIME_WATCH_ROOT"]
    {
        assert!(log.contains(unused), "{unused} reported as not used:\n{log}");
    }

    // Nothing written: no file open, nothing created in the working directory.
    assert_eq!(peer.open_files(), Vec::<PathBuf>::new(), "files held open");
    assert_eq!(listing(peer.cwd.path()), Vec::<String>::new(), "created in the working directory");
    assert_eq!(listing(certs.path()), ["ca.crt", "tls.crt", "tls.key"]);

    // SIGTERM: /healthcheck fails (500, empty) during the drain, as the peer's does; then
    // the process exits cleanly.
    peer.terminate();
    let failing = eventually(Duration::from_secs(5), || async {
        http(local(HEALTHCHECK), "GET", "/healthcheck")
            .await
            .is_ok_and(|r| r.status == 500 && r.body.is_empty())
    })
    .await;
    assert!(failing, "/healthcheck during the drain:\n{}", peer.log());
    assert!(peer.exited_cleanly().await, "exit status:\n{}", peer.log());
    assert_eq!(listing(peer.cwd.path()), Vec::<String>::new(), "created in the working directory");
}

/// A TLS connection to the test's ADS server as `localhost`, trusting `ca`, offering only
/// `version`, presenting `identity` (PEM certificate and key) if given; `Ok` once the
/// server's first HTTP/2 bytes arrive (in TLS 1.3 a refused client certificate shows only
/// then, as the server's alert).
async fn xds_handshake(
    addr: SocketAddr,
    ca: &[u8],
    version: &'static rustls::SupportedProtocolVersion,
    identity: Option<(Vec<u8>, Vec<u8>)>,
) -> Result<(), String> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut roots = rustls::RootCertStore::empty();
    roots.add_parsable_certificates(CertificateDer::pem_slice_iter(ca).flatten());
    let builder =
        rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_protocol_versions(&[version])
            .map_err(|e| e.to_string())?
            .with_root_certificates(roots);
    let mut config = match identity {
        Some((cert, key)) => {
            let chain = CertificateDer::pem_slice_iter(&cert).flatten().collect();
            let key = PrivateKeyDer::from_pem_slice(&key).map_err(|e| e.to_string())?;
            builder.with_client_auth_cert(chain, key).map_err(|e| e.to_string())?
        }
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"h2".to_vec()];
    let tcp = tokio::net::TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    let name = ServerName::try_from("localhost").map_err(|e| e.to_string())?;
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let mut tls = connector.connect(name, tcp).await.map_err(|e| e.to_string())?;
    tls.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0")
        .await
        .map_err(|e| e.to_string())?;
    let mut first = [0u8; 9];
    match tls.read(&mut first).await {
        Ok(0) => Err("closed".into()),
        Ok(_) => Ok(()),
        Err(e) => Err(e.to_string()),
    }
}

#[tokio::test]
async fn the_test_xds_server_requires_tls13_and_a_client_certificate_as_envoy_gateways() {
    let mut pki = Pki::new();
    pki.leaf("xds", "envoy-gateway", &["envoy-gateway", "localhost"]);
    pki.leaf("rls", "*", RLS_SANS);
    let tls =
        ServerTls { cert: pki.read("xds.crt"), key: pki.read("xds.key"), client_ca: pki.read("ca.crt") };
    let server = ManagementServer::start_as_envoy_gateway(tls).await;
    let ca = pki.read("ca.crt");
    let identity = || Some((pki.read("rls.crt"), pki.read("rls.key")));
    let tls13 = &rustls::version::TLS13;
    assert_eq!(
        xds_handshake(server.addr, &ca, tls13, identity()).await,
        Ok(()),
        "TLS 1.3 with the certificate"
    );
    let tls12 = xds_handshake(server.addr, &ca, &rustls::version::TLS12, identity()).await;
    assert!(tls12.is_err_and(|e| e.contains("ProtocolVersion")), "TLS 1.2 must be refused");
    let anonymous = xds_handshake(server.addr, &ca, tls13, None).await;
    assert!(anonymous.is_err_and(|e| e.contains("CertificateRequired")), "no client certificate: refused");
    assert_eq!(server.handshakes(), [("TLSv1_3".to_string(), true)]);
}
