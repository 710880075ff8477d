//! Redis AUTH (password in the URL) and TLS (`rediss://` with a custom CA) against a real
//! redis-server; the password never shows in /rlconfig or logs.

use std::path::Path;
use std::process::Command;

use tollgate::app::StoreKind;

use crate::redis_support::{free_port, RedisServer};
use crate::support::*;

const POLICY: &str = "domain: d\nfailure_mode: closed\ndescriptors:\n  - key: k\n    rate_limit: { unit: hour, requests_per_unit: 2 }\n";

async fn app_with_url(url: String, ca: Option<&Path>) -> TestApp {
    app_with_tls(url, ca, None).await
}

/// An app on `url` with the CA `ca` and the client certificate `dir/<name>.crt` + `.key`.
async fn app_with_tls(url: String, ca: Option<&Path>, client: Option<(&Path, &str)>) -> TestApp {
    let mut options = Options::new(StoreKind::Redis);
    options.redis_url = Some(url);
    options.redis_ca_file = ca.map(Path::to_path_buf);
    options.redis_client_cert =
        client.map(|(dir, name)| (dir.join(format!("{name}.crt")), dir.join(format!("{name}.key"))));
    spawn_with(options, &[("d.yaml", POLICY)]).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_with_the_right_password_limits_and_the_wrong_one_fails_closed() {
    let redis = RedisServer::start_with(&["--requirepass", "s3cret-pw"]);
    let good = app_with_url(format!("redis://:s3cret-pw@127.0.0.1:{}/", redis.port()), None).await;
    let req = request("d", &[&[("k", "v")]]);
    assert_eq!(good.allowed_of(3, &req).await, 2, "limited through an authenticated connection");
    let rlconfig = good.admin("GET", "/rlconfig").await.body;
    assert!(rlconfig.contains("***") && !rlconfig.contains("s3cret-pw"), "{rlconfig}");

    let bad = app_with_url(format!("redis://:wrong@127.0.0.1:{}/", redis.port()), None).await;
    assert_eq!(bad.allowed_of(2, &req).await, 0, "auth failure = store failure: closed domain denies");
}

fn openssl(dir: &Path, args: &[&str]) {
    let out =
        Command::new("openssl").args(args).current_dir(dir).output().expect("openssl must be installed");
    assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// A client certificate `name.crt` + `name.key` for `CN=cn`, signed by `ca.crt` (or, with
/// `ca` false, by itself: a certificate Redis does not trust).
fn client_certificate(dir: &Path, name: &str, cn: &str, ca: bool) {
    let (key, csr, crt) = (format!("{name}.key"), format!("{name}.csr"), format!("{name}.crt"));
    let subject = format!("/CN={cn}");
    if !ca {
        openssl(
            dir,
            &[
                "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", &subject, "-keyout",
                &key, "-out", &crt,
            ],
        );
        return;
    }
    openssl(dir, &["req", "-newkey", "rsa:2048", "-nodes", "-subj", &subject, "-keyout", &key, "-out", &csr]);
    // X.509 v3, as every issuer makes them (rustls refuses v1 certificates).
    std::fs::write(dir.join("client.cnf"), "extendedKeyUsage=clientAuth\n").expect("write ext");
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            "client.cnf",
            "-out",
            &crt,
        ],
    );
}

/// A CA and a server certificate for 127.0.0.1, made with the openssl CLI.
fn certificates(dir: &Path) {
    let run = |args: &[&str]| openssl(dir, args);
    run(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "2",
        "-subj",
        "/CN=tollgate-test-ca",
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
    ]);
    run(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/CN=127.0.0.1",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
    ]);
    std::fs::write(dir.join("ext.cnf"), "subjectAltName=IP:127.0.0.1,DNS:localhost\n").expect("write ext");
    run(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        "ext.cnf",
        "-out",
        "server.crt",
    ]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_with_a_custom_ca() {
    let dir = tempfile::tempdir().expect("tempdir");
    certificates(dir.path());
    let (_redis, url) = redis_on_tls(dir.path(), "no");
    let trusted = app_with_url(url.clone(), Some(&dir.path().join("ca.crt"))).await;
    let req = request("d", &[&[("k", "tls")]]);
    assert_eq!(trusted.allowed_of(3, &req).await, 2, "limited over TLS");
    // Without the CA the server's certificate is not trusted: a store failure, closed.
    let untrusted = app_with_url(url, None).await;
    assert_eq!(untrusted.allowed_of(2, &req).await, 0);
}

/// A redis-server on a TLS port (and its plain port) that requires a client certificate
/// signed by `dir/ca.crt`; the `rediss://` URL.
fn redis_requiring_client_certificates(dir: &Path) -> (RedisServer, String) {
    redis_on_tls(dir, "yes")
}

/// A redis-server on a TLS port (and its plain port) with `dir`'s server certificate and
/// CA, `--tls-auth-clients` as `auth_clients`; the `rediss://` URL.
fn redis_on_tls(dir: &Path, auth_clients: &str) -> (RedisServer, String) {
    let tls_port = free_port();
    let path = |f: &str| dir.join(f).display().to_string();
    let (cert, key, ca) = (path("server.crt"), path("server.key"), path("ca.crt"));
    let tls_port_arg = tls_port.to_string();
    let redis = RedisServer::start_with(&[
        "--tls-port",
        &tls_port_arg,
        "--tls-cert-file",
        &cert,
        "--tls-key-file",
        &key,
        "--tls-ca-cert-file",
        &ca,
        "--tls-auth-clients",
        auth_clients,
    ]);
    (redis, format!("rediss://127.0.0.1:{tls_port}/"))
}

/// Redis requires a client certificate (`--tls-auth-clients yes`): presented, it limits
/// and `/rlconfig` and the metrics show it; absent or untrusted, every call fails and the
/// closed domain denies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_certificate_is_presented_and_shown_and_without_one_every_call_fails_closed() {
    let dir = tempfile::tempdir().expect("tempdir");
    certificates(dir.path());
    client_certificate(dir.path(), "client", "tollgate-client", true);
    client_certificate(dir.path(), "stranger", "stranger", false);
    let (_redis, url) = redis_requiring_client_certificates(dir.path());
    let ca = dir.path().join("ca.crt");
    let req = request("d", &[&[("k", "mtls")]]);

    let app = app_with_tls(url.clone(), Some(&ca), Some((dir.path(), "client"))).await;
    assert_eq!(app.allowed_of(3, &req).await, 2, "limited over mTLS");
    let text = app.admin("GET", "/rlconfig").await.body;
    assert!(text.contains("redis_client_cert: on (CN=tollgate-client, expires "), "{text}");
    let json: serde_json::Value =
        serde_json::from_str(&app.admin("GET", "/rlconfig?format=json").await.body).expect("json");
    assert_eq!(json["store"]["redis_client_cert"], "on", "{json}");
    assert_eq!(json["store"]["redis_client_cert_subject"], "CN=tollgate-client", "{json}");
    let not_after = json["store"]["redis_client_cert_not_after"].as_i64().expect("not_after");
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_secs();
    let days = (not_after - now as i64).div_euclid(86_400);
    assert!((1..=2).contains(&days), "valid for two days from now: {not_after}");
    assert_eq!(json["store"]["redis_client_cert_days_left"], days, "{json}");
    let metrics = app.metrics().await;
    let gauge = format!("tollgate_redis_client_cert_days_left{{store=\"redis\"}} {days}");
    assert!(metrics.contains(&gauge), "{gauge} in {metrics}");
    let key = std::fs::read_to_string(dir.path().join("client.key")).expect("key");
    let secret = key.lines().nth(1).expect("key material");
    assert!(!text.contains(secret) && !metrics.contains(secret));

    for (what, client) in [("no certificate", None), ("an untrusted one", Some((dir.path(), "stranger")))] {
        let refused = app_with_tls(url.clone(), Some(&ca), client).await;
        assert_eq!(
            refused.allowed_of(2, &req).await,
            0,
            "{what}: every call fails, the closed domain denies"
        );
    }
    let plain = app_with_url(url, Some(&ca)).await;
    let text = plain.admin("GET", "/rlconfig").await.body;
    assert!(text.contains("redis_client_cert: off"), "{text}");
    assert!(
        !plain.metrics().await.contains("tollgate_redis_client_cert_days_left{"),
        "no certificate, no gauge"
    );
}

/// A certificate rotated on disk (a Kubernetes secret updated in place) is presented by the
/// next connection, without a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_certificate_rotated_on_disk_is_presented_by_the_next_connection() {
    let dir = tempfile::tempdir().expect("tempdir");
    certificates(dir.path());
    client_certificate(dir.path(), "client", "first", true);
    let (redis, url) = redis_requiring_client_certificates(dir.path());
    let app = app_with_tls(url, Some(&dir.path().join("ca.crt")), Some((dir.path(), "client"))).await;
    let req = request("d", &[&[("k", "rotate")]]);
    assert_eq!(app.allowed_of(1, &req).await, 1);
    assert!(app.admin("GET", "/rlconfig").await.body.contains("CN=first"));
    client_certificate(dir.path(), "client", "second", true);
    // Every connection dropped from the server's side (through its plain port): the next
    // ones are made with the files as they are now.
    let admin = redis::Client::open(format!("redis://127.0.0.1:{}/", redis.port())).expect("client");
    let mut conn = admin.get_multiplexed_async_connection().await.expect("plain connection");
    let _: redis::Value = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("normal")
        .query_async(&mut conn)
        .await
        .expect("kill");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        app.check(req.clone()).await;
        let text = app.admin("GET", "/rlconfig").await.body;
        if text.contains("CN=second") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the rotated certificate was never read: {text}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let fresh = request("d", &[&[("k", "rotated")]]);
    assert_eq!(app.allowed_of(3, &fresh).await, 2, "limiting goes on through the new connections");
}
