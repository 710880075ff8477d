//! The soak's clients: paced gRPC callers bound to one instance each (as an Envoy is to its
//! connection), drawing domains, keys and descriptor counts from the seed, cancelling some
//! requests at random points, and logging every call with its send and answer times. The
//! log is the clients' own account that the verdicts are checked against.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tonic::transport::{Channel, Endpoint};

/// Clients per instance and the pause between one client's requests.
pub const CLIENTS_PER_INSTANCE: usize = 3;
pub const PACE: Duration = Duration::from_millis(8);
/// Keys a key distribution draws from.
pub const KEYS: usize = 64;
/// A counted key (`soak_count`) lives this long: keys of one epoch are compared with
/// Redis only when no data-losing fault touched the epoch.
pub const COUNT_EPOCH_US: u64 = 3_000_000;

/// µs since the Unix epoch: the clock Redis and the instances use for windows.
pub fn now_us() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).expect("clock").as_micros() as u64
}

/// How a call ended.
#[derive(Clone, Debug)]
pub enum Outcome {
    /// An answer: the overall code (OK or not) and each descriptor's.
    Answered { overall: bool, ok: Vec<bool> },
    /// A gRPC error (an instance down, a refused connection).
    Error,
    /// Dropped by the client before the answer (its timeout).
    Cancelled,
}

/// One call as the client saw it.
#[derive(Clone, Debug)]
pub struct Call {
    pub instance: usize,
    pub domain: &'static str,
    /// One `(key, value)` per descriptor.
    pub descriptors: Vec<(String, String)>,
    pub sent: u64,
    pub recv: u64,
    pub outcome: Outcome,
}

impl Call {
    /// Whether the charge may have been made without the client seeing an OK for it.
    pub fn unseen(&self) -> bool {
        !matches!(&self.outcome, Outcome::Answered { overall: true, .. })
    }
}

/// A lazily connecting client of `addr` (reconnects after a restart).
pub fn client(addr: SocketAddr) -> RateLimitServiceClient<Channel> {
    let endpoint = Endpoint::from_shared(format!("http://{addr}")).expect("endpoint");
    RateLimitServiceClient::new(endpoint.connect_timeout(Duration::from_millis(500)).connect_lazy())
}

/// A request of `domain` with one entry per descriptor.
pub fn request(domain: &str, descriptors: &[(String, String)]) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.into(),
        descriptors: descriptors
            .iter()
            .map(|(k, v)| RateLimitDescriptor {
                entries: vec![Entry { key: k.clone(), value: v.clone() }],
                ..Default::default()
            })
            .collect(),
        hits_addend: 0,
    }
}

/// Sends `request` with an optional client-side cutoff; the outcome and the answer time.
pub async fn call(
    client: &mut RateLimitServiceClient<Channel>,
    request: RateLimitRequest,
    cutoff: Duration,
) -> (Outcome, u64) {
    let answer = tokio::time::timeout(cutoff, client.should_rate_limit(request)).await;
    let outcome = match answer {
        Err(_) => Outcome::Cancelled,
        Ok(Err(_)) => Outcome::Error,
        Ok(Ok(response)) => {
            let response = response.into_inner();
            Outcome::Answered {
                overall: response.overall_code == Code::Ok as i32,
                ok: response.statuses.iter().map(|s| s.code == Code::Ok as i32).collect(),
            }
        }
    };
    (outcome, now_us())
}

/// Zipf(1.1) over `n` ranks, by inverse CDF.
struct Zipf(Vec<f64>);

impl Zipf {
    fn new(n: usize) -> Zipf {
        let mut total = 0.0;
        let cdf = (1..=n)
            .map(|r| {
                total += 1.0 / (r as f64).powf(1.1);
                total
            })
            .collect::<Vec<_>>();
        Zipf(cdf.into_iter().map(|c| c / total).collect())
    }

    fn draw(&self, rng: &mut StdRng) -> usize {
        let u: f64 = rng.random();
        self.0.partition_point(|&c| c < u).min(self.0.len() - 1)
    }
}

/// One client: until `stop`, a request every [`PACE`] to `addr`; returns its log.
pub async fn run_client(
    seed: u64,
    instance: usize,
    addr: SocketAddr,
    start_us: u64,
    stop: Arc<AtomicBool>,
) -> Vec<Call> {
    let mut rng = StdRng::seed_from_u64(seed);
    let zipf = Zipf::new(KEYS);
    let mut client = client(addr);
    let mut log = Vec::new();
    let mut fresh = 0u64;
    let mut ticker = tokio::time::interval(PACE);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    while !stop.load(Ordering::Relaxed) {
        ticker.tick().await;
        let weights: [(&'static str, u32); 9] = [
            ("soak_gcra", 15),
            ("soak_sliding", 12),
            ("soak_fixed", 18),
            ("soak_multi", 10),
            ("soak_aon", 10),
            ("soak_lease", 10),
            ("soak_approx", 10),
            ("soak_switch", 5),
            ("soak_count", 10),
        ];
        let mut pick = rng.random_range(0..weights.iter().map(|w| w.1).sum::<u32>());
        let domain = weights
            .iter()
            .find(|w| {
                if pick < w.1 {
                    true
                } else {
                    pick -= w.1;
                    false
                }
            })
            .expect("a domain")
            .0;
        // A key flood: one second in ten (a different one per client), every value fresh.
        let flooding = ((now_us() - start_us) / 1_000_000).wrapping_add(seed).is_multiple_of(10);
        let mut value = |rng: &mut StdRng| -> String {
            match if flooding { 0 } else { rng.random_range(0..100) } {
                0..2 => {
                    fresh += 1;
                    format!("flood-{instance}-{seed}-{fresh}")
                }
                2..62 => format!("z{}", zipf.draw(rng)),
                _ => format!("u{}", rng.random_range(0..KEYS)),
            }
        };
        let count = match rng.random_range(0..100) {
            0..60 => 1,
            60..90 => rng.random_range(2..=4),
            _ => rng.random_range(5..=16),
        };
        let descriptors: Vec<(String, String)> = match domain {
            "soak_count" => {
                let epoch = (now_us() - start_us) / COUNT_EPOCH_US;
                vec![("k".into(), format!("cnt-e{epoch}-{}", rng.random_range(0..16)))]
            }
            "soak_aon" => (0..count.clamp(2, 4))
                .map(|i| (if i % 2 == 0 { "a" } else { "b" }.to_string(), value(&mut rng)))
                .collect(),
            _ => (0..count).map(|_| ("k".to_string(), value(&mut rng))).collect(),
        };
        let cutoff = if rng.random_range(0..100) < 4 {
            Duration::from_micros(rng.random_range(0..12_000))
        } else {
            Duration::from_secs(2)
        };
        let sent = now_us();
        let (outcome, recv) = call(&mut client, request(domain, &descriptors), cutoff).await;
        log.push(Call { instance, domain, descriptors, sent, recv, outcome });
    }
    log
}

/// A canary answer: sent, answered, and whether the store decided (OK; the canary's
/// domain never denies, so a denial is the failure policy's and an error is no answer).
#[derive(Clone, Copy, Debug)]
pub struct Canary {
    pub instance: usize,
    pub sent: u64,
    pub recv: u64,
    pub decided: bool,
}

/// Every 100 ms a fresh key of `soak_canary` on `addr`, while the instance is up.
pub async fn run_canary(
    instance: usize,
    addr: SocketAddr,
    up: Arc<crate::fleet::Liveness>,
    stop: Arc<AtomicBool>,
) -> Vec<Canary> {
    let mut client = client(addr);
    let mut log = Vec::new();
    let mut n = 0u64;
    let mut ticker = tokio::time::interval(Duration::from_millis(100));
    while !stop.load(Ordering::Relaxed) {
        ticker.tick().await;
        if !up.up.load(Ordering::SeqCst) {
            continue;
        }
        n += 1;
        let descriptors = vec![("k".to_string(), format!("canary-{instance}-{n}-{}", now_us()))];
        let sent = now_us();
        let (outcome, recv) =
            call(&mut client, request("soak_canary", &descriptors), Duration::from_secs(2)).await;
        if !up.up.load(Ordering::SeqCst) {
            continue;
        }
        let decided = matches!(&outcome, Outcome::Answered { overall: true, .. });
        log.push(Canary { instance, sent, recv, decided });
    }
    log
}
