//! What a Redis store is built from: the URL, the connections and their limits, and the
//! settings of the breaker in front of it (`store::breaker`), with the defaults the CLI
//! starts from. The password never prints (`Debug` redacts the URL).

use std::fmt;
use std::time::Duration;

use super::connect::redact_url;
use super::link::LinkSettings;
use super::plain::Windows;
use super::tls::Tls;

/// Commands outstanding per connection by default (see `LinkSettings::max_inflight`).
pub const DEFAULT_MAX_INFLIGHT: usize = 4096;
/// Whether charges coalesce by default (see `store::coalesce`, `--no-coalesce`).
pub const DEFAULT_COALESCE: bool = true;
/// Whether requests queued for a server are batched by default (see `redis::batch`,
/// `--no-batch`).
pub const DEFAULT_BATCH: bool = true;
/// The shortest silence that replaces a connection, whatever the store timeout.
pub const MIN_REPLY_TIMEOUT: Duration = Duration::from_millis(100);

/// How to reach Redis.
#[derive(Clone)]
pub struct RedisSettings {
    /// `redis://[user:pass@]host:port/db` or `rediss://` for TLS.
    pub url: String,
    /// Multiplexed connections kept open (per server) and shared by all requests.
    pub connections: usize,
    /// The CA that verifies a `rediss://` server and the client certificate presented to it.
    pub tls: Tls,
    pub breaker: BreakerSettings,
    /// A connection with commands outstanding and no reply for this long is replaced.
    /// `None`: 3 × the store timeout, at least `MIN_REPLY_TIMEOUT`.
    pub reply_timeout: Option<Duration>,
    /// Commands outstanding per connection past which a charge fails at once.
    pub max_inflight: usize,
    /// Per-key coalescing (`store::coalesce`); false: `--no-coalesce`.
    pub coalesce: bool,
    /// Batching across requests (`redis::batch`); false: `--no-batch`.
    pub batch: bool,
    /// Which path decides fixed- and sliding-window consumes (`--redis-windows`).
    pub windows: Windows,
}

impl RedisSettings {
    /// Settings for `url` with the defaults of the CLI.
    pub fn new(url: impl Into<String>) -> RedisSettings {
        RedisSettings {
            url: url.into(),
            connections: 2,
            tls: Tls::default(),
            breaker: BreakerSettings::default(),
            reply_timeout: None,
            max_inflight: DEFAULT_MAX_INFLIGHT,
            coalesce: DEFAULT_COALESCE,
            batch: DEFAULT_BATCH,
            windows: Windows::Lua,
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
            .field("tls", &self.tls)
            .field("breaker", &self.breaker)
            .field("reply_timeout", &self.reply_timeout)
            .field("max_inflight", &self.max_inflight)
            .field("coalesce", &self.coalesce)
            .field("batch", &self.batch)
            .field("windows", &self.windows)
            .finish()
    }
}

/// The breaker's settings. Build with `..Default::default()` for the fields you leave alone.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BreakerSettings {
    /// Fewest failed calls within `window` that can open the breaker (0 disables it).
    pub failures: u32,
    /// Share of the calls finished within `window` that must have failed (0 to 1).
    pub failure_rate: f64,
    /// How far back calls count.
    pub window: Duration,
    /// First cool-down; doubles after each failed probe.
    pub cooldown: Duration,
}

impl Default for BreakerSettings {
    /// 5 failures, half of the calls, in 1 s; cool-down 1 s.
    ///
    /// The window is 1 s: long against a stall (a fork or a busy core lasts tens of ms, so
    /// at any traffic it is a few percent of the window's calls, far from half), short
    /// enough that a real outage opens the breaker within about a second, and a whole
    /// number of the 10 ms store deadline so a frozen Redis fills it with failures.
    fn default() -> Self {
        BreakerSettings {
            failures: 5,
            failure_rate: 0.5,
            window: Duration::from_millis(1000),
            cooldown: Duration::from_millis(1000),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_never_print() {
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
}
