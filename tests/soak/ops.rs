//! The operators: while the clients run, one thread plays an operator's commands against
//! the fleet, each through one instance while the others serve, and records what every
//! instance answered around it (`verdict_ops.rs` judges):
//! - **spend, then peek**: a fresh key spent through one instance, then peeked (a first
//!   read) through every instance after the stated sync delay (invariant 8);
//! - **reset**: a fresh key exhausted (or penalized) until every instance denies it, reset
//!   through one instance, then charged on every instance 1 s after the reset answered
//!   (invariant 9);
//! - **override**: `/v1/override` set on `soak_incident` through one instance and ended
//!   through another; on the single topology half of them with the setting instance cut
//!   from Redis by its front (its replies dropped) from before the set until after the end
//!   (invariant 10).
//!
//! Plants for those invariants are applied here (`plan::Plant`).

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::front_support::Front;
use crate::load::{self, now_us, Ask, Outcome, Status};
use crate::plan::Plant;
use crate::policies;
use crate::run::Happened;
use crate::stores::{cli, Masters};

/// The stated delay before an approximate instance's admissions are in Redis, at the
/// default `--sync-interval-ms` I: an idle bucket's increment waits 4 I, the wakes are
/// I / 2 apart, and a sync call has 4 I (at least 1 s) before it fails (docs/scaling.md,
/// "Approximate mode", "The sync").
pub const SYNC_DELAY_US: u64 = {
    let i = policies::SYNC_INTERVAL_MS * 1_000;
    let call = if 4 * i > 1_000_000 { 4 * i } else { 1_000_000 };
    4 * i + i / 2 + call
};
/// How soon a reset is seen by every instance (docs/operations.md, "When other replicas see a reset").
pub const RESET_VISIBLE_US: u64 = 1_000_000;
/// How soon every instance honours an override's change (docs/operations.md, "Fleet-wide").
pub const OVERRIDE_VISIBLE_US: u64 = 1_000_000;
/// An override's `ttl_seconds`.
pub const OVERRIDE_TTL_S: u64 = 20;

/// One request of a scenario and its answer (`None`: no answer).
#[derive(Clone, Debug)]
pub struct Probe {
    pub instance: usize,
    pub hits: u64,
    pub sent: u64,
    pub recv: u64,
    pub status: Option<Status>,
}

/// A fresh key spent through `spender`, then peeked through every instance.
#[derive(Clone, Debug)]
pub struct PeekCheck {
    pub domain: &'static str,
    pub value: String,
    pub spender: usize,
    pub spends: Vec<Probe>,
    pub peeks: Vec<Probe>,
}

/// A fresh key exhausted until every instance denied it, reset through `through`, then
/// charged on every instance.
#[derive(Clone, Debug)]
pub struct ResetCheck {
    pub domain: &'static str,
    pub value: String,
    pub through: usize,
    /// Every charge before the reset.
    pub before: Vec<Probe>,
    /// `(sent, answered, HTTP status)`.
    pub reset: (u64, u64, u16),
    pub after: Vec<Probe>,
}

/// An override of `soak_incident`: set through one instance, ended through another.
#[derive(Clone, Debug)]
pub struct OverrideSet {
    pub mode: &'static str,
    pub set_on: usize,
    /// `(sent, answered, HTTP status)`.
    pub set: (u64, u64, u16),
    pub end_on: usize,
    pub end: Option<(u64, u64, u16)>,
    /// The instance cut from Redis, from the cut to its restoration.
    pub cut: Option<(usize, u64, u64)>,
}

/// What the operators did.
#[derive(Default)]
pub struct OpsLog {
    pub peeks: Vec<PeekCheck>,
    pub resets: Vec<ResetCheck>,
    pub overrides: Vec<OverrideSet>,
    /// Cuts, as faults (a store fault of the instance cut).
    pub cuts: Vec<Happened>,
}

/// The fleet as the operators reach it.
pub struct Operators {
    pub seed: u64,
    /// `(gRPC, admin)` per instance.
    pub addrs: Vec<(SocketAddr, SocketAddr)>,
    /// Each instance's own front (empty where the topology has none).
    pub fronts: Vec<Arc<Front>>,
    pub plant: Option<Plant>,
    pub view: Masters,
}

/// Runs scenarios until `stop`.
pub fn run(ops: Operators, handle: tokio::runtime::Handle, stop: Arc<AtomicBool>) -> OpsLog {
    let mut rng = StdRng::seed_from_u64(ops.seed ^ 0x0b5e_55ed);
    let clients: Vec<_> = {
        let _enter = handle.enter();
        ops.addrs.iter().map(|(grpc, _)| load::client(*grpc)).collect()
    };
    let mut fleet = Fleet { ops: &ops, handle, clients, stop: stop.clone(), fresh: 0 };
    let mut log = OpsLog::default();
    // A planted run plays its plant's scenario first.
    let mut next = match ops.plant {
        Some(Plant::PeekForgotten) => 0,
        Some(Plant::ResetUnsent) => 1,
        Some(Plant::OverrideReplayed) => 2,
        _ => rng.random_range(0..3),
    };
    while !stop.load(Ordering::SeqCst) {
        match next {
            0 => log.peeks.push(fleet.spend_then_peek(&mut rng)),
            1 => log.resets.push(fleet.reset(&mut rng)),
            _ => {
                let (set, cut) = fleet.override_cycle(&mut rng);
                log.overrides.push(set);
                log.cuts.extend(cut);
            }
        }
        next = rng.random_range(0..3);
        fleet.pause(Duration::from_millis(rng.random_range(200..800)));
    }
    log
}

/// The operators' hold on the fleet while they play.
pub(crate) struct Fleet<'a> {
    pub(crate) ops: &'a Operators,
    handle: tokio::runtime::Handle,
    clients: Vec<load::RlsClient>,
    pub(crate) stop: Arc<AtomicBool>,
    fresh: u64,
}

impl Fleet<'_> {
    pub(crate) fn instances(&self) -> usize {
        self.ops.addrs.len()
    }

    pub(crate) fn fresh(&mut self, prefix: &str) -> String {
        self.fresh += 1;
        format!("{prefix}-{}-{}", self.ops.seed, self.fresh)
    }

    /// Sleeps `d`, or less once the run stops.
    pub(crate) fn pause(&self, d: Duration) {
        let until = now_us() + d.as_micros() as u64;
        while now_us() < until && !self.stop.load(Ordering::SeqCst) {
            std::thread::sleep(
                Duration::from_millis(10).min(Duration::from_micros(until.saturating_sub(now_us()))),
            );
        }
    }

    /// One charge of `hits` (0: a peek) of `domain` `k=value` through `instance`.
    pub(crate) fn charge(&mut self, instance: usize, domain: &str, value: &str, hits: u64) -> Probe {
        let descriptors = vec![("k".to_string(), value.to_string())];
        let asks = [Ask { hits: Some(hits), ..Ask::default() }];
        let request = load::request_with(domain, &descriptors, &asks, 0);
        let sent = now_us();
        let client = &mut self.clients[instance];
        let (outcome, recv) = self.handle.block_on(load::call(client, request, Duration::from_secs(2)));
        let status = match outcome {
            Outcome::Answered { statuses, .. } => statuses.first().copied(),
            _ => None,
        };
        Probe { instance, hits, sent, recv, status }
    }

    /// `method path` on `instance`'s admin port with a JSON `body`: status and body.
    pub(crate) fn admin(
        &self,
        instance: usize,
        method: &str,
        path: &str,
        body: &str,
    ) -> (u64, u64, u16, String) {
        let sent = now_us();
        let answer = admin_call(self.ops.addrs[instance].1, method, path, body);
        let (status, text) = answer.unwrap_or((0, String::new()));
        (sent, now_us(), status, text)
    }
}

/// A blocking HTTP/1.1 exchange within 2 s; `None` when it failed.
fn admin_call(addr: SocketAddr, method: &str, path: &str, body: &str) -> Option<(u16, String)> {
    let mut stream = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    let head = format!(
        "{method} {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(head.as_bytes()).ok()?;
    let mut text = String::new();
    stream.read_to_string(&mut text).ok()?;
    let status = text.split_whitespace().nth(1)?.parse().ok()?;
    Some((status, text.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default()))
}

/// Deletes every key holding `marker` on every master, one script call each (a plant).
pub fn delete_keys(view: &Masters, marker: &str) {
    const SCRIPT: &str =
        "for _, k in ipairs(redis.call('KEYS', ARGV[1])) do redis.call('DEL', k) end return 0";
    for port in view.ports() {
        cli(port, &["EVAL", SCRIPT, "0", &format!("*{marker}*")]);
    }
}
