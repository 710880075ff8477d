//! Tollgate as a Rate Limit Quota Service: two real Envoys whose only limit is the
//! `envoy.filters.http.rate_limit_quota` filter, each streaming to its own `tollgate serve`,
//! both Tollgates on one redis-server. One isolated fleet per test.
//!
//! Envoy `i` talks to Tollgate `i` only (its `rlqs` cluster has one endpoint) and names
//! itself `envoy-a` / `envoy-b` in the `x-tollgate-envoy` initial metadata of the stream.
//! Requests with an `x-user` header fall into the bucket `{name: user, user: <x-user>}` of
//! domain `api`; the answer is a `direct_response` 200, so nothing but the filter can deny
//! (429 with `x-quota-denied: true`).
//!
//! Tollgate runs with the compose demo's command line and its production defaults (no test
//! timeouts): on this path no store call waits on a request, so there is nothing to relax.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_yaml::Value;
use tempfile::TempDir;

use super::compose;
use super::envoy::{Envoy, Wiring};
use super::free_loopback;
use super::http;
use super::load::{epoch_secs, metric, Samples};
use super::tollgate::{self, Tollgate};
use crate::redis_support::RedisServer;

/// Envoy 1.40 reports every 5 s whatever the bucket's `reporting_interval` says.
pub const REPORT_PERIOD: Duration = Duration::from_secs(5);

/// The names the Envoys give themselves (`x-tollgate-envoy`), by index.
pub const ENVOY_NAMES: [&str; 2] = ["envoy-a", "envoy-b"];

/// The policy file every fleet serves (domain `api`).
const POLICY_FILE: &str = "api.yaml";

/// Envoy's bootstrap: listener → RLQS filter → `direct_response` 200; `rlqs` cluster (HTTP/2)
/// → `tollgate`. `no_assignment_behavior` is a blanket ALLOW_ALL: a token bucket there
/// crashes Envoy 1.40 at the second request of a new bucket.
pub fn bootstrap(listener: SocketAddr, admin: SocketAddr, tollgate: SocketAddr, name: &str) -> Value {
    let header_input = |header: &str| {
        serde_json::json!({
            "name": header,
            "typed_config": {
                "@type": "type.googleapis.com/envoy.type.matcher.v3.HttpRequestHeaderMatchInput",
                "header_name": header,
            },
        })
    };
    let bucket_settings = serde_json::json!({
        "@type": "type.googleapis.com/envoy.extensions.filters.http.rate_limit_quota.v3.RateLimitQuotaBucketSettings",
        "bucket_id_builder": { "bucket_id_builder": {
            "name": { "string_value": "user" },
            "user": { "custom_value": header_input("x-user") },
        } },
        // Required, and ignored by Envoy 1.40 (5 s hard-coded).
        "reporting_interval": "5s",
        "no_assignment_behavior": { "fallback_rate_limit": { "blanket_rule": "ALLOW_ALL" } },
        // Unset, the timeout is 0 s; ≥ 60 s keeps an Envoy cut off from Tollgate admitting.
        "expired_assignment_behavior": {
            "expired_assignment_behavior_timeout": "60s",
            "fallback_rate_limit": { "blanket_rule": "ALLOW_ALL" },
        },
        "deny_response_settings": {
            "http_status": { "code": 429 },
            "response_headers_to_add": [{ "header": { "key": "x-quota-denied", "value": "true" } }],
        },
    });
    let filter = serde_json::json!({
        "name": "envoy.filters.http.rate_limit_quota",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.http.rate_limit_quota.v3.RateLimitQuotaFilterConfig",
            "domain": "api",
            "rlqs_server": {
                "envoy_grpc": { "cluster_name": "rlqs" },
                "initial_metadata": [{ "key": "x-tollgate-envoy", "value": name }],
            },
            "bucket_matchers": { "matcher_list": { "matchers": [{
                // Only requests that carry x-user get a bucket; the others pass uncounted.
                "predicate": { "single_predicate": {
                    "input": header_input("x-user"),
                    "value_match": { "safe_regex": { "google_re2": {}, "regex": ".+" } },
                } },
                "on_match": { "action": { "name": "rate_limit_quota", "typed_config": bucket_settings } },
            }] } },
        },
    });
    let address = |addr: SocketAddr| serde_json::json!({ "socket_address": { "address": addr.ip().to_string(), "port_value": addr.port() } });
    let config = serde_json::json!({
        "admin": { "address": address(admin) },
        "static_resources": {
            "listeners": [{
                "name": "edge",
                "address": address(listener),
                "filter_chains": [{ "filters": [{
                    "name": super::envoy::HCM,
                    "typed_config": {
                        "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
                        "stat_prefix": "edge",
                        "route_config": { "name": "local", "virtual_hosts": [{
                            "name": "all",
                            "domains": ["*"],
                            "routes": [{
                                "match": { "prefix": "/" },
                                "direct_response": { "status": 200, "body": { "inline_string": "ok\n" } },
                            }],
                        }] },
                        "http_filters": [filter, {
                            "name": "envoy.filters.http.router",
                            "typed_config": { "@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router" },
                        }],
                    },
                }] }],
            }],
            "clusters": [{
                "name": "rlqs",
                "type": "STATIC",
                "connect_timeout": "1s",
                "typed_extension_protocol_options": {
                    "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
                        "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
                        "explicit_http_config": { "http2_protocol_options": {} },
                    },
                },
                "load_assignment": {
                    "cluster_name": "rlqs",
                    "endpoints": [{ "lb_endpoints": [{ "endpoint": { "address": address(tollgate) } }] }],
                },
            }],
        },
    });
    serde_yaml::to_value(config).expect("bootstrap as YAML")
}

/// The `api` domain with one limit on `name=user` → `user` (the bucket id's path):
/// `limit` is the YAML of its `rate_limit`.
pub fn policy(failure_mode: &str, limit: &str) -> String {
    format!(
        "domain: api\nfailure_mode: {failure_mode}\ndescriptors:\n  - key: name\n    value: user\n    \
         descriptors:\n      - key: user\n        rate_limit: {limit}\n"
    )
}

/// Two Envoys, two Tollgates, one Redis. Fields drop (and processes die) top to bottom.
pub struct Fleet {
    envoys: Vec<Envoy>,
    wirings: Vec<Wiring>,
    pub tollgates: Vec<Tollgate>,
    pub redis: RedisServer,
    policies: PathBuf,
    restarts: usize,
    dir: TempDir,
}

impl Fleet {
    /// Starts the fleet on `policy` (the whole `api` domain file), checked first by
    /// `tollgate check`.
    pub fn start(policy: &str) -> Fleet {
        let dir = tempfile::tempdir().expect("tempdir");
        let policies = dir.path().join("policies");
        std::fs::create_dir(&policies).expect("policy dir");
        std::fs::write(policies.join(POLICY_FILE), policy).expect("write policy");
        tollgate::check(&policies);
        let redis = RedisServer::start();
        let grpc: Vec<SocketAddr> = (0..2).map(|_| free_loopback()).collect();
        let tollgates =
            grpc.iter().enumerate().map(|(i, &addr)| serve(&redis, addr, &policies, dir.path(), i)).collect();
        let wirings: Vec<Wiring> = grpc
            .iter()
            .map(|&tollgate| Wiring {
                listener: free_loopback(),
                admin: free_loopback(),
                tollgate,
                // The route answers itself (direct_response): no upstream.
                upstream: free_loopback(),
            })
            .collect();
        let envoys = (0..2)
            .map(|i| start_envoy(&wirings[i], ENVOY_NAMES[i], &subdir(dir.path(), ENVOY_NAMES[i])))
            .collect();
        Fleet { envoys, wirings, tollgates, redis, policies, restarts: 0, dir }
    }

    /// Envoy `i`'s listener.
    pub fn listener(&self, i: usize) -> SocketAddr {
        self.wirings[i].listener
    }

    /// Kills Envoy `i` (SIGKILL: no goodbye on the stream) and starts it again with the same
    /// config, ports and name, until its `/ready`.
    pub fn restart_envoy(&mut self, i: usize) {
        drop(self.envoys.remove(i));
        self.restarts += 1;
        let dir = subdir(self.dir.path(), &format!("{}-restart-{}", ENVOY_NAMES[i], self.restarts));
        self.envoys.insert(i, start_envoy(&self.wirings[i], ENVOY_NAMES[i], &dir));
    }

    /// Replaces the policy file and reloads both Tollgates (`POST /reload`, as the file
    /// watcher would shortly after); panics unless both answer 200.
    pub fn reload(&self, policy: &str) {
        std::fs::write(self.policies.join(POLICY_FILE), policy).expect("write policy");
        for tollgate in &self.tollgates {
            let r = http::post(tollgate.admin, "/reload");
            assert_eq!(r.status, 200, "reload: {r:#?}\n{}", tollgate.log());
        }
    }

    /// Waits until Envoy `i` has its RLQS stream open (`cluster.rlqs.upstream_rq_active`;
    /// the filter opens it at the first request that matches a bucket) and Tollgate `i`
    /// counts it (`tollgate_rlqs_streams`).
    pub fn wait_stream(&self, i: usize) {
        let (envoy, tollgate) = (&self.envoys[i], &self.tollgates[i]);
        self.wait(&format!("the RLQS stream of {}", ENVOY_NAMES[i]), Duration::from_secs(15), || {
            envoy.stat("cluster.rlqs.upstream_rq_active") >= 1
                && metric(tollgate.admin, "tollgate_rlqs_streams", &[]) >= 1.0
        });
    }

    /// Polls `ready` every 20 ms for up to `timeout`; panics with every log tail after it.
    pub fn wait(&self, what: &str, timeout: Duration, mut ready: impl FnMut() -> bool) {
        let deadline = Instant::now() + timeout;
        while !ready() {
            assert!(Instant::now() < deadline, "not {what} after {timeout:?}\n{}", self.logs());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// A debugging aid: with `TOLLGATE_E2E_DUMP=<dir>`, writes every sample (Envoy, user,
    /// sent and done in epoch seconds, outcome) and each Tollgate's whole log there.
    pub fn dump(&self, samples: &Samples) {
        let Ok(dir) = std::env::var("TOLLGATE_E2E_DUMP") else { return };
        let lines: Vec<String> = samples
            .0
            .iter()
            .map(|s| {
                format!(
                    "{} {} {:.3} {:.3} {:?}",
                    s.envoy,
                    s.user,
                    epoch_secs(s.sent),
                    epoch_secs(s.done),
                    s.outcome
                )
            })
            .collect();
        std::fs::write(Path::new(&dir).join("samples.txt"), lines.join("\n")).expect("write samples");
        for (i, tollgate) in self.tollgates.iter().enumerate() {
            std::fs::write(Path::new(&dir).join(format!("tollgate-{i}.log")), tollgate.log())
                .expect("write log");
        }
    }

    /// The tails of every log and Tollgate's RLQS metrics, for failure messages.
    pub fn logs(&self) -> String {
        let envoys = self.envoys.iter().map(Envoy::log_tail);
        let tollgates = self.tollgates.iter().map(|t| {
            let metrics = http::try_get(t.admin, "/metrics", &[]).map(|r| r.body).unwrap_or_default();
            let rlqs: Vec<&str> = metrics.lines().filter(|l| l.starts_with("tollgate_rlqs_")).collect();
            format!("{}\n{}", tail(&t.log(), 40), rlqs.join("\n"))
        });
        envoys.chain(tollgates).collect::<Vec<_>>().join("\n")
    }
}

fn subdir(dir: &Path, name: &str) -> PathBuf {
    let sub = dir.join(name);
    std::fs::create_dir_all(&sub).expect("create subdir");
    sub
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    format!("--- tollgate ---\n{}", all[all.len().saturating_sub(lines)..].join("\n"))
}

fn start_envoy(wiring: &Wiring, name: &str, dir: &Path) -> Envoy {
    Envoy::start(&bootstrap(wiring.listener, wiring.admin, wiring.tollgate, name), wiring, dir)
}

/// `tollgate serve` with the compose command line on test addresses, in `dir/tollgate-<i>`.
fn serve(redis: &RedisServer, grpc: SocketAddr, policies: &Path, dir: &Path, i: usize) -> Tollgate {
    let admin = free_loopback();
    let args = compose::with_flags(
        &compose::command(&compose::compose(), "tollgate"),
        &[
            ("--config", policies.display().to_string()),
            ("--redis-url", redis.url()),
            ("--grpc-addr", grpc.to_string()),
            ("--admin-addr", admin.to_string()),
        ],
    );
    // A debugging aid: TOLLGATE_E2E_RUST_LOG=info,tollgate::service::rlqs=debug logs every share.
    let env: Vec<(String, String)> =
        std::env::var("TOLLGATE_E2E_RUST_LOG").map(|v| vec![("RUST_LOG".to_string(), v)]).unwrap_or_default();
    Tollgate::serve(&args, &env, admin, &subdir(dir, &format!("tollgate-{i}")))
}
