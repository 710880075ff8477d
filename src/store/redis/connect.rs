//! Reaching a Redis server: URL parsing (TLS CA, socket options, RESP3 — needed for the
//! disconnect notices the link watches), the connect function a link calls, addresses,
//! and password redaction for logs, errors and `/rlconfig`. What every topology shares.

use std::fmt;
use std::sync::Arc;

use redis::{ConnectionInfo, IntoConnectionInfo, ProtocolVersion};

use super::super::charge::StoreError;
use super::link::{self, Connect};
use super::tls::Tls;

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

/// A URL's connection info as every lifecycle connection uses it: for `rediss://`, the
/// custom CA and the client certificate when given (`tls`; a plain URL ignores them: a
/// sentinel without TLS beside a TLS master), the socket options, and RESP3.
pub fn connection_info(url: &str, tls: &Tls) -> Result<ConnectionInfo, StoreError> {
    let invalid =
        |e: &dyn fmt::Display| StoreError::Unavailable(format!("invalid redis url {}: {e}", redact_url(url)));
    let plain = url.into_connection_info().map_err(|e| invalid(&e))?;
    let info = if tls.is_set() && is_tls(&plain) {
        let certs = tls.certificates().map_err(|e| invalid(&e))?;
        let client = redis::Client::build_with_tls(url, certs).map_err(|e| invalid(&e))?;
        client.get_connection_info().clone()
    } else {
        plain
    };
    let redis = info.redis_settings().clone().set_protocol(ProtocolVersion::RESP3);
    Ok(info.set_redis_settings(redis).set_tcp_settings(link::socket_settings()))
}

fn is_tls(info: &ConnectionInfo) -> bool {
    matches!(info.addr(), redis::ConnectionAddr::TcpTls { .. })
}

/// A client for `info` whose TLS files (`tls`) are read again now, so that a certificate
/// rotated on disk is presented by this new connection. A read that fails keeps what was
/// read before (a secret swapped file by file), and says so.
pub fn client(info: &ConnectionInfo, tls: &Tls) -> Result<redis::Client, StoreError> {
    if tls.is_set() && is_tls(info) {
        match tls.certificates() {
            Ok(certs) => {
                return redis::Client::build_with_tls(info.clone(), certs)
                    .map_err(|e| StoreError::Unavailable(e.to_string()))
            }
            Err(error) => tracing::warn!(
                error = %error,
                "reading the Redis TLS files again failed: this connection uses what was read before"
            ),
        }
    }
    redis::Client::open(info.clone()).map_err(|e| StoreError::Unavailable(e.to_string()))
}

/// Connects to the server `info` names, every time (its TLS files read again each time).
pub fn connect_to(info: ConnectionInfo, tls: Tls) -> Connect {
    Arc::new(move |config| {
        let (info, tls) = (info.clone(), tls.clone());
        Box::pin(async move {
            let client = client(&info, &tls)?;
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
    }

    #[test]
    fn connection_info_keeps_credentials_and_moves_keep_tls() {
        let info = connection_info("rediss://app:pw@h:6380/3", &Tls::default()).expect("valid");
        assert_eq!(info.redis_settings().protocol(), ProtocolVersion::RESP3);
        assert!(info.tcp_settings().nodelay());
        let moved = with_address(&info, "10.0.0.2", 7001);
        assert_eq!(address(&moved), "10.0.0.2:7001");
        assert!(matches!(moved.addr(), redis::ConnectionAddr::TcpTls { .. }));
        assert_eq!(moved.redis_settings().password(), Some("pw"));
    }
}
