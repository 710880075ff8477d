//! The compose demo without Docker: redis-server, `tollgate serve` with the compose
//! file's command line, an upstream, and Envoy on the shipped `envoy/envoy.yaml` with only
//! its addresses rewritten to loopback ports. One isolated topology per test.
//!
//! Two deliberate changes for test machines (shared, 2 cores, builds running alongside):
//! Tollgate's store deadline (`--store-timeout-ms 500`) and the filter `timeout` (1 s) are
//! raised, so that load never turns a decision into a failure-mode answer. The shipped
//! values are checked by `envoy --mode validate` and by the static tests.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tempfile::TempDir;

use super::compose;
use super::envoy::{self, Envoy, FilterOverrides, Wiring};
use super::free_loopback;
use super::http::{self, Response, Upstream};
use super::tollgate::Tollgate;
use super::yaml;
use crate::redis_support::RedisServer;

/// Test-only changes to the demo; `Default` runs it as shipped (test timeouts aside).
#[derive(Debug, Default, Clone)]
pub struct Changes<'a> {
    pub filter: FilterOverrides,
    /// Policy files `(file name, YAML)` written over the shipped ones (same name: replaces).
    pub policies: &'a [(&'a str, &'a str)],
    /// Extra environment of `tollgate serve` (its `TOLLGATE_*` flags).
    pub env: &'a [(&'a str, &'a str)],
    /// A line format for an access log of the edge listener (`Topology::access_log`).
    pub access_log: Option<&'a str>,
    /// YAML of the edge virtual host's `rate_limits`, replacing the shipped actions.
    pub vhost_rate_limits: Option<&'a str>,
    /// YAML of HTTP filters inserted before the edge listener's router (after the
    /// ratelimit filter).
    pub http_filters: Option<&'a str>,
    /// YAML of the ratelimit filter's own `rate_limits` (which Envoy then uses instead of
    /// the route table's).
    pub filter_rate_limits: Option<&'a str>,
    /// Policies from this xDS server instead of files (`--config` is dropped).
    pub xds: Option<XdsSource>,
    /// An OTLP/gRPC collector both Envoy (its OpenTelemetry tracer, every request sampled)
    /// and Tollgate (`TRACING_ENABLED=true`) send spans to.
    pub tracing: Option<SocketAddr>,
}

/// An xDS management server Tollgate reads its policies from, over mTLS.
#[derive(Debug, Clone)]
pub struct XdsSource {
    pub server: SocketAddr,
    /// `tls.crt`, `tls.key` (Tollgate's client identity) and `ca.crt` (the server's CA).
    pub certs: PathBuf,
    /// The name the server's certificate carries.
    pub san: String,
}

/// Every process of one end-to-end test. Fields drop (and processes die) top to bottom.
pub struct Topology {
    pub envoy: Envoy,
    pub tollgate: Tollgate,
    pub upstream: Upstream,
    pub redis: RedisServer,
    dir: TempDir,
}

impl Topology {
    /// The demo as shipped (test timeouts aside).
    pub fn start() -> Topology {
        Topology::start_with(FilterOverrides::default())
    }

    /// The demo with changes to Envoy's ratelimit filter.
    pub fn start_with(filter: FilterOverrides) -> Topology {
        Topology::start_with_policies(filter, &[])
    }

    /// The demo with changes to Envoy's ratelimit filter and extra policy files `(file
    /// name, YAML)`, written over the shipped ones (same name: replaces it).
    pub fn start_with_policies(filter: FilterOverrides, policies: &[(&str, &str)]) -> Topology {
        Topology::start_changed(Changes { filter, policies, ..Changes::default() })
    }

    /// The demo with any of the `Changes`.
    pub fn start_changed(changes: Changes<'_>) -> Topology {
        let Changes {
            mut filter,
            policies,
            env,
            access_log,
            vhost_rate_limits,
            http_filters,
            filter_rate_limits,
            xds,
            tracing,
        } = changes;
        let mut env: Vec<(String, String)> =
            env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        if let Some(collector) = tracing {
            // The peer's variables and the standard ones, as Envoy Gateway sets them; spans
            // leave in batches every 50 ms (the default 5 s would only slow the test).
            let traced = [
                ("TRACING_ENABLED", "true".to_string()),
                ("TRACING_SERVICE_NAME", "tollgate-e2e".to_string()),
                ("TRACING_EXPORTER_PROTOCOL", "grpc".to_string()),
                ("OTEL_EXPORTER_OTLP_ENDPOINT", format!("http://{collector}")),
                ("OTEL_BSP_SCHEDULE_DELAY", "50".to_string()),
            ];
            env.extend(traced.into_iter().map(|(k, v)| (k.to_string(), v)));
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let redis = RedisServer::start();
        let upstream = Upstream::start();
        let demo = compose::compose();
        let grpc = free_loopback();
        let tollgate = start_tollgate(&demo, &redis, grpc, dir.path(), policies, &env, xds.as_ref());
        let wiring = Wiring {
            listener: free_loopback(),
            admin: free_loopback(),
            tollgate: grpc,
            upstream: upstream.addr(),
        };
        let shipped = yaml::load_file(&compose::mount_source(&demo, "envoy", "/etc/envoy/envoy.yaml"));
        filter.timeout.get_or_insert_with(|| "1s".to_string());
        let mut config = envoy::render(&shipped, &wiring, &filter);
        if let Some(collector) = tracing {
            envoy::add_tracing(&mut config, collector);
        }
        if let Some(format) = access_log {
            envoy::add_access_log(&mut config, &access_log_path(dir.path()), format);
        }
        if let Some(rate_limits) = vhost_rate_limits {
            envoy::set_vhost_rate_limits(
                &mut config,
                serde_yaml::from_str(rate_limits).expect("rate_limits YAML"),
            );
        }
        if let Some(rate_limits) = filter_rate_limits {
            envoy::set_filter_rate_limits(
                &mut config,
                serde_yaml::from_str(rate_limits).expect("rate_limits YAML"),
            );
        }
        if let Some(filters) = http_filters {
            envoy::insert_http_filters(
                &mut config,
                serde_yaml::from_str(filters).expect("http_filters YAML"),
            );
        }
        let envoy = Envoy::start(&config, &wiring, dir.path());
        Topology { envoy, tollgate, upstream, redis, dir }
    }

    /// The first `lines` lines of the access log (see `Changes::access_log`), waiting up to
    /// 10 s for Envoy to write them.
    pub fn access_log(&self, lines: usize) -> Vec<String> {
        let path = access_log_path(self.dir.path());
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            let got: Vec<String> = text.lines().map(str::to_string).collect();
            if got.len() >= lines {
                return got.into_iter().take(lines).collect();
            }
            assert!(Instant::now() < deadline, "{} access log lines, not {lines}: {got:#?}", got.len());
            // Polls a file Envoy flushes on its own timer (`Envoy::start` sets it to 50 ms).
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `GET path` through Envoy's listener.
    pub fn get(&self, path: &str, headers: &[(&str, &str)]) -> Response {
        http::get(self.envoy.listener, path, headers)
    }

    /// `GET path` through Envoy's listener with raw header value bytes.
    pub fn get_bytes(&self, path: &str, headers: &[(&str, &[u8])]) -> Response {
        let addr = self.envoy.listener;
        http::try_get_bytes(addr, path, headers).unwrap_or_else(|e| panic!("GET http://{addr}{path}: {e}"))
    }
}

fn access_log_path(dir: &Path) -> PathBuf {
    dir.join("access.log")
}

/// Runs Tollgate with the compose command line, on test addresses and a copy of the
/// policies the compose file mounts.
fn start_tollgate(
    demo: &serde_yaml::Value,
    redis: &RedisServer,
    grpc: SocketAddr,
    dir: &Path,
    extra: &[(&str, &str)],
    env: &[(String, String)],
    xds: Option<&XdsSource>,
) -> Tollgate {
    let policies = dir.join("policies");
    std::fs::create_dir(&policies).expect("policy dir");
    let mounted = compose::mount_source(demo, "tollgate", "/etc/tollgate/config");
    for entry in std::fs::read_dir(&mounted).expect("read mounted policies") {
        let path = entry.expect("dir entry").path();
        if path.extension().is_some_and(|e| e == "yaml" || e == "yml") {
            std::fs::copy(&path, policies.join(path.file_name().expect("name"))).expect("copy policy");
        }
    }
    for (name, yaml) in extra {
        std::fs::write(policies.join(name), yaml).expect("write policy");
    }
    let admin = free_loopback();
    let args = compose::with_flags(
        &compose::command(demo, "tollgate"),
        &[
            ("--config", policies.display().to_string()),
            ("--redis-url", redis.url()),
            ("--grpc-addr", grpc.to_string()),
            ("--admin-addr", admin.to_string()),
            ("--store-timeout-ms", "500".to_string()),
        ],
    );
    let args = match xds {
        None => args,
        Some(xds) => {
            let cert = |name: &str| xds.certs.join(name).display().to_string();
            compose::with_flags(
                &compose::without_flag(&args, "--config"),
                &[
                    ("--config-source", "xds".to_string()),
                    ("--xds-server", xds.server.to_string()),
                    ("--xds-node-id", "envoy-ratelimit".to_string()),
                    ("--xds-tls", "true".to_string()),
                    ("--xds-client-cert", cert("tls.crt")),
                    ("--xds-client-key", cert("tls.key")),
                    ("--xds-ca", cert("ca.crt")),
                    ("--xds-san", xds.san.clone()),
                ],
            )
        }
    };
    Tollgate::serve(&args, env, admin, dir)
}
