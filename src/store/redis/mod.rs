//! The Redis stores: one connection lifecycle (`link`) under three topologies that differ
//! only in how they find their servers.
//!
//! - `single`: one server (or a proxy / cloud primary endpoint) at a fixed address;
//! - `sentinel`: the master the sentinels name, asked at every connect and watched;
//! - `cluster`: every master of a Redis Cluster, routed by slot with redirects followed
//!   here (a command redirected with `MOVED`/`ASK`/`TRYAGAIN` did not run, so re-sending it
//!   is exact; nothing else is ever re-sent).
//!
//! Below the link and the scripts, `reply` says what a reply or a client error means.
//!
//! This module holds what they share: settings, URL parsing (TLS CA, socket options,
//! RESP3 — needed for the disconnect notices the lifecycle watches) and password redaction.

pub mod cluster;
mod health;
pub mod link;
pub(crate) mod reply;
pub mod sentinel;
pub mod single;
pub mod slots;

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use redis::{ConnectionInfo, IntoConnectionInfo, ProtocolVersion};

use self::link::{Connect, LinkSettings};
use super::breaker::BreakerSettings;
use super::StoreError;

pub use self::health::Health;
pub use self::single::RedisStore;

/// Commands outstanding per connection by default (see `LinkSettings::max_inflight`).
pub const DEFAULT_MAX_INFLIGHT: usize = 4096;
/// Whether charges coalesce by default (see `store::coalesce`, `--no-coalesce`).
pub const DEFAULT_COALESCE: bool = true;
/// The shortest silence that replaces a connection, whatever the store timeout.
pub const MIN_REPLY_TIMEOUT: Duration = Duration::from_millis(100);

/// How to reach Redis.
#[derive(Clone)]
pub struct RedisSettings {
    /// `redis://[user:pass@]host:port/db` or `rediss://` for TLS.
    pub url: String,
    /// Multiplexed connections kept open (per server) and shared by all requests.
    pub connections: usize,
    /// PEM CA bundle to verify a `rediss://` server with (default: the system roots).
    pub ca_file: Option<PathBuf>,
    pub breaker: BreakerSettings,
    /// A connection with commands outstanding and no reply for this long is replaced.
    /// `None`: 3 × the store timeout, at least `MIN_REPLY_TIMEOUT`.
    pub reply_timeout: Option<Duration>,
    /// Commands outstanding per connection past which a charge fails at once.
    pub max_inflight: usize,
    /// Per-key coalescing (`store::coalesce`); false: `--no-coalesce`.
    pub coalesce: bool,
}

impl RedisSettings {
    /// Settings for `url` with the defaults of the CLI.
    pub fn new(url: impl Into<String>) -> RedisSettings {
        RedisSettings {
            url: url.into(),
            connections: 2,
            ca_file: None,
            breaker: BreakerSettings::default(),
            reply_timeout: None,
            max_inflight: DEFAULT_MAX_INFLIGHT,
            coalesce: DEFAULT_COALESCE,
        }
    }

    /// The lifecycle settings, given the store timeout requests run with.
    pub fn link(&self, store_timeout: Duration) -> LinkSettings {
        LinkSettings {
            connections: self.connections.max(1),
            reply_timeout: self.reply_timeout.unwrap_or_else(|| (store_timeout * 3).max(MIN_REPLY_TIMEOUT)),
            max_inflight: self.max_inflight.max(1),
        }
    }
}

impl fmt::Debug for RedisSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisSettings")
            .field("url", &redact_url(&self.url))
            .field("connections", &self.connections)
            .field("ca_file", &self.ca_file)
            .field("breaker", &self.breaker)
            .field("reply_timeout", &self.reply_timeout)
            .field("max_inflight", &self.max_inflight)
            .field("coalesce", &self.coalesce)
            .finish()
    }
}

/// The URL with every password form redis-rs accepts replaced by `***`, for logs, errors
/// and `/rlconfig`: the user-info of `redis://user:pass@` / `redis://:pass@` / `redis://pass@`
/// (a password may itself hold `@`), and the `pass=` query parameter of
/// `redis+unix://` / `unix://` URLs (any `pass`/`password` parameter, in any URL).
pub fn redact_url(url: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, Some(query)),
        None => (url, None),
    };
    let mut shown = match (base.find("://"), base.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let userinfo = &base[scheme + 3..at];
            let user = userinfo.split(':').next().unwrap_or("");
            let user = if userinfo.contains(':') { format!("{user}:***") } else { "***".to_string() };
            format!("{}{user}{}", &base[..scheme + 3], &base[at..])
        }
        _ => base.to_string(),
    };
    if let Some(query) = query {
        let params: Vec<String> = query
            .split('&')
            .map(|param| match param.split_once('=') {
                Some((name, _)) if is_secret_param(name) => format!("{name}=***"),
                _ => param.to_string(),
            })
            .collect();
        shown.push('?');
        shown.push_str(&params.join("&"));
    }
    shown
}

fn is_secret_param(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    name == "pass" || name == "password"
}

/// `host:port` → `redis://host:port`; a URL is kept as it is.
pub fn node_url(node: &str) -> String {
    let node = node.trim();
    if node.contains("://") {
        node.to_string()
    } else {
        format!("redis://{node}")
    }
}

/// A URL's connection info as every lifecycle connection uses it: the custom CA for
/// `rediss://` when one is given, the socket options, and RESP3.
pub fn connection_info(url: &str, ca_file: Option<&PathBuf>) -> Result<ConnectionInfo, StoreError> {
    let invalid =
        |e: &dyn fmt::Display| StoreError::Unavailable(format!("invalid redis url {}: {e}", redact_url(url)));
    let info = match ca_file {
        None => url.into_connection_info().map_err(|e| invalid(&e))?,
        Some(ca_file) => {
            let root_cert = std::fs::read(ca_file)
                .map_err(|e| invalid(&format!("reading {}: {e}", ca_file.display())))?;
            let certs = redis::TlsCertificates { client_tls: None, root_cert: Some(root_cert) };
            let client = redis::Client::build_with_tls(url, certs).map_err(|e| invalid(&e))?;
            client.get_connection_info().clone()
        }
    };
    let redis = info.redis_settings().clone().set_protocol(ProtocolVersion::RESP3);
    Ok(info.set_redis_settings(redis).set_tcp_settings(link::socket_settings()))
}

/// Connects to the server `info` names, every time.
pub fn connect_to(info: ConnectionInfo) -> Connect {
    Arc::new(move |config| {
        let info = info.clone();
        Box::pin(async move {
            let client = redis::Client::open(info).map_err(|e| StoreError::Unavailable(e.to_string()))?;
            client
                .get_multiplexed_async_connection_with_config(&config)
                .await
                .map_err(|e| StoreError::Unavailable(e.to_string()))
        })
    })
}

/// The host and port of a TCP (or TLS) connection info.
pub fn host_port(info: &ConnectionInfo) -> Option<(String, u16)> {
    match info.addr() {
        redis::ConnectionAddr::Tcp(host, port) | redis::ConnectionAddr::TcpTls { host, port, .. } => {
            Some((host.clone(), *port))
        }
        _ => None,
    }
}

/// `host:port` of a connection info (for logs; never the password).
pub fn address(info: &ConnectionInfo) -> String {
    match host_port(info) {
        Some((host, port)) => format!("{host}:{port}"),
        None => info.addr().to_string(),
    }
}

/// `info` pointed at another host and port, keeping its TLS mode, credentials and options.
pub fn with_address(info: &ConnectionInfo, host: &str, port: u16) -> ConnectionInfo {
    let addr = match info.addr() {
        redis::ConnectionAddr::TcpTls { insecure, tls_params, .. } => redis::ConnectionAddr::TcpTls {
            host: host.to_string(),
            port,
            insecure: *insecure,
            tls_params: tls_params.clone(),
        },
        _ => redis::ConnectionAddr::Tcp(host.to_string(), port),
    };
    info.clone().set_addr(addr)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_never_print() {
        assert_eq!(redact_url("redis://:s3cret@host:6379/0"), "redis://:***@host:6379/0");
        assert_eq!(redact_url("rediss://user:s3cret@host:6379"), "rediss://user:***@host:6379");
        assert_eq!(redact_url("redis://token@host"), "redis://***@host");
        assert_eq!(redact_url("redis://host:6379"), "redis://host:6379");
        assert_eq!(redact_url("redis://:p@ss@host:6379"), "redis://:***@host:6379");
        assert_eq!(
            redact_url("redis://u:p%40ss@host/2?protocol=resp3"),
            "redis://u:***@host/2?protocol=resp3"
        );
        assert_eq!(
            redact_url("redis+unix:///run/redis.sock?db=1&pass=s3cret&user=app"),
            "redis+unix:///run/redis.sock?db=1&pass=***&user=app"
        );
        assert_eq!(redact_url("unix:///tmp/r.sock?pass=s3cret"), "unix:///tmp/r.sock?pass=***");
        assert_eq!(redact_url("redis://h?Password=s3cret"), "redis://h?Password=***");
        let s = RedisSettings::new("redis://u:pw@h");
        assert!(!format!("{s:?}").contains("pw"));
    }

    #[test]
    fn reply_timeout_defaults_to_three_store_timeouts_and_at_least_100_ms() {
        let s = RedisSettings::new("redis://h");
        assert_eq!(s.link(Duration::from_millis(10)).reply_timeout, MIN_REPLY_TIMEOUT);
        assert_eq!(s.link(Duration::from_millis(100)).reply_timeout, Duration::from_millis(300));
        let set = RedisSettings { reply_timeout: Some(Duration::from_secs(2)), ..s };
        assert_eq!(set.link(Duration::from_millis(10)).reply_timeout, Duration::from_secs(2));
    }

    #[test]
    fn connection_info_keeps_credentials_and_moves_keep_tls() {
        let info = connection_info("rediss://app:pw@h:6380/3", None).expect("valid");
        assert_eq!(info.redis_settings().protocol(), ProtocolVersion::RESP3);
        assert!(info.tcp_settings().nodelay());
        let moved = with_address(&info, "10.0.0.2", 7001);
        assert_eq!(address(&moved), "10.0.0.2:7001");
        assert!(matches!(moved.addr(), redis::ConnectionAddr::TcpTls { .. }));
        assert_eq!(moved.redis_settings().password(), Some("pw"));
    }
}
