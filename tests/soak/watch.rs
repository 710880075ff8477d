//! The soak's probes: once a second per instance, what an operator's checks would see —
//! `/healthz` and a `ShouldRateLimit` each within 1 s (invariant 4), the breaker and the
//! store's failures from `/metrics` (2), and the process's RSS, open descriptors and metric
//! series (6).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::fleet::Liveness;
use crate::load::{call, client, now_us, request, Outcome};

/// One probe of one instance.
#[derive(Clone, Debug, Default)]
pub struct Sample {
    pub instance: usize,
    pub at: u64,
    pub pid: u32,
    /// The instance was up (meant to serve) with the same process before and after.
    pub counted: bool,
    pub healthz_ms: Option<u64>,
    pub rls_ms: Option<u64>,
    /// From `/metrics`, when it answered.
    pub metrics: Option<Scrape>,
    /// When the `/metrics` request was sent and its answer read: the counters it shows
    /// hold everything decided before the first, nothing decided after the second.
    pub scraped: (u64, u64),
    pub rss_kb: u64,
    pub fds: u64,
}

/// What `/metrics` said.
#[derive(Clone, Debug, Default)]
pub struct Scrape {
    pub breaker_open: bool,
    pub opens: f64,
    /// Store calls that timed out, failed, were refused by the breaker or overloaded.
    pub failures: f64,
    /// Store calls of every outcome (`tollgate_store_requests_total`).
    pub calls: f64,
    pub timeouts: f64,
    /// Every outcome but `ok` of `tollgate_store_requests_total`, by outcome.
    pub by_outcome: std::collections::BTreeMap<String, f64>,
    pub series: u64,
    /// Descriptors answered by the failure policy (`tollgate_decisions_total`,
    /// `result="failure_*"`), every domain.
    pub failure_decisions: f64,
    /// Approximate first reads that missed their deadline
    /// (`tollgate_approximate_first_reads_total`, `result` other than `ok`).
    pub first_read_misses: f64,
}

/// Probes `instance` every second until `stop`.
pub async fn run_probe(
    instance: usize,
    grpc: SocketAddr,
    admin: SocketAddr,
    live: Arc<Liveness>,
    stop: Arc<AtomicBool>,
) -> Vec<Sample> {
    let mut rls = client(grpc);
    let mut out = Vec::new();
    let mut ticker = tokio::time::interval(Duration::from_secs(1));
    while !stop.load(Ordering::Relaxed) {
        ticker.tick().await;
        let pid = live.pid.load(Ordering::SeqCst);
        let up = live.up.load(Ordering::SeqCst);
        let at = now_us();
        let started = Instant::now();
        let healthz = http_get(admin, "/healthz").await.filter(|(status, _)| *status == 200);
        let healthz_ms = healthz.map(|_| started.elapsed().as_millis() as u64);
        let started = Instant::now();
        let (outcome, _) =
            call(&mut rls, request("soak_probe", &[("k".into(), "v".into())]), Duration::from_secs(1)).await;
        let rls_ms =
            matches!(outcome, Outcome::Answered { .. }).then(|| started.elapsed().as_millis() as u64);
        let scrape_sent = now_us();
        let metrics = http_get(admin, "/metrics").await.map(|(_, body)| scrape(&body));
        let scraped = (scrape_sent, now_us());
        let (rss_kb, fds) = process(pid);
        let counted =
            up && pid != 0 && live.up.load(Ordering::SeqCst) && live.pid.load(Ordering::SeqCst) == pid;
        out.push(Sample { instance, at, pid, counted, healthz_ms, rls_ms, metrics, scraped, rss_kb, fds });
    }
    out
}

/// `GET path` within 1 s: status and body.
pub async fn http_get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
        let head = format!("GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n");
        stream.write_all(head.as_bytes()).await.ok()?;
        let mut text = String::new();
        stream.read_to_string(&mut text).await.ok()?;
        let status = text.split_whitespace().nth(1)?.parse().ok()?;
        Some((status, text.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default()))
    };
    tokio::time::timeout(Duration::from_secs(1), exchange).await.ok().flatten()
}

fn scrape(text: &str) -> Scrape {
    // What the verdict reads must be exported, or a renamed metric reads as "no failures":
    // the store's call counters (every outcome from startup) and, on the stores that have
    // a breaker (not Cluster), the breaker's series.
    let store = text.lines().find(|l| l.starts_with("tollgate_store_requests_total{"));
    let store = store.unwrap_or_else(|| panic!("/metrics lacks tollgate_store_requests_total:\n{text}"));
    if !store.contains("store=\"redis_cluster\"") {
        for needed in ["tollgate_breaker_state{", "tollgate_breaker_opens_total{"] {
            assert!(text.lines().any(|l| l.starts_with(needed)), "/metrics lacks {needed:?}:\n{text}");
        }
    }
    let mut s = Scrape::default();
    for line in text.lines().filter(|l| !l.starts_with('#') && !l.is_empty()) {
        s.series += 1;
        let value: f64 = line
            .rsplit(' ')
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("/metrics line without a value: {line:?}"));
        if line.starts_with("tollgate_breaker_state{") {
            s.breaker_open |= value >= 1.0;
        } else if line.starts_with("tollgate_breaker_opens_total") {
            s.opens += value;
        } else if line.starts_with("tollgate_store_requests_total{") && line.contains("outcome=\"ok\"") {
            s.calls += value;
        } else if line.starts_with("tollgate_store_requests_total{") {
            s.calls += value;
            s.failures += value;
            if line.contains("outcome=\"timeout\"") {
                s.timeouts += value;
            }
            let outcome = line.split("outcome=\"").nth(1).and_then(|r| r.split('"').next()).unwrap_or("?");
            *s.by_outcome.entry(outcome.to_string()).or_default() += value;
        } else if line.starts_with("tollgate_decisions_total{") && line.contains("result=\"failure_") {
            s.failure_decisions += value;
        } else if line.starts_with("tollgate_approximate_first_reads_total{")
            && !line.contains("result=\"ok\"")
        {
            s.first_read_misses += value;
        }
    }
    s
}

/// `(VmRSS in kB, open descriptors)` of `pid`, zeros when it is gone.
fn process(pid: u32) -> (u64, u64) {
    if pid == 0 {
        return (0, 0);
    }
    let rss = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                l.strip_prefix("VmRSS:").map(|v| v.trim().trim_end_matches(" kB").trim().parse().unwrap_or(0))
            })
        })
        .unwrap_or(0);
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).map(|d| d.count() as u64).unwrap_or(0);
    (rss, fds)
}
