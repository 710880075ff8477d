//! Peer mode: envoyproxy/ratelimit's environment read as Tollgate settings, so that the
//! container Envoy Gateway generates (command `/bin/ratelimit`, no arguments, the peer's
//! variables) runs Tollgate with only its image changed.
//!
//! Peer mode is on when the binary is started as `ratelimit` (argv[0]'s file name: a
//! `/bin/ratelimit` link or copy in the image), or with `serve --peer-env`
//! (`TOLLGATE_PEER_ENV=true`). Then every variable of `vars::VARIABLES` that is set fills
//! the Tollgate setting it names unless that setting's flag or `TOLLGATE_*` variable is
//! given (Tollgate's always win), and the peer's listen addresses are the defaults:
//! gRPC `GRPC_HOST:GRPC_PORT` (0.0.0.0:8081), `/healthcheck` on `HOST:PORT` (0.0.0.0:8080),
//! the admin server on `DEBUG_HOST:DEBUG_PORT` (0.0.0.0:6070, the peer's debug port, where
//! its `/rlconfig` is), and with `USE_PROMETHEUS` `/metrics` on `PROMETHEUS_ADDR` at
//! `PROMETHEUS_PATH`. Any other unset variable keeps Tollgate's default (no `REDIS_URL`:
//! the memory store). Set variables Tollgate does not use are reported once (`PeerReport`);
//! the few whose absence would change what is limited, or who may connect, are refused.
//!
//! `CONFIG_TYPE`, `CONFIG_GRPC_XDS_*`, `XDS_CLIENT_*`, `FORCE_START_WITHOUT_INITIAL_CONFIG`
//! and `HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED` are not peer mode's: the config source
//! (`cli::xds`) reads them whenever Tollgate runs. Peer mode only asks it which source it
//! chose, to know whether the peer's runtime directory names the policy files.
//!
//! Reads the process environment only through `PeerEnv::from_process`; the rest is pure.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use clap::parser::ValueSource;
use clap::ArgMatches;

use crate::app::StoreKind;

use super::serve::Serve;
use super::values::{parse_limit_header_names, parse_metrics_path, parse_sentinel};
use super::xds::ConfigSource;

mod goenv;
#[cfg(test)]
mod tests;
mod vars;

pub use vars::{fate, Fate, VARIABLES};

/// The peer's variables that are set (non-empty), by name.
#[derive(Debug, Clone, Default)]
pub struct PeerEnv(BTreeMap<String, String>);

impl PeerEnv {
    /// The peer's variables of this process's environment (`vars::fate` knows them).
    pub fn from_process() -> Result<PeerEnv, String> {
        let mut vars = BTreeMap::new();
        for (name, value) in std::env::vars_os() {
            let Some(name) = name.to_str().filter(|name| fate(name).is_some()) else { continue };
            let value = value.into_string().map_err(|_| format!("{name} is not UTF-8"))?;
            vars.insert(name.to_string(), value);
        }
        Ok(PeerEnv::from_pairs(vars))
    }

    /// From name and value pairs (tests); empty values count as unset.
    pub fn from_pairs<K: Into<String>, V: Into<String>>(pairs: impl IntoIterator<Item = (K, V)>) -> PeerEnv {
        let vars = pairs.into_iter().map(|(k, v)| (k.into(), v.into())).filter(|(_, v)| !v.is_empty());
        PeerEnv(vars.collect())
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(String::as_str)
    }

    fn bool(&self, name: &str) -> Result<Option<bool>, String> {
        self.get(name).map(|v| goenv::bool_of(name, v)).transpose()
    }

    fn is_true(&self, name: &str) -> Result<bool, String> {
        Ok(self.bool(name)?.unwrap_or(false))
    }

    fn port(&self, name: &str, default: u16) -> Result<u16, String> {
        self.get(name).map_or(Ok(default), |v| goenv::port_of(name, v))
    }

    fn listen(&self, host: &str, port: &str, default_port: u16) -> Result<std::net::SocketAddr, String> {
        goenv::listen_addr(host, self.get(host).unwrap_or("0.0.0.0"), self.port(port, default_port)?)
    }
}

/// Whether argv[0] names the peer's command (`ratelimit`, as `/bin/ratelimit`).
pub fn is_peer_command(argv0: Option<&OsString>) -> bool {
    argv0.and_then(|a| Path::new(a).file_name()).is_some_and(|name| name == "ratelimit")
}

/// The peer's command line as Tollgate's: no subcommand means `serve`.
pub fn as_serve(mut args: Vec<OsString>) -> Vec<OsString> {
    let subcommand = args.get(1).and_then(|a| a.to_str()).is_some_and(|a| !a.starts_with('-'));
    if !subcommand {
        args.insert(1.min(args.len()), "serve".into());
    }
    args
}

/// What peer mode did, to log once logging is set up.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PeerReport {
    /// The set variables that filled a Tollgate setting.
    pub applied: Vec<String>,
    /// The set variables Tollgate does not use, with why.
    pub ignored: Vec<(String, &'static str)>,
    /// The set variables of the config source (`cli::xds`), which reads them whenever
    /// Tollgate runs, peer mode or not.
    pub xds: Vec<String>,
    /// The set variables of tracing (`cli::tracing`), read whenever Tollgate runs.
    pub tracing: Vec<String>,
    /// `LOG_LEVEL` as a tracing filter (used when `RUST_LOG` is not set).
    pub log_filter: Option<String>,
    /// `LOG_FORMAT=json` (Some(true)) or another value (Some(false)).
    pub log_json: Option<bool>,
}

impl PeerReport {
    /// One line for what applied, one per variable not used (names only: values may be
    /// secrets).
    pub fn log(&self) {
        tracing::info!(
            applied = %self.applied.join(","),
            config_source = %self.xds.join(","),
            tracing = %self.tracing.join(","),
            "peer mode: envoyproxy/ratelimit's environment read"
        );
        for (variable, why) in &self.ignored {
            tracing::warn!(variable = %variable, why = %why, "envoyproxy/ratelimit variable not used");
        }
    }
}

/// Whether a Tollgate setting was given (flag or `TOLLGATE_*`), so the peer's must not apply.
fn given(matches: &ArgMatches, id: &str) -> bool {
    matches!(matches.value_source(id), Some(ValueSource::CommandLine | ValueSource::EnvVariable))
}

/// Applies the peer's environment to `serve`, whose flags `matches` holds.
pub fn apply(serve: &mut Serve, matches: &ArgMatches, env: &PeerEnv) -> Result<PeerReport, String> {
    let mut report = PeerReport::default();
    for (name, value) in &env.0 {
        match fate(name) {
            Some(Fate::Applied) => report.applied.push(name.clone()),
            Some(Fate::Xds) => report.xds.push(name.clone()),
            Some(Fate::Tracing) => report.tracing.push(name.clone()),
            Some(Fate::Ignored(why)) => report.ignored.push((name.clone(), why)),
            Some(Fate::IgnoredWhenTrue(why)) if goenv::bool_of(name, value)? => {
                report.ignored.push((name.clone(), why))
            }
            Some(Fate::IgnoredWhenTrue(_)) | None => {}
        }
    }
    listeners(serve, matches, env)?;
    config(serve, matches, env, &mut report)?;
    redis(serve, matches, env)?;
    tls(serve, matches, env)?;
    behaviour(serve, matches, env)?;
    report.log_filter = env.get("LOG_LEVEL").map(log_filter).transpose()?;
    report.log_json = env.get("LOG_FORMAT").map(|f| f.eq_ignore_ascii_case("json"));
    Ok(report)
}

/// The peer's listen addresses, its defaults included.
fn listeners(serve: &mut Serve, m: &ArgMatches, env: &PeerEnv) -> Result<(), String> {
    if !given(m, "grpc_addr") {
        if env.get("GRPC_UDS").is_some() {
            return Err(
                "GRPC_UDS (gRPC on a unix socket) is not supported: unset it, or give --grpc-addr".into()
            );
        }
        serve.grpc_addr = env.listen("GRPC_HOST", "GRPC_PORT", 8081)?;
    }
    if !given(m, "admin_addr") {
        serve.admin_addr = env.listen("DEBUG_HOST", "DEBUG_PORT", 6070)?;
    }
    if !given(m, "healthcheck_addr") {
        serve.healthcheck_addr = Some(env.listen("HOST", "PORT", 8080)?);
    }
    if env.is_true("USE_PROMETHEUS")? {
        if !given(m, "metrics_addr") {
            let addr = env.get("PROMETHEUS_ADDR").unwrap_or(":9090");
            serve.metrics_addr = Some(goenv::host_port_addr("PROMETHEUS_ADDR", addr)?);
        }
        if let (false, Some(path)) = (given(m, "metrics_path"), env.get("PROMETHEUS_PATH")) {
            serve.metrics_path = parse_metrics_path(path).map_err(|e| format!("PROMETHEUS_PATH: {e}"))?;
        }
    }
    Ok(())
}

/// Why `RUNTIME_*` are not used when policies come over xDS.
const NO_FILES_WITH_XDS: &str =
    "CONFIG_TYPE=GRPC_XDS_SOTW: policies come over xDS and no policy file is read (--config with xDS is refused)";

/// The peer's runtime directory as `--config`, when policies come from files. Which source
/// that is, `CONFIG_TYPE` and the `CONFIG_GRPC_XDS_*` settings are the config source's
/// (`cli::xds`, read whenever Tollgate runs), not peer mode's: from xDS, `RUNTIME_*` are
/// reported as not used and `--config` stays unset (with xDS it is refused).
fn config(serve: &mut Serve, m: &ArgMatches, env: &PeerEnv, report: &mut PeerReport) -> Result<(), String> {
    if serve.source.source(&|name| env.get(name).map(str::to_string))? == ConfigSource::Xds {
        // Every RUNTIME_* (the watch and dotfile ones too) is about files: none is read.
        let runtime = |name: &String| name.starts_with("RUNTIME_");
        report.applied.retain(|name| !runtime(name));
        report.ignored.retain(|(name, _)| !runtime(name));
        let set = env.0.keys().filter(|name| runtime(name));
        report.ignored.extend(set.map(|name| (name.clone(), NO_FILES_WITH_XDS)));
        report.ignored.sort();
        return Ok(());
    }
    let runtime = ["RUNTIME_ROOT", "RUNTIME_SUBDIRECTORY", "RUNTIME_APPDIRECTORY"];
    if !given(m, "config") && runtime.iter().any(|name| env.get(name).is_some()) {
        let mut path = PathBuf::from(env.get("RUNTIME_ROOT").unwrap_or("/srv/runtime_data/current"));
        path.extend(env.get("RUNTIME_SUBDIRECTORY"));
        path.push(env.get("RUNTIME_APPDIRECTORY").unwrap_or("config"));
        serve.config = Some(path);
    }
    Ok(())
}

/// `user:password@` or `:password@` from `REDIS_AUTH` (`password` or `user:password`).
fn userinfo(auth: Option<&str>) -> String {
    let Some(auth) = auth else { return String::new() };
    match auth.split_once(':') {
        Some((user, password)) => format!("{}:{}@", encode(user), encode(password)),
        None => format!(":{}@", encode(auth)),
    }
}

/// Percent-encodes all but RFC 3986's unreserved characters.
fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// `REDIS_*`: a set `REDIS_URL` selects the Redis store, with the peer's topology and TLS.
fn redis(serve: &mut Serve, m: &ArgMatches, env: &PeerEnv) -> Result<(), String> {
    match env.get("BACKEND_TYPE") {
        None | Some("redis") => {}
        Some(other) => {
            return Err(format!(
                "BACKEND_TYPE={other:?} is not supported: Tollgate stores buckets in memory or Redis"
            ))
        }
    }
    if env.is_true("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION")? {
        return Err("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION=true: Tollgate always verifies Redis's host name; give REDIS_TLS_CACERT (or --redis-ca-file) for a private CA".into());
    }
    let Some(url) = env.get("REDIS_URL") else { return Ok(()) };
    if !given(m, "store") {
        serve.store = StoreKind::Redis;
    }
    if !given(m, "redis_ca_file") {
        serve.redis_ca_file = env.get("REDIS_TLS_CACERT").map(PathBuf::from).or(serve.redis_ca_file.take());
    }
    // Envoy Gateway's `redis.tls.certificateRef`: presented to Redis (checked at startup).
    if !given(m, "redis_client_cert_file") && !given(m, "redis_client_key_file") {
        if let Some(cert) = env.get("REDIS_TLS_CLIENT_CERT") {
            serve.redis_client_cert_file = Some(PathBuf::from(cert));
        }
        if let Some(key) = env.get("REDIS_TLS_CLIENT_KEY") {
            serve.redis_client_key_file = Some(PathBuf::from(key));
        }
    }
    if ["redis_url", "redis_cluster_nodes", "redis_sentinel"].iter().any(|id| given(m, id)) {
        return Ok(());
    }
    let scheme = if env.is_true("REDIS_TLS")? { "rediss" } else { "redis" };
    let auth = userinfo(env.get("REDIS_AUTH"));
    // The peer's default socket type is unix; a `host:port` URL without one means TCP.
    let unix = match env.get("REDIS_SOCKET_TYPE") {
        Some("unix") => true,
        Some("tcp") => false,
        None => url.starts_with('/'),
        Some(other) => return Err(format!("REDIS_SOCKET_TYPE={other:?}: expected tcp or unix")),
    };
    match env.get("REDIS_TYPE").map(str::to_ascii_lowercase).as_deref().unwrap_or("single") {
        "single" if unix => {
            let query = env.get("REDIS_AUTH").map(|a| match a.split_once(':') {
                Some((user, password)) => format!("?user={}&pass={}", encode(user), encode(password)),
                None => format!("?pass={}", encode(a)),
            });
            serve.redis_url = format!("redis+unix://{url}{}", query.unwrap_or_default());
        }
        "single" => serve.redis_url = format!("{scheme}://{auth}{url}/"),
        "cluster" => {
            serve.redis_cluster_nodes =
                url.split(',').map(|node| format!("{scheme}://{auth}{}", node.trim())).collect();
        }
        "sentinel" => {
            let mut sentinel =
                parse_sentinel(url).map_err(|e| format!("REDIS_URL for REDIS_TYPE=sentinel: {e}"))?;
            if let Some(password) = env.get("REDIS_SENTINEL_AUTH") {
                let auth = userinfo(Some(password));
                sentinel.sentinels =
                    sentinel.sentinels.iter().map(|s| format!("redis://{auth}{s}")).collect();
            }
            serve.redis_sentinel = Some(sentinel);
            serve.redis_url = format!("{scheme}://{auth}sentinel-master/");
        }
        other => return Err(format!("REDIS_TYPE={other:?}: expected single, cluster or sentinel")),
    }
    Ok(())
}

/// `GRPC_SERVER_USE_TLS` and its files; `GRPC_CLIENT_TLS_CACERT` asks clients for a
/// certificate, as the peer does. `GRPC_SERVER_TLS_CA_CERT` is ignored, as by the peer.
fn tls(serve: &mut Serve, m: &ArgMatches, env: &PeerEnv) -> Result<(), String> {
    if !env.is_true("GRPC_SERVER_USE_TLS")? || given(m, "grpc_tls_cert") || given(m, "grpc_tls_key") {
        return Ok(());
    }
    let (Some(cert), Some(key)) = (env.get("GRPC_SERVER_TLS_CERT"), env.get("GRPC_SERVER_TLS_KEY")) else {
        return Err("GRPC_SERVER_USE_TLS=true needs GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY".into());
    };
    serve.grpc_tls_cert = Some(PathBuf::from(cert));
    serve.grpc_tls_key = Some(PathBuf::from(key));
    if !given(m, "grpc_client_ca") {
        serve.grpc_client_ca = env.get("GRPC_CLIENT_TLS_CACERT").map(PathBuf::from);
    }
    if env.get("GRPC_CLIENT_TLS_SAN").is_some() && serve.grpc_client_ca.is_some() {
        return Err("GRPC_CLIENT_TLS_SAN is not supported: Tollgate would accept any client certificate the CA signed, not only that name's".into());
    }
    Ok(())
}

/// The variables that change what a decision says or charges.
fn behaviour(serve: &mut Serve, m: &ArgMatches, env: &PeerEnv) -> Result<(), String> {
    let flags: [(&str, &str, &mut bool); 5] = [
        ("shadow_mode", "SHADOW_MODE", &mut serve.shadow_mode),
        ("limit_headers", "LIMIT_RESPONSE_HEADERS_ENABLED", &mut serve.limit_headers),
        ("response_dynamic_metadata", "RESPONSE_DYNAMIC_METADATA", &mut serve.response_dynamic_metadata),
        (
            "stop_charging_when_over_limit",
            "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT",
            &mut serve.load.stop_charging_when_over_limit,
        ),
        ("merge_domains", "MERGE_DOMAIN_CONFIG", &mut serve.load.merge_domains),
    ];
    for (id, name, flag) in flags {
        if let (false, Some(value)) = (given(m, id), env.bool(name)?) {
            *flag = value;
        }
    }
    let names = ["LIMIT_LIMIT_HEADER", "LIMIT_REMAINING_HEADER", "LIMIT_RESET_HEADER"];
    if !given(m, "limit_header_names") && names.iter().any(|n| env.get(n).is_some()) {
        let defaults = ["RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"];
        let chosen: Vec<&str> = names.iter().zip(defaults).map(|(n, d)| env.get(n).unwrap_or(d)).collect();
        serve.limit_header_names =
            parse_limit_header_names(&chosen.join(",")).map_err(|e| format!("LIMIT_*_HEADER: {e}"))?;
    }
    if let (false, Some(ratio)) = (given(m, "near_limit_ratio"), env.get("NEAR_LIMIT_RATIO")) {
        serve.near_limit_ratio =
            ratio.parse().map_err(|_| format!("NEAR_LIMIT_RATIO={ratio:?} is not a number"))?;
    }
    if let (false, Some(prefix)) = (given(m, "redis_key_prefix"), env.get("CACHE_KEY_PREFIX")) {
        serve.redis_key_prefix = prefix.to_string();
    }
    if let (false, Some(age)) = (given(m, "grpc_max_connection_age"), env.get("GRPC_MAX_CONNECTION_AGE")) {
        serve.grpc_max_connection_age = goenv::duration_of("GRPC_MAX_CONNECTION_AGE", age)?;
    }
    Ok(())
}

/// logrus's levels as a tracing filter (an unknown level is refused, as by the peer).
fn log_filter(level: &str) -> Result<String, String> {
    let filter = match level.to_ascii_lowercase().as_str() {
        "panic" | "fatal" | "error" => "error",
        "warn" | "warning" => "warn",
        "info" => "info",
        "debug" => "debug",
        "trace" => "trace",
        _ => return Err(format!("LOG_LEVEL={level:?} is not a level (trace, debug, info, warn, error)")),
    };
    Ok(filter.to_string())
}
