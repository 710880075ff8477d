//! What the approximate-mode tests share, on a single Redis (`tests/approximate.rs`,
//! `tests/approximate_scale.rs`) and on a cluster (`tests/cluster/approximate.rs`): the admin
//! port's answers and the metrics in them, Redis's command counts, docs/scaling.md's bound, and
//! the minute window a test must stay in.

use std::net::SocketAddr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A request of the `approx` domain with one descriptor, `user = <user>`.
pub fn request(user: &str) -> RateLimitRequest {
    RateLimitRequest {
        domain: "approx".into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry { key: "user".into(), value: user.into() }],
            ..Default::default()
        }],
        hits_addend: 0,
    }
}

/// A Lua script summing the current count (`c`) of every bucket of the `user` descriptor
/// on one node (`EVAL <script> 0`).
pub const SUM_OF_COUNTS: &str = "local n = 0 for _, k in ipairs(redis.call('KEYS', '*user*')) do \
                                 n = n + tonumber(redis.call('HGET', k, 'c') or 0) end return n";

/// `POST /v1/reset?<query>` on an admin port: the status code (0 when none was read).
pub async fn reset(admin: SocketAddr, query: &str) -> u16 {
    let mut stream = tokio::net::TcpStream::connect(admin).await.expect("admin");
    let head = format!(
        "POST /v1/reset?{query} HTTP/1.1\r\nhost: x\r\nconnection: close\r\ncontent-length: 0\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await.expect("write");
    let mut out = String::new();
    stream.read_to_string(&mut out).await.expect("read");
    out.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0)
}

/// `GET path` on an admin port: the body.
pub async fn admin_get(admin: SocketAddr, path: &str) -> String {
    let mut stream = tokio::net::TcpStream::connect(admin).await.expect("admin");
    let head = format!("GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n");
    stream.write_all(head.as_bytes()).await.expect("write");
    let mut out = String::new();
    stream.read_to_string(&mut out).await.expect("read");
    out.split_once("\r\n\r\n").map(|(_, body)| body.to_string()).unwrap_or_default()
}

/// The value of a metric series (its name and labels as exported, then a space: `name ` or
/// `name{labels} `). Panics, naming it and showing the scrape, when it is absent: a
/// renamed or unexported metric fails the test instead of reading as 0.
pub async fn metric(admin: SocketAddr, series: &str) -> f64 {
    let text = admin_get(admin, "/metrics").await;
    match text.lines().find_map(|line| line.strip_prefix(series).and_then(|rest| rest.trim().parse().ok())) {
        Some(value) => value,
        None => panic!("metric series {series:?} is not exported:\n{text}"),
    }
}

/// Decisions answered by the failure policy.
pub async fn failure_decisions(admin: SocketAddr) -> f64 {
    failure_decisions_in(&admin_get(admin, "/metrics").await)
}

/// Decisions answered by the failure policy, in a `/metrics` text already scraped: the sum
/// of the `failure_*` series of `tollgate_decisions_total`, which the server exports at 0
/// for every rule from startup. Panics when there are none (a renamed metric or result).
pub fn failure_decisions_in(metrics: &str) -> f64 {
    let values: Vec<f64> = metrics
        .lines()
        .filter(|l| l.starts_with("tollgate_decisions_total{") && l.contains("result=\"failure_"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .collect();
    assert!(!values.is_empty(), "no failure_* series of tollgate_decisions_total:\n{metrics}");
    values.iter().sum()
}

/// The value of one series (its name and labels as exported) in a `/metrics` text already
/// scraped: [`metric`] without a scrape per series. Panics when it is absent.
pub fn series_in(metrics: &str, series: &str) -> f64 {
    match metrics.lines().find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.trim().parse().ok()) {
        Some(value) => value,
        None => panic!("metric series {series:?} is not exported:\n{metrics}"),
    }
}

/// The sum of every series of the metric `name` (any labels) in a `/metrics` text; `None`
/// if the metric is not exported (a gauge not added yet reads as absent, not as 0).
pub fn metric_sum_in(metrics: &str, name: &str) -> Option<f64> {
    let values: Vec<f64> = metrics
        .lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| {
            let rest = line.strip_prefix(name)?;
            // The name itself, not a longer one it begins (`…_buckets` vs `…_buckets_total`).
            let value = match rest.as_bytes().first()? {
                b'{' => rest.rsplit_once("} ")?.1,
                b' ' => rest,
                _ => return None,
            };
            value.trim().parse().ok()
        })
        .collect();
    (!values.is_empty()).then(|| values.iter().sum())
}

/// Commands Redis has run: the sum of `calls=` over `INFO commandstats` (its text).
pub fn commands_run(commandstats: &str) -> u64 {
    commandstats
        .lines()
        .filter(|l| l.starts_with("cmdstat_"))
        .filter_map(|l| l.split_once("calls=")?.1.split(',').next()?.parse::<u64>().ok())
        .sum()
}

/// The stated bound over the limit (docs/scaling.md, "Approximate mode"): with N instances,
/// `(N − 1) × ⌈L / 2N⌉ + 2N` — the half shares the others may have spent unseen, and the
/// rounding of each share.
pub fn bound(instances: u64, limit: u64) -> u64 {
    (instances - 1) * limit.div_ceil(2 * instances) + 2 * instances
}

/// Sleeps into a minute with at least `needed` left: the run then sees one sliding
/// window, with no previous one weighing in (the bound is stated per window, and the
/// counts read back from Redis are the current window's).
pub async fn within_one_window(needed: Duration) {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).expect("clock");
    let into = Duration::from_micros((now.as_micros() % 60_000_000) as u64);
    if Duration::from_secs(60) - into < needed {
        tokio::time::sleep(Duration::from_secs(60) - into + Duration::from_millis(50)).await;
    }
}
