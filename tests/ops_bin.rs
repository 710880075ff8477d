//! The real `tollgate` binary: SIGTERM drains and exits 0, SIGHUP reloads, and `explain`
//! on the shipped policies. Signals go to the spawned binary only, never to this process.

#[allow(dead_code)]
#[path = "support/redis.rs"]
mod redis_support;
#[allow(dead_code)]
#[path = "api/support.rs"]
mod support;

use std::net::SocketAddr;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use tonic::transport::Channel;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

use redis_support::free_port;
use support::{eventually, http, limits, request, Traffic};

fn tollgate() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tollgate"))
}

fn user_policy(per_user: u32) -> String {
    format!(
        "domain: api\ndescriptors:\n  - key: user\n    rate_limit: {{ name: per-user, unit: hour, requests_per_unit: {per_user} }}\n"
    )
}

/// A `tollgate serve` process on free ports, killed on drop if still running.
struct Server {
    child: Child,
    grpc: SocketAddr,
    admin: SocketAddr,
    dir: tempfile::TempDir,
}

impl Server {
    /// Starts the binary with `api.yaml` = `policy` and waits until `/readyz` says ready.
    async fn start(policy: &str, extra: &[&str]) -> Server {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(dir.path().join("config")).expect("mkdir");
        std::fs::write(dir.path().join("config/api.yaml"), policy).expect("write policy");
        let log = std::fs::File::create(dir.path().join("stderr.log")).expect("log file");
        let grpc: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().expect("addr");
        let admin: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().expect("addr");
        let child = tollgate()
            .args(["serve", "--grpc-addr", &grpc.to_string(), "--admin-addr", &admin.to_string()])
            .arg("--config")
            .arg(dir.path().join("config"))
            .args(extra)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn tollgate");
        let mut server = Server { child, grpc, admin, dir };
        let ready = eventually(Duration::from_secs(10), || async {
            http(admin, "GET", "/readyz").await.is_ok_and(|r| r.status == 200)
        })
        .await;
        assert!(ready && server.child.try_wait().ok().flatten().is_none(), "not ready:\n{}", server.log());
        server
    }

    fn config(&self) -> std::path::PathBuf {
        self.dir.path().join("config/api.yaml")
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("stderr.log")).unwrap_or_default()
    }

    /// Sends `signal` (e.g. `TERM`, `HUP`) to the server process.
    fn signal(&self, signal: &str) {
        let status = Command::new("kill").arg(format!("-{signal}")).arg(self.child.id().to_string()).status();
        assert!(status.is_ok_and(|s| s.success()), "kill -{signal} failed");
    }

    async fn channel(&self) -> Channel {
        Channel::from_shared(format!("http://{}", self.grpc)).expect("uri").connect().await.expect("connect")
    }

    async fn ready_status(&self) -> Option<u16> {
        http(self.admin, "GET", "/readyz").await.ok().map(|r| r.status)
    }

    async fn user_limit(&self, client: &RateLimitServiceClient<Channel>) -> Option<u32> {
        let response = client.clone().should_rate_limit(request("api", &[&[("user", "alice")]])).await;
        response.ok().map(|r| limits(&r.into_inner())[0])
    }

    /// Waits up to `timeout` for the process to exit.
    async fn exit_within(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_then_exits_zero() {
    let drain = Duration::from_secs(2);
    let mut server = Server::start(&user_policy(100), &["--drain-seconds", "2"]).await;
    let channel = server.channel().await;
    let client = RateLimitServiceClient::new(channel.clone());
    let health = HealthClient::new(channel);
    assert_eq!(server.user_limit(&client).await, Some(100));

    // Requests keep flowing, on the open connection, from before SIGTERM into the drain.
    let traffic = Traffic::start(&client, &request("api", &[&[("user", "alice")]]), 2);
    let sent = Instant::now();
    server.signal("TERM");
    let unready =
        eventually(Duration::from_secs(1), || async { server.ready_status().await == Some(503) }).await;
    assert!(unready, "/readyz did not go 503 after SIGTERM:\n{}", server.log());
    let not_serving = eventually(Duration::from_secs(1), || async {
        let status = health.clone().check(HealthCheckRequest { service: String::new() }).await;
        status.is_ok_and(|r| r.into_inner().status == ServingStatus::NotServing as i32)
    })
    .await;
    assert!(not_serving, "gRPC health did not go NOT_SERVING");
    assert_eq!(server.user_limit(&client).await, Some(100), "a request during the drain failed");
    let report = traffic.stop().await;
    assert!(sent.elapsed() < drain && server.child.try_wait().ok().flatten().is_none(), "test too slow");
    assert!(report.errors.is_empty() && report.requests > 0, "{report:?}");

    let exit = server.exit_within(drain + Duration::from_secs(3)).await;
    assert!(exit.is_some_and(|s| s.success()), "exit {exit:?}, log:\n{}", server.log());
    assert!(sent.elapsed() >= drain, "exited before the drain period was over");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reloads_without_failing_requests() {
    let server = Server::start(&user_policy(1000), &["--no-watch"]).await;
    let client = RateLimitServiceClient::new(server.channel().await);
    std::fs::write(server.config(), user_policy(2000)).expect("write");
    assert_eq!(server.user_limit(&client).await, Some(1000), "--no-watch: the write alone reloads nothing");

    let traffic = Traffic::start(&client, &request("api", &[&[("user", "alice")]]), 4);
    server.signal("HUP");
    let reloaded =
        eventually(Duration::from_secs(2), || async { server.user_limit(&client).await == Some(2000) }).await;
    let report = traffic.stop().await;
    assert!(reloaded, "SIGHUP did not reload within 2 s:\n{}", server.log());
    assert!(report.errors.is_empty() && report.requests > 0, "{report:?}");

    // A broken file on SIGHUP: logged with file and rule, the old limit keeps serving.
    std::fs::write(server.config(), "domain: api\ndescriptors:\n  - key: user\n    rate_limit: { unit: fortnight, requests_per_unit: 1 }\n")
        .expect("write broken");
    server.signal("HUP");
    let logged = eventually(Duration::from_secs(2), || async { server.log().contains("fortnight") }).await;
    assert!(logged, "the failed reload was not logged:\n{}", server.log());
    let log = server.log();
    assert!(log.contains("api.yaml") && log.contains("descriptors[0].rate_limit.unit"), "{log}");
    assert_eq!(server.user_limit(&client).await, Some(2000));
}

/// A reload that changes `hash_tag` and a rule's unit: one warning per change naming what
/// changed, and the per-domain count; `check --against` lists the same changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_that_changes_bucket_keys_warns_and_counts() {
    let server = Server::start(&user_policy(1000), &["--no-watch"]).await;
    let old = server.dir.path().join("old.yaml");
    std::fs::write(&old, user_policy(1000)).expect("write old");
    let tagged = user_policy(1000).replace("domain: api\n", "domain: api\nhash_tag: domain\n");
    std::fs::write(server.config(), &tagged).expect("write");
    server.signal("HUP");
    let warned = eventually(Duration::from_secs(2), || async { server.log().contains("start afresh") }).await;
    let log = server.log();
    assert!(warned, "no warning:\n{log}");
    let line = log.lines().find(|l| l.contains("start afresh")).unwrap_or_default();
    assert!(
        line.contains("WARN") && line.contains("domain=api") && line.contains("hash_tag descriptor → domain"),
        "{line}"
    );
    let metrics = http(server.admin, "GET", "/metrics").await.expect("metrics").body;
    let series = r#"tollgate_config_reload_fresh_rules_total{domain="api"}"#;
    assert_eq!(support::metric(&metrics, series), Some(1.0), "{metrics}");

    let out =
        tollgate().arg("check").arg(server.config()).arg("--against").arg(&old).output().expect("check");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        stdout.contains("these buckets start afresh")
            && stdout.contains("domain api: hash_tag descriptor → domain"),
        "{stdout}"
    );
    let out = tollgate().arg("check").arg(&old).arg("--against").arg(&old).output().expect("check");
    assert!(String::from_utf8_lossy(&out.stdout).contains("no bucket starts afresh"));
}

fn explain(args: &[&str]) -> (bool, String, String) {
    let out = tollgate().arg("explain").args(args).output().expect("run tollgate explain");
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.success(), text(&out.stdout), text(&out.stderr))
}

#[test]
fn explain_walks_the_shipped_policies() {
    let (ok, out, err) = explain(&[
        "config",
        "--domain",
        "api",
        "--descriptor",
        "user=alice,path=/v1/search/x",
        "--descriptor",
        "path=/healthz",
        "--descriptor",
        "country=fr",
    ]);
    assert!(ok, "{err}");
    for expected in [
        "domain api: failure_mode open",
        "descriptor 1: user=alice, path=/v1/search/x",
        "1. user=alice: default node of key \"user\"",
        "this node's own limit per-user does not apply",
        "2. path=/v1/search/x: wildcard \"/v1/search*\"",
        "→ rule per-user-search (path descriptors[0].descriptors[0])",
        "limit: requests_per_unit 60 per minute (gcra), burst 60",
        "bucket key: tg:g2m:",
        "descriptor 2: path=/healthz",
        "1. path=/healthz: exact value",
        "unlimited: OK with remaining 4294967295",
        "descriptor 3: country=fr",
        "shadow_mode (counted and reported, never denies)",
    ] {
        assert!(out.contains(expected), "missing {expected:?} in:\n{out}");
    }
}

#[test]
fn explain_reports_config_errors_and_bad_descriptors() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("bad.yaml"), "domain: web\ndescriptors:\n  - key: user\n    rate_limit: { unit: fortnight, requests_per_unit: 5 }\n")
        .expect("write");
    let path = dir.path().to_str().expect("utf-8 path");
    let (ok, _, err) = explain(&[path, "--domain", "web", "--descriptor", "user=a"]);
    assert!(!ok && err.contains("bad.yaml") && err.contains("fortnight"), "{err}");
    let (ok, _, err) = explain(&["config", "--domain", "api", "--descriptor", "user"]);
    assert!(!ok && err.contains("not key=value"), "{err}");
    let (ok, out, _) = explain(&["config", "--domain", "nope", "--descriptor", "user=a"]);
    assert!(ok && out.contains("domain \"nope\" is not configured"), "{out}");
}

/// Every password form redis-rs accepts stays out of the logs, `/rlconfig` (text and JSON)
/// and error messages: a unix socket URL's `pass=` (limits correctly through it) and a
/// TCP URL's `user:password@` that Redis refuses (logged as a failing store).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_passwords_never_show_in_logs_or_endpoints() {
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("redis.sock");
    let socket_arg = socket.display().to_string();
    let redis = redis_support::RedisServer::start_with(&[
        "--unixsocket",
        &socket_arg,
        "--unixsocketperm",
        "700",
        "--requirepass",
        "unix-s3cret",
    ]);
    let cases = [
        (format!("redis+unix://{socket_arg}?db=0&pass=unix-s3cret"), "unix-s3cret", true),
        (format!("redis://app:tcp-s3cret@127.0.0.1:{}/", redis.port()), "tcp-s3cret", false),
    ];
    let policy = "domain: api\nfailure_mode: closed\ndescriptors:\n  - key: user\n    rate_limit: { unit: hour, requests_per_unit: 2 }\n";
    for (url, secret, reachable) in cases {
        let server =
            // A store timeout of 2 s: under load the first request may wait for the first
            // connection, and a 10 ms budget would answer it by `failure_mode: closed`.
            Server::start(
                policy,
                &["--store", "redis", "--redis-url", &url, "--log-format", "json", "--store-timeout-ms", "2000"],
            )
            .await;
        let mut client = RateLimitServiceClient::new(server.channel().await);
        let mut allowed = 0;
        for _ in 0..3 {
            let answer = client.should_rate_limit(request("api", &[&[("user", "u")]])).await.expect("grpc");
            allowed += usize::from(answer.into_inner().overall_code == 1);
        }
        assert_eq!(allowed, if reachable { 2 } else { 0 }, "{url}: limited through Redis, or closed");
        for path in ["/rlconfig", "/rlconfig?format=json", "/metrics"] {
            let body = http(server.admin, "GET", path).await.expect("admin").body;
            assert!(!body.contains(secret), "{path} shows the password:\n{body}");
        }
        let rlconfig = http(server.admin, "GET", "/rlconfig").await.expect("admin").body;
        assert!(rlconfig.contains("***"), "the redacted URL is shown:\n{rlconfig}");
        if !reachable {
            // Failing means calls failed for 0.5 s with none succeeding (a lone timeout is
            // no outage): keep calling until the store says so.
            let logged = eventually(Duration::from_secs(5), || {
                let mut client = client.clone();
                let log = server.log();
                async move {
                    let _ = client.should_rate_limit(request("api", &[&[("user", "u")]])).await;
                    log.contains("failing")
                }
            })
            .await;
            assert!(logged, "the failing store was logged:\n{}", server.log());
        }
        let log = server.log();
        assert!(!log.contains(secret), "the log shows the password:\n{log}");
    }
    drop(redis);
}

/// `tollgate usage` / `tollgate reset` against the running binary, with its audit lines.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_and_reset_verbs_call_the_admin_port_and_resets_are_audited() {
    use sha2::Digest;
    let tokens = tempfile::tempdir().expect("tempdir");
    let token_file = tokens.path().join("token");
    std::fs::write(&token_file, "s3cret-admin\n").expect("write token");
    let token_file = token_file.to_str().expect("utf-8 path").to_string();
    let server = Server::start(&user_policy(3), &["--admin-token-file", &token_file]).await;
    let client = RateLimitServiceClient::new(server.channel().await);
    for _ in 0..2 {
        client.clone().should_rate_limit(request("api", &[&[("user", "a,b")]])).await.expect("grpc");
    }
    let admin = format!("http://{}", server.admin);
    let verb = |verb: &str, extra: &[&str]| {
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_tollgate"));
        command.args([verb, "--admin", &admin, "--domain", "api", "--descriptor", r"user=a\,b"]).args(extra);
        command.env_remove("TOLLGATE_ADMIN_TOKEN_FILE").env_remove("TOLLGATE_ADMIN_URL");
        command
    };
    let with_token = ["--token-file", token_file.as_str()];

    let out = verb("usage", &with_token).output().await.expect("run usage");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("usage prints JSON");
    assert_eq!(json["descriptor"], serde_json::json!([{ "key": "user", "value": "a,b" }]));
    assert_eq!(
        (json["limits"][0]["consumed"].as_u64(), json["limits"][0]["remaining"].as_u64()),
        (Some(2), Some(1))
    );

    let out = verb("reset", &[]).output().await.expect("run reset");
    assert!(!out.status.success(), "a reset without the token fails");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("HTTP 401"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let out = verb("reset", &with_token).output().await.expect("run reset");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("reset prints JSON");
    assert_eq!(json["limits"][0]["consumed"].as_u64(), Some(0));

    // The audit id is the one the startup line names (keyed per process), not a hash of
    // the token alone.
    let log = server.log();
    let loaded = log.lines().find(|l| l.contains("admin token loaded")).unwrap_or_else(|| panic!("{log}"));
    let id = loaded.split("token=").nth(1).map(|rest| rest.trim_matches('"')).unwrap_or_default();
    let id = id.get(..8).unwrap_or_else(|| panic!("an 8-digit id in {loaded}"));
    assert!(id.chars().all(|c| c.is_ascii_hexdigit()), "{loaded}");
    assert_ne!(
        id,
        &format!("{:x}", sha2::Sha256::digest(b"s3cret-admin"))[..8],
        "a bare sha256 of the token"
    );
    let audit: Vec<&str> = log.lines().filter(|l| l.contains("tollgate::audit")).collect();
    assert_eq!(audit.len(), 2, "one line per reset, refused or not:\n{log}");
    assert!(audit[0].contains("result=\"refused\"") && audit[0].contains("status=401"), "{}", audit[0]);
    for part in [
        "client=127.0.0.1:",
        &format!("token=\"{id}\""),
        r#"domain="api""#,
        r#"descriptor="user=a,b""#,
        "buckets=1",
    ] {
        assert!(audit[1].contains(part), "{part:?} missing in {}", audit[1]);
    }
    assert!(!log.contains("s3cret-admin"), "the token must never be logged");
}

/// The incident switch's audit lines (who, what, when, until; refusals too), and
/// `--key-secret-file`: the reset audit line names the descriptor keyed, and neither the
/// secret nor a raw value reaches the log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overrides_are_audited_and_a_key_secret_keeps_values_out_of_the_log() {
    let files = tempfile::tempdir().expect("tempdir");
    let token_file = files.path().join("token");
    std::fs::write(&token_file, "s3cret-admin\n").expect("write token");
    let secret_file = files.path().join("key-secret");
    let secret = "9d3c2b1a0f9e8d7c6b5a49382716059a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e";
    std::fs::write(&secret_file, format!("{secret}\n")).expect("write secret");
    let (token_file, secret_file) =
        (token_file.to_str().expect("utf-8").to_string(), secret_file.to_str().expect("utf-8").to_string());
    let server = Server::start(
        &user_policy(3),
        &["--admin-token-file", &token_file, "--key-secret-file", &secret_file],
    )
    .await;
    let client = RateLimitServiceClient::new(server.channel().await);
    client.clone().should_rate_limit(request("api", &[&[("user", "alice-raw-id")]])).await.expect("grpc");

    let bearer = [("Authorization", "Bearer s3cret-admin")];
    let body = r#"{"scope": "api", "mode": "shadow", "ttl_seconds": 120}"#;
    let set = support::http_request(server.admin, "POST", "/v1/override", &bearer, body).await.expect("post");
    assert_eq!(set.status, 200, "{}", set.body);
    let refused = support::http_request(server.admin, "POST", "/v1/override", &[], body).await.expect("post");
    assert_eq!(refused.status, 401);
    let ended = support::http_request(server.admin, "DELETE", "/v1/override?scope=api", &bearer, "").await;
    assert_eq!(ended.expect("delete").status, 200);
    let path = "/v1/reset?domain=api&descriptor=user%3Dalice-raw-id";
    assert_eq!(
        support::http_request(server.admin, "POST", path, &bearer, "").await.expect("reset").status,
        200
    );

    let log = server.log();
    let audit: Vec<&str> = log.lines().filter(|l| l.contains("tollgate::audit")).collect();
    assert_eq!(audit.len(), 4, "one line per call, refused or not:\n{log}");
    for part in [
        "admin override",
        "client=127.0.0.1:",
        "token=\"",
        r#"scope="api""#,
        "mode=\"shadow\"",
        "ttl_seconds=120",
        "expires_at_unix_ms=",
        "fleet=\"local\"",
        "result=\"set\"",
    ] {
        assert!(audit[0].contains(part), "{part:?} missing in {}", audit[0]);
    }
    assert!(audit[1].contains("result=\"refused\"") && audit[1].contains("status=401"), "{}", audit[1]);
    assert!(audit[2].contains("result=\"ended\"") && audit[2].contains("mode=\"shadow\""), "{}", audit[2]);
    assert!(
        audit[3].contains("admin reset") && audit[3].contains("descriptor=\"user=~"),
        "keyed: {}",
        audit[3]
    );
    assert!(!log.contains("alice-raw-id"), "a raw value reached the log:\n{log}");
    assert!(!log.contains(secret) && !log.contains("s3cret-admin"), "a secret reached the log:\n{log}");
    assert!(log.contains("key secret loaded"), "{log}");
}
