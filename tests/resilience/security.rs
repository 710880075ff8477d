//! Redis AUTH (password in the URL) and TLS (`rediss://` with a custom CA) against a real
//! redis-server; the password never shows in /rlconfig or logs.

use std::path::Path;
use std::process::Command;

use tollgate::app::StoreKind;

use crate::redis_support::{free_port, RedisServer};
use crate::support::*;

const POLICY: &str = "domain: d\nfailure_mode: closed\ndescriptors:\n  - key: k\n    rate_limit: { unit: hour, requests_per_unit: 2 }\n";

async fn app_with_url(url: String, ca: Option<&Path>) -> TestApp {
    let mut options = Options::new(StoreKind::Redis);
    options.redis_url = Some(url);
    options.redis_ca_file = ca.map(Path::to_path_buf);
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

/// A CA and a server certificate for 127.0.0.1, made with the openssl CLI.
fn certificates(dir: &Path) {
    let run = |args: &[&str]| {
        let out =
            Command::new("openssl").args(args).current_dir(dir).output().expect("openssl must be installed");
        assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
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
    let tls_port = free_port();
    let path = |f: &str| dir.path().join(f).display().to_string();
    let (cert, key, ca) = (path("server.crt"), path("server.key"), path("ca.crt"));
    let tls_port_arg = tls_port.to_string();
    let _redis = RedisServer::start_with(&[
        "--tls-port",
        &tls_port_arg,
        "--tls-cert-file",
        &cert,
        "--tls-key-file",
        &key,
        "--tls-ca-cert-file",
        &ca,
        "--tls-auth-clients",
        "no",
    ]);
    let url = format!("rediss://127.0.0.1:{tls_port}/");
    let trusted = app_with_url(url.clone(), Some(&dir.path().join("ca.crt"))).await;
    let req = request("d", &[&[("k", "tls")]]);
    assert_eq!(trusted.allowed_of(3, &req).await, 2, "limited over TLS");
    // Without the CA the server's certificate is not trusted: a store failure, closed.
    let untrusted = app_with_url(url, None).await;
    assert_eq!(untrusted.allowed_of(2, &req).await, 0);
}
