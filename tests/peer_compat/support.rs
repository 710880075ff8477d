//! A Tollgate on the memory store serving one policy location, and a compact view of its
//! answers to compare with what envoyproxy/ratelimit answers.

use std::path::{Path, PathBuf};
use std::time::Duration;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{Code, DescriptorStatus};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use tollgate::app::{Running, ServeSettings};
use tonic::transport::Channel;

/// The request builders and metric reader every integration suite shares.
pub use crate::api_support::{metric, request};

/// The fixtures written for these tests (`tests/fixtures/<name>`).
pub fn fixtures(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name)
}

/// A running Tollgate (memory store, ports 0) and a client.
pub struct App {
    running: Running,
    client: RateLimitServiceClient<Channel>,
    /// Keeps policies written by `serve_yaml` alive.
    _dir: Option<tempfile::TempDir>,
}

/// Serves the policy file or directory at `config`.
pub async fn serve(config: &Path) -> App {
    start(config.to_path_buf(), None).await
}

/// Serves the given policy files (name, YAML).
pub async fn serve_yaml(files: &[(&str, &str)]) -> App {
    let dir = tempfile::tempdir().expect("tempdir");
    for (name, yaml) in files {
        std::fs::write(dir.path().join(name), yaml).expect("write policy");
    }
    start(dir.path().to_path_buf(), Some(dir)).await
}

async fn start(config: PathBuf, dir: Option<tempfile::TempDir>) -> App {
    let mut settings = ServeSettings::new(config);
    settings.grpc_addr = "127.0.0.1:0".parse().expect("addr");
    settings.admin_addr = "127.0.0.1:0".parse().expect("addr");
    // Generous: exact counts must never meet a fail-open answer on a loaded host.
    settings.store_timeout = Duration::from_secs(2);
    settings.drain = Duration::ZERO;
    settings.watch_config = false;
    let running = tollgate::app::spawn(settings).await.expect("app starts");
    let client = RateLimitServiceClient::connect(format!("http://{}", running.grpc_addr))
        .await
        .expect("connect to app");
    App { running, client, _dir: dir }
}

impl App {
    /// Calls ShouldRateLimit; panics on a gRPC error.
    pub async fn check(&self, request: RateLimitRequest) -> RateLimitResponse {
        self.call(request).await.expect("grpc call")
    }

    /// Calls ShouldRateLimit and returns the gRPC result.
    pub async fn call(&self, request: RateLimitRequest) -> Result<RateLimitResponse, tonic::Status> {
        self.client.clone().should_rate_limit(request).await.map(|r| r.into_inner())
    }

    /// The answer to a request with the one descriptor `entries`.
    pub async fn one(&self, domain: &str, entries: &[(&str, &str)]) -> Answer {
        let response = self.check(request(domain, &[entries])).await;
        assert_eq!(response.statuses.len(), 1);
        let answer = Answer::of(&response.statuses[0]);
        let overall_ok = response.overall_code == Code::Ok as i32;
        assert_eq!(overall_ok, answer.is_ok(), "{domain} {entries:?}: overall code vs {answer:?}");
        answer
    }

    /// The answers to `n` requests with the one descriptor `entries`, in order.
    pub async fn repeat(&self, n: usize, domain: &str, entries: &[(&str, &str)]) -> Vec<Answer> {
        let mut answers = Vec::with_capacity(n);
        for _ in 0..n {
            answers.push(self.one(domain, entries).await);
        }
        answers
    }

    /// The answers to one request per element of `each`, one descriptor each, in order.
    pub async fn each(&self, domain: &str, each: &[&[(&str, &str)]]) -> Vec<Answer> {
        let mut answers = Vec::with_capacity(each.len());
        for entries in each {
            answers.push(self.one(domain, entries).await);
        }
        answers
    }

    /// The `/metrics` text.
    pub fn metrics(&self) -> String {
        self.running.metrics.encode()
    }
}

/// One descriptor status, as far as a client of either service can tell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// OK and no `current_limit`: no rule, or a node without a limit.
    NoLimit,
    /// OK, no `current_limit`, remaining 4294967295: `unlimited: true`.
    Unlimited,
    /// A limit applied.
    Limited { ok: bool, requests_per_unit: u32, unit: Unit, name: String, remaining: u32 },
}

impl Answer {
    fn of(status: &DescriptorStatus) -> Answer {
        let ok = status.code == Code::Ok as i32;
        match &status.current_limit {
            None if ok && status.limit_remaining == u32::MAX => Answer::Unlimited,
            None if ok => Answer::NoLimit,
            None => panic!("denied without a limit: {status:?}"),
            Some(limit) => Answer::Limited {
                ok,
                requests_per_unit: limit.requests_per_unit,
                unit: Unit::try_from(limit.unit).expect("a known unit"),
                name: limit.name.clone(),
                remaining: status.limit_remaining,
            },
        }
    }

    pub fn is_ok(&self) -> bool {
        !matches!(self, Answer::Limited { ok: false, .. })
    }
}

/// An allowed answer of an unnamed limit.
pub fn ok(requests_per_unit: u32, unit: Unit, remaining: u32) -> Answer {
    Answer::Limited { ok: true, requests_per_unit, unit, name: String::new(), remaining }
}

/// A denied answer of an unnamed limit.
pub fn over(requests_per_unit: u32, unit: Unit) -> Answer {
    Answer::Limited { ok: false, requests_per_unit, unit, name: String::new(), remaining: 0 }
}

/// `answer` with the limit's `name`.
pub fn named(answer: Answer, name: &str) -> Answer {
    match answer {
        Answer::Limited { ok, requests_per_unit, unit, remaining, .. } => {
            Answer::Limited { ok, requests_per_unit, unit, name: name.to_string(), remaining }
        }
        other => other,
    }
}

/// `n` allowed answers counting down from `limit - 1`, then `denied` denied ones.
pub fn countdown(limit: u32, unit: Unit, denied: usize) -> Vec<Answer> {
    let mut answers: Vec<Answer> = (0..limit).rev().map(|left| ok(limit, unit, left)).collect();
    answers.extend(std::iter::repeat_n(over(limit, unit), denied));
    answers
}
