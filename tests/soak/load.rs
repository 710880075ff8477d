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

/// One descriptor's status as answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Status {
    pub ok: bool,
    pub remaining: u32,
    /// `duration_until_reset` in whole seconds, when given.
    pub reset_s: Option<i64>,
}

/// How a call ended.
#[derive(Clone, Debug)]
pub enum Outcome {
    /// An answer: the overall code (OK or not) and each descriptor's, and each status.
    Answered { overall: bool, ok: Vec<bool>, statuses: Vec<Status> },
    /// A gRPC error (an instance down, a refused connection).
    Error,
    /// Dropped by the client before the answer (its timeout).
    Cancelled,
}

/// What a descriptor asks besides its entry: its own `hits_addend` (`Some(0)`: a peek),
/// `is_negative_hits`, and a request `limit` override (requests per second).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ask {
    pub hits: Option<u64>,
    pub refund: bool,
    pub over: Option<u32>,
}

/// One call as the client saw it.
#[derive(Clone, Debug)]
pub struct Call {
    pub instance: usize,
    pub domain: &'static str,
    /// One `(key, value)` per descriptor.
    pub descriptors: Vec<(String, String)>,
    /// One per descriptor.
    pub asks: Vec<Ask>,
    /// The request's `hits_addend` (0 means 1).
    pub hits_addend: u32,
    pub sent: u64,
    pub recv: u64,
    pub outcome: Outcome,
}

impl Call {
    /// Whether the charge may have been made without the client seeing an OK for it.
    pub fn unseen(&self) -> bool {
        !matches!(&self.outcome, Outcome::Answered { overall: true, .. })
    }

    /// The hits descriptor `i` asks: its own, else the request's (0 means 1); 0 is a peek.
    pub fn hits(&self, i: usize) -> u64 {
        self.asks[i].hits.unwrap_or(u64::from(self.hits_addend.max(1)))
    }
}

/// The requests per second of a request `limit` override on `value`: one per value, so
/// that an override's bucket (keyed by domain, unit and entries) keeps its numbers.
pub fn override_rate(value: &str) -> u32 {
    [5, 10, 40][value.bytes().map(usize::from).sum::<usize>() % 3]
}

/// A value only one client ever sends (client `client`, slot `slot`): its answers are
/// checked against the exact model (`model.rs`).
pub fn owned(client: usize, slot: usize) -> String {
    format!("own-{client}-{slot}")
}

/// A gRPC client of one instance.
pub type RlsClient = RateLimitServiceClient<Channel>;

/// A lazily connecting client of `addr` (reconnects after a restart).
pub fn client(addr: SocketAddr) -> RlsClient {
    let endpoint = Endpoint::from_shared(format!("http://{addr}")).expect("endpoint");
    RateLimitServiceClient::new(endpoint.connect_timeout(Duration::from_millis(500)).connect_lazy())
}

/// A request of `domain` with one entry per descriptor.
pub fn request(domain: &str, descriptors: &[(String, String)]) -> RateLimitRequest {
    let asks = vec![Ask::default(); descriptors.len()];
    request_with(domain, descriptors, &asks, 0)
}

/// A request of `domain`: one entry per descriptor, each with its `Ask`.
pub fn request_with(
    domain: &str,
    descriptors: &[(String, String)],
    asks: &[Ask],
    hits_addend: u32,
) -> RateLimitRequest {
    use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride;
    RateLimitRequest {
        domain: domain.into(),
        descriptors: descriptors
            .iter()
            .zip(asks)
            .map(|((k, v), ask)| RateLimitDescriptor {
                entries: vec![Entry { key: k.clone(), value: v.clone() }],
                hits_addend: ask.hits.map(|h| envoy_types::pb::google::protobuf::UInt64Value { value: h }),
                is_negative_hits: ask.refund,
                // Unit 1: SECOND.
                limit: ask.over.map(|rate| RateLimitOverride { requests_per_unit: rate, unit: 1 }),
            })
            .collect(),
        hits_addend,
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
                statuses: response
                    .statuses
                    .iter()
                    .map(|s| Status {
                        ok: s.code == Code::Ok as i32,
                        remaining: s.limit_remaining,
                        reset_s: s.duration_until_reset.as_ref().map(|d| d.seconds),
                    })
                    .collect(),
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

/// The domains clients draw, with their weights.
const DOMAINS: [(&str, u32); 15] = [
    ("soak_gcra", 15),
    ("soak_sliding", 12),
    ("soak_fixed", 18),
    ("soak_multi", 10),
    ("soak_aon", 10),
    ("soak_lease", 10),
    ("soak_approx", 10),
    ("soak_switch", 5),
    ("soak_count", 10),
    ("soak_budget_gcra", 6),
    ("soak_budget_fixed", 5),
    ("soak_penalty", 6),
    ("soak_minute", 4),
    ("soak_approx_minute", 4),
    ("soak_incident", 3),
];

/// The largest `hits_addend` a costly draw asks of `domain`: its limit.
fn limit_of(domain: &str) -> u64 {
    use crate::policies as p;
    match domain {
        "soak_lease" => p::LEASE_PER_SECOND,
        "soak_multi" => p::MULTI_SECOND,
        "soak_approx" => p::APPROX_PER_SECOND,
        "soak_penalty" => p::PENALTY_PER_SECOND,
        "soak_minute" | "soak_approx_minute" => p::PER_MINUTE,
        _ => p::PER_SECOND,
    }
}

/// Whether a domain's descriptors draw the request features (hits, peeks, refunds,
/// overrides) and own keys: every one but the counted, canary and incident domains.
fn featured(domain: &str) -> bool {
    !matches!(domain, "soak_count" | "soak_incident")
}

/// One client: until `stop`, a request every [`PACE`] to `addr`; returns its log.
/// `client` numbers the client in the run (its own keys, [`owned`]).
pub async fn run_client(
    seed: u64,
    client: usize,
    instance: usize,
    addr: SocketAddr,
    start_us: u64,
    stop: Arc<AtomicBool>,
) -> Vec<Call> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut draw = Draw { zipf: Zipf::new(KEYS), fresh: 0, seed, instance, client };
    let mut client = crate::load::client(addr);
    let mut log = Vec::new();
    let mut ticker = tokio::time::interval(PACE);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    while !stop.load(Ordering::Relaxed) {
        ticker.tick().await;
        let mut pick = rng.random_range(0..DOMAINS.iter().map(|w| w.1).sum::<u32>());
        let domain = DOMAINS
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
        let descriptors = draw.descriptors(&mut rng, domain, flooding, start_us);
        let (asks, hits_addend) = draw_asks(&mut rng, domain, &descriptors);
        let cutoff = if rng.random_range(0..100) < 4 {
            Duration::from_micros(rng.random_range(0..12_000))
        } else {
            Duration::from_secs(2)
        };
        let sent = now_us();
        let request = request_with(domain, &descriptors, &asks, hits_addend);
        let (outcome, recv) = call(&mut client, request, cutoff).await;
        log.push(Call { instance, domain, descriptors, asks, hits_addend, sent, recv, outcome });
    }
    log
}

/// A client's key draws.
struct Draw {
    zipf: Zipf,
    fresh: u64,
    seed: u64,
    instance: usize,
    client: usize,
}

impl Draw {
    fn value(&mut self, rng: &mut StdRng, flooding: bool) -> String {
        match if flooding { 0 } else { rng.random_range(0..100) } {
            0..2 => {
                self.fresh += 1;
                format!("flood-{}-{}-{}", self.instance, self.seed, self.fresh)
            }
            2..62 => format!("z{}", self.zipf.draw(rng)),
            _ => format!("u{}", rng.random_range(0..KEYS)),
        }
    }

    fn descriptors(
        &mut self,
        rng: &mut StdRng,
        domain: &str,
        flooding: bool,
        start_us: u64,
    ) -> Vec<(String, String)> {
        let count = match rng.random_range(0..100) {
            0..60 => 1,
            60..90 => rng.random_range(2..=4),
            _ => rng.random_range(5..=16),
        };
        match domain {
            "soak_count" => {
                let epoch = (now_us() - start_us) / COUNT_EPOCH_US;
                vec![("k".into(), format!("cnt-e{epoch}-{}", rng.random_range(0..16)))]
            }
            // A fifth of all-or-nothing requests are one client's own pair.
            "soak_aon" if rng.random_range(0..5) == 0 => {
                let own = owned(self.client, rng.random_range(0..3));
                vec![("a".into(), own.clone()), ("b".into(), own)]
            }
            "soak_aon" => (0..count.clamp(2, 4))
                .map(|i| (if i % 2 == 0 { "a" } else { "b" }.to_string(), self.value(rng, flooding)))
                .collect(),
            _ => {
                // A fifth of the descriptors are the client's own keys, each at most once
                // per request (one client at a time, one charge at a time: `model.rs`).
                let mut used = Vec::new();
                (0..count)
                    .map(|_| {
                        let slot = rng.random_range(0..3);
                        let value =
                            if featured(domain) && rng.random_range(0..5) == 0 && !used.contains(&slot) {
                                used.push(slot);
                                owned(self.client, slot)
                            } else {
                                self.value(rng, flooding)
                            };
                        ("k".to_string(), value)
                    })
                    .collect()
            }
        }
    }
}

/// Each descriptor's `Ask` and the request's `hits_addend`: peeks, costly hits up to the
/// limit, refunds, request overrides; budgets report usage (now and then a huge one).
fn draw_asks(rng: &mut StdRng, domain: &str, descriptors: &[(String, String)]) -> (Vec<Ask>, u32) {
    if !featured(domain) {
        return (vec![Ask::default(); descriptors.len()], 0);
    }
    let hits_addend = if rng.random_range(0..10) == 0 { rng.random_range(2..=4) } else { 0 };
    let budget = domain.starts_with("soak_budget");
    let asks = descriptors
        .iter()
        .map(|(_, value)| match rng.random_range(0..100) {
            0..8 => Ask { hits: Some(0), ..Ask::default() },
            8..14 => Ask { hits: Some(rng.random_range(2..=limit_of(domain))), ..Ask::default() },
            14..18 => Ask { hits: Some(rng.random_range(1..=5)), refund: true, ..Ask::default() },
            // Overrides keep out of all-or-nothing groups (a descriptor alone in its bucket).
            18..22 if domain != "soak_aon" => Ask { over: Some(override_rate(value)), ..Ask::default() },
            22..24 if budget => Ask { hits: Some(1_000_000_000_000), ..Ask::default() },
            24..50 if budget => Ask { hits: Some(rng.random_range(1..=30)), ..Ask::default() },
            _ => Ask::default(),
        })
        .collect();
    (asks, hits_addend)
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
