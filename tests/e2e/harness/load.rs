//! Paced HTTP load through Envoys, recorded request by request with wall-clock times, and
//! Tollgate's Prometheus metrics read from its admin port.
//!
//! One blocking thread per target sends one request at a time on a fixed schedule (a slot
//! missed because a request was slow is skipped, never made up in a burst), so the rate is
//! at most the one asked for. Times are `SystemTime`: fixed windows are aligned to the Unix
//! epoch, and a request is judged by the window it was in.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::http;

/// Who sends what, how often.
#[derive(Debug, Clone)]
pub struct Target {
    /// Index of the Envoy (for the samples).
    pub envoy: usize,
    pub addr: SocketAddr,
    /// The `x-user` header: the bucket.
    pub user: &'static str,
    pub every: Duration,
}

/// What the client saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// 200 from the route.
    Admitted,
    /// 429 with `x-quota-denied: true`: the quota filter denied it.
    Denied,
    /// Anything else (status, headers or I/O error), for the failure message.
    Other(String),
}

/// One request.
#[derive(Debug, Clone)]
pub struct Sample {
    pub envoy: usize,
    pub user: &'static str,
    /// Just before the request was written.
    pub sent: SystemTime,
    /// Just after the whole answer was read.
    pub done: SystemTime,
    pub outcome: Outcome,
}

/// Sends `GET /` with `x-user: user` to `addr` and classifies the answer.
pub fn request(envoy: usize, addr: SocketAddr, user: &'static str) -> Sample {
    let sent = SystemTime::now();
    let outcome = match http::try_get(addr, "/", &[("x-user", user)]) {
        Ok(r) if r.status == 200 => Outcome::Admitted,
        Ok(r) if r.status == 429 && r.header("x-quota-denied") == Some("true") => Outcome::Denied,
        Ok(r) => Outcome::Other(format!("{r:?}")),
        Err(e) => Outcome::Other(format!("I/O error: {e}")),
    };
    Sample { envoy, user, sent, done: SystemTime::now(), outcome }
}

/// Load running in the background until `stop`.
pub struct Load {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<Vec<Sample>>>,
}

impl Load {
    /// One thread per target, each sending its first request at once.
    pub fn start(targets: &[Target]) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let threads = targets
            .iter()
            .cloned()
            .map(|target| {
                let stop = stop.clone();
                std::thread::spawn(move || run(&target, &stop))
            })
            .collect();
        Load { stop, threads }
    }

    /// Stops every thread after its request in flight; every sample, in order of `sent`.
    pub fn stop(self) -> Samples {
        self.stop.store(true, Ordering::SeqCst);
        let mut all: Vec<Sample> =
            self.threads.into_iter().flat_map(|t| t.join().expect("load thread panicked")).collect();
        all.sort_by_key(|s| s.sent);
        Samples(all)
    }
}

fn run(target: &Target, stop: &AtomicBool) -> Vec<Sample> {
    let mut samples = Vec::new();
    let mut next = Instant::now();
    while !stop.load(Ordering::SeqCst) {
        samples.push(request(target.envoy, target.addr, target.user));
        next += target.every;
        let now = Instant::now();
        if next > now {
            // Pacing the load, not waiting for anything.
            std::thread::sleep(next - now);
        } else {
            next = now;
        }
    }
    samples
}

/// The samples of a run, with the counts the assertions need.
#[derive(Debug, Clone, Default)]
pub struct Samples(pub Vec<Sample>);

impl Samples {
    /// The samples of `user` (any user when `None`) sent in `[from, to)`.
    pub fn sent_in(&self, user: Option<&str>, from: SystemTime, to: SystemTime) -> Vec<&Sample> {
        self.0.iter().filter(|s| user.is_none_or(|u| s.user == u) && s.sent >= from && s.sent < to).collect()
    }

    /// Admitted requests of `user` whose `[sent, done]` touches `[from, to)`: a request in
    /// flight across an edge counts on both sides (an upper bound never misses one).
    pub fn admitted_touching(&self, user: &str, from: SystemTime, to: SystemTime) -> usize {
        let admitted = self.0.iter().filter(|s| s.user == user && s.outcome == Outcome::Admitted);
        admitted.filter(|s| s.done >= from && s.sent < to).count()
    }

    /// Every sample whose outcome is neither admitted nor denied by the quota filter.
    pub fn others(&self) -> Vec<&Sample> {
        self.0.iter().filter(|s| matches!(s.outcome, Outcome::Other(_))).collect()
    }
}

/// Counts of `outcome` among `samples`.
pub fn count(samples: &[&Sample], outcome: &Outcome) -> usize {
    samples.iter().filter(|s| s.outcome == *outcome).count()
}

/// Seconds since the Unix epoch, as a float (for windows and messages).
pub fn epoch_secs(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH).expect("after 1970").as_secs_f64()
}

/// The start of the epoch-aligned window of length `window` that holds `t`.
pub fn window_start(t: SystemTime, window: Duration) -> SystemTime {
    let since = t.duration_since(UNIX_EPOCH).expect("after 1970").as_micros();
    let w = window.as_micros();
    UNIX_EPOCH + Duration::from_micros(u64::try_from(since - since % w).expect("µs fit u64"))
}

/// Sleeps until `t` (wall clock): the end of a measured span, not a synchronisation.
pub fn sleep_until(t: SystemTime) {
    if let Ok(left) = t.duration_since(SystemTime::now()) {
        std::thread::sleep(left);
    }
}

/// The sum of every series of metric `name` on Tollgate's admin `/metrics` that carries
/// all of `labels` (0 when there is none).
pub fn metric(admin: SocketAddr, name: &str, labels: &[(&str, &str)]) -> f64 {
    let body = http::get(admin, "/metrics", &[]).body;
    body.lines().filter(|l| !l.starts_with('#')).filter_map(|line| series(line, name, labels)).sum()
}

/// The value of one exposition line if it is a series of `name` with all of `labels`.
fn series(line: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let (head, value) = line.rsplit_once(' ')?;
    let (series_name, rest) = match head.split_once('{') {
        Some((n, rest)) => (n, rest.trim_end_matches('}')),
        None => (head, ""),
    };
    if series_name != name {
        return None;
    }
    // Our label values never hold `",`; splitting on it is enough here.
    let pairs: Vec<(&str, &str)> = rest
        .split("\",")
        .filter_map(|p| p.split_once("=\""))
        .map(|(k, v)| (k.trim(), v.trim_end_matches('"')))
        .collect();
    labels.iter().all(|l| pairs.contains(l)).then(|| value.trim().parse().ok()).flatten()
}
