//! The peer's environment values as Go and envconfig read them: `strconv.ParseBool` and
//! `time.ParseDuration` (the config source's parsers), `ParseInt(v, 0, …)`, and Go's
//! `host:port` listen addresses.
//! Pure: the caller hands in the text; errors name the variable.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, ToSocketAddrs};
use std::time::Duration;

use crate::cli::xds::{parse_go_bool, parse_go_duration};

/// `strconv.ParseBool` (`cli::xds::parse_go_bool`), the error naming the variable.
pub fn bool_of(name: &str, value: &str) -> Result<bool, String> {
    parse_go_bool(value).map_err(|e| format!("{name}: {e}"))
}

/// `strconv.ParseInt(v, 0, …)`: decimal, `0x`, `0o`, `0b`, or octal after a leading `0`.
pub fn int_of(name: &str, value: &str) -> Result<i64, String> {
    let (digits, radix) = match value.get(..2) {
        Some("0x" | "0X") => (&value[2..], 16),
        Some("0o" | "0O") => (&value[2..], 8),
        Some("0b" | "0B") => (&value[2..], 2),
        _ if value.len() > 1 && value.starts_with('0') => (&value[1..], 8),
        _ => (value, 10),
    };
    let negative = digits.starts_with('-');
    let parsed =
        i64::from_str_radix(digits.trim_start_matches('-'), radix).map(|n| if negative { -n } else { n });
    parsed.map_err(|_| format!("{name}={value:?} is not an integer"))
}

/// A port number (what `PORT`, `GRPC_PORT`, `DEBUG_PORT` hold).
pub fn port_of(name: &str, value: &str) -> Result<u16, String> {
    let n = int_of(name, value)?;
    u16::try_from(n).map_err(|_| format!("{name}={value:?} is not a port (0 to 65535)"))
}

/// `time.ParseDuration` for non-negative values (`cli::xds::parse_go_duration`), the error
/// naming the variable.
pub fn duration_of(name: &str, value: &str) -> Result<Duration, String> {
    parse_go_duration(value).map_err(|e| format!("{name}: {e}"))
}

/// A listen address from a host and a port, as Go's `net.Listen` takes `host:port`: an
/// empty host is every interface; a name resolves (its first address).
pub fn listen_addr(name: &str, host: &str, port: u16) -> Result<SocketAddr, String> {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        return Ok(SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), port));
    }
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(SocketAddr::new(ip, port));
    }
    (host, port)
        .to_socket_addrs()
        .ok()
        .and_then(|mut addrs| addrs.next())
        .ok_or_else(|| format!("{name}: cannot resolve the host {host:?}"))
}

/// A Go `host:port` listen address (`PROMETHEUS_ADDR`): `:19001` is every interface.
pub fn host_port_addr(name: &str, value: &str) -> Result<SocketAddr, String> {
    let (host, port) =
        value.rsplit_once(':').ok_or_else(|| format!("{name}={value:?} is not host:port (e.g. :19001)"))?;
    listen_addr(name, host, port_of(name, port)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_parse_as_go_reads_them() {
        assert_eq!(bool_of("B", "True"), Ok(true));
        assert_eq!(bool_of("B", "0"), Ok(false));
        assert!(bool_of("B", "yes").is_err());
        assert_eq!(int_of("I", "8081"), Ok(8081));
        assert_eq!(int_of("I", "0x1F91"), Ok(8081));
        assert_eq!(int_of("I", "010"), Ok(8));
        assert!(port_of("P", "70000").is_err());
        assert_eq!(duration_of("D", "24h"), Ok(Duration::from_secs(86_400)));
        assert_eq!(duration_of("D", "1h30m"), Ok(Duration::from_secs(5_400)));
        assert_eq!(duration_of("D", "1.5s"), Ok(Duration::from_millis(1_500)));
        assert!(duration_of("D", "10").is_err(), "a bare number is not a Go duration");
        assert!(duration_of("D", "").is_err());
    }

    #[test]
    fn go_listen_addresses() {
        assert_eq!(host_port_addr("A", ":19001"), Ok(SocketAddr::from(([0, 0, 0, 0], 19001))));
        assert_eq!(host_port_addr("A", "127.0.0.1:9090"), Ok(SocketAddr::from(([127, 0, 0, 1], 9090))));
        assert_eq!(host_port_addr("A", "[::1]:9090"), "[::1]:9090".parse().map_err(|_| String::new()));
        assert!(host_port_addr("A", "9090").is_err());
        assert_eq!(listen_addr("H", "0.0.0.0", 8080), Ok(SocketAddr::from(([0, 0, 0, 0], 8080))));
    }
}
