//! The server's own one-minute history: decisions per second of each rule, store latency.
//!
//! Fixed memory: a rule has a ring of 60 one-second slots (one counter per class: ok,
//! over limit, failure policy); the store has one ring of 60 latency histograms. Slots are
//! reset lazily: each counter carries the second it counts in its upper 32 bits, so a
//! writer that finds an older second there starts the count afresh with one
//! compare-and-swap, and a reader ignores counters of seconds outside its minute. Writers
//! never lock: one relaxed load and one relaxed add per decision (a CAS at most once per
//! second per counter). Seconds are counted from `History::new` on the monotonic clock,
//! so a wall-clock step never scrambles the minute.
//!
//! Rings are kept per (domain, rule label) across reloads: `History::for_snapshot` hands a
//! new snapshot the rings of the rules it keeps and forgets the rest. Held by `Metrics`,
//! fed by the request path (`service::record`), read by the status page (`crate::operate::status`).
//! Must not know of gRPC, HTTP or Prometheus: not exported, nothing here registers.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use super::outcome::Outcome;
use crate::config::Snapshot;

/// Seconds of history kept: one slot each.
pub const SECONDS: usize = 60;

/// How a decision shows in the history (and on the status page).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// Within or near the limit, shadow mode, unlimited: the request went on.
    Ok = 0,
    /// Denied by the limit (before any global `--shadow-mode` rewrite of the answer).
    OverLimit = 1,
    /// Decided by the failure policy: failure_open, failure_closed, or the local fallback.
    Failure = 2,
}

impl Class {
    /// The class of a decision; `local` is true when the `failure_mode: local` limiter
    /// decided it because the store failed.
    pub fn of(outcome: Outcome, local: bool) -> Class {
        match outcome {
            Outcome::FailureOpen | Outcome::FailureClosed => Class::Failure,
            _ if local => Class::Failure,
            Outcome::OverLimit => Class::OverLimit,
            Outcome::WithinLimit
            | Outcome::NearLimit
            | Outcome::ShadowMode
            | Outcome::ShadowRollout
            | Outcome::Unlimited => Class::Ok,
        }
    }
}

const TAG_SHIFT: u32 = 32;
const COUNT_MASK: u64 = (1 << TAG_SHIFT) - 1;

/// Adds one to `cell` for `second`, restarting it at one if it holds an older second.
/// The count has 32 bits: four billion events per second per counter before it spills
/// into the tag, far past what one process decides.
fn bump(cell: &AtomicU64, second: u64) {
    let tag = second & COUNT_MASK;
    let mut current = cell.load(Ordering::Relaxed);
    loop {
        if current >> TAG_SHIFT == tag {
            cell.fetch_add(1, Ordering::Relaxed);
            return;
        }
        match cell.compare_exchange_weak(
            current,
            (tag << TAG_SHIFT) | 1,
            Ordering::Relaxed,
            Ordering::Relaxed,
        ) {
            Ok(_) => return,
            Err(actual) => current = actual,
        }
    }
}

/// The count `cell` holds for `second` (0 if it holds another second).
fn count(cell: &AtomicU64, second: u64) -> u64 {
    let value = cell.load(Ordering::Relaxed);
    if value >> TAG_SHIFT == second & COUNT_MASK {
        value & COUNT_MASK
    } else {
        0
    }
}

/// The complete seconds of the minute before `now`, oldest first: `now - 60 ..= now - 1`
/// (the second in progress is left out, so a rate never reads low for a partial second).
fn minute_before(now: u64) -> impl Iterator<Item = u64> {
    (1..=SECONDS as u64).rev().filter_map(move |back| now.checked_sub(back))
}

/// One rule's decisions over the last minute.
#[derive(Debug)]
pub struct RuleRing {
    slots: [[AtomicU64; 3]; SECONDS],
}

impl Default for RuleRing {
    fn default() -> Self {
        RuleRing { slots: std::array::from_fn(|_| Default::default()) }
    }
}

/// Decisions of one second, or their per-second average over a minute.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Rates {
    pub ok: f64,
    pub over_limit: f64,
    pub failure: f64,
}

/// A rule's last minute: the count of each complete second, oldest first.
#[derive(Debug, Clone, PartialEq)]
pub struct Minute {
    pub seconds: Vec<[u64; 3]>,
}

impl Minute {
    /// A minute without a decision.
    pub fn empty() -> Minute {
        Minute { seconds: vec![[0; 3]; SECONDS] }
    }

    /// Average decisions per second over the minute (a minute not yet lived counts its
    /// missing seconds as zero).
    pub fn per_second(&self) -> Rates {
        let mut sums = [0u64; 3];
        for second in &self.seconds {
            for (sum, n) in sums.iter_mut().zip(second) {
                *sum += n;
            }
        }
        let rate = |n: u64| n as f64 / SECONDS as f64;
        Rates { ok: rate(sums[0]), over_limit: rate(sums[1]), failure: rate(sums[2]) }
    }

    /// The series of one class, oldest first.
    pub fn series(&self, class: Class) -> impl Iterator<Item = u64> + '_ {
        self.seconds.iter().map(move |second| second[class as usize])
    }
}

impl RuleRing {
    /// Counts one decision made during `second`.
    pub fn record(&self, second: u64, class: Class) {
        bump(&self.slots[second as usize % SECONDS][class as usize], second);
    }

    /// The minute before `now`: always `SECONDS` entries, zero-filled at the start.
    pub fn minute(&self, now: u64) -> Minute {
        let mut seconds = vec![[0; 3]; SECONDS - minute_before(now).count()];
        seconds.extend(minute_before(now).map(|second| {
            let slot = &self.slots[second as usize % SECONDS];
            [count(&slot[0], second), count(&slot[1], second), count(&slot[2], second)]
        }));
        Minute { seconds }
    }
}

/// Latency buckets: four per power of two of microseconds (a bucket's upper bound is at
/// most 25 % above its lower), exact below 4 µs, the last one open-ended (past ~67 s).
const BUCKETS: usize = 100;

fn bucket(micros: u64) -> usize {
    if micros < 4 {
        return micros as usize;
    }
    let exp = 63 - micros.leading_zeros() as usize;
    let sub = ((micros >> (exp - 2)) - 4) as usize;
    (4 * (exp - 1) + sub).min(BUCKETS - 1)
}

/// The exclusive upper bound of a bucket, in microseconds.
fn upper_micros(bucket: usize) -> u64 {
    if bucket < 4 {
        return bucket as u64 + 1;
    }
    let (exp, sub) = (bucket / 4 + 1, (bucket % 4) as u64);
    (5 + sub) << (exp - 2)
}

/// Store call latency over the last minute: one histogram per second.
#[derive(Debug)]
pub struct LatencyRing {
    slots: Box<[[AtomicU64; BUCKETS]; SECONDS]>,
}

impl Default for LatencyRing {
    fn default() -> Self {
        LatencyRing { slots: Box::new(std::array::from_fn(|_| std::array::from_fn(|_| AtomicU64::new(0)))) }
    }
}

impl LatencyRing {
    /// Counts one store call of `seconds` that ended during `second`.
    pub fn observe(&self, second: u64, seconds: f64) {
        let micros = (seconds * 1e6) as u64;
        bump(&self.slots[second as usize % SECONDS][bucket(micros)], second);
    }

    /// The 99th percentile of the minute before `now`, in milliseconds: the upper bound of
    /// the bucket it falls in (so at most 25 % high). `None` without a call that minute.
    pub fn p99_ms(&self, now: u64) -> Option<f64> {
        let mut merged = [0u64; BUCKETS];
        for second in minute_before(now) {
            let slot = &self.slots[second as usize % SECONDS];
            for (sum, cell) in merged.iter_mut().zip(slot.iter()) {
                *sum += count(cell, second);
            }
        }
        let total: u64 = merged.iter().sum();
        if total == 0 {
            return None;
        }
        // The smallest bucket at or under which 99 % of the calls fall.
        let rank = total - total / 100;
        let mut seen = 0;
        let index = merged.iter().position(|n| {
            seen += n;
            seen >= rank
        })?;
        Some(upper_micros(index) as f64 / 1000.0)
    }
}

/// The rings of every rule, and of the store; one per server (held by `Metrics`).
#[derive(Debug)]
pub struct History {
    started: Instant,
    /// By (domain, rule label): the rings of the serving snapshot's rules.
    rules: Mutex<HashMap<(String, String), Arc<RuleRing>>>,
    store: LatencyRing,
}

impl Default for History {
    fn default() -> Self {
        History::new()
    }
}

impl History {
    pub fn new() -> History {
        History { started: Instant::now(), rules: Mutex::default(), store: LatencyRing::default() }
    }

    /// The current second, counted from 1 at creation (0 never names a lived second, so
    /// an untouched counter reads as empty).
    pub fn now(&self) -> u64 {
        self.started.elapsed().as_secs() + 1
    }

    /// The rings of a snapshot about to serve, indexed like `Domain::rules`: a rule whose
    /// (domain, label) served before keeps its ring (and its minute); rings of rules that
    /// are gone are forgotten.
    pub fn for_snapshot(&self, snapshot: &Snapshot) -> SnapshotHistory {
        let mut rules = self.rules.lock().unwrap_or_else(PoisonError::into_inner);
        let mut kept = HashMap::with_capacity(rules.len());
        let mut domains = HashMap::with_capacity(snapshot.domains.len());
        for (name, domain) in &snapshot.domains {
            let rings: Vec<Arc<RuleRing>> = domain
                .rules
                .iter()
                .map(|rule| {
                    let key = (name.clone(), rule.label().to_string());
                    let ring = rules.get(&key).cloned().unwrap_or_default();
                    kept.insert(key, ring.clone());
                    ring
                })
                .collect();
            domains.insert(name.clone(), rings);
        }
        *rules = kept;
        SnapshotHistory { domains }
    }

    /// One store call of `seconds` that ended now.
    pub fn observe_store(&self, seconds: f64) {
        self.store.observe(self.now(), seconds);
    }

    /// The store's p99 latency over the minute before second `now`, in milliseconds.
    pub fn store_p99_ms_at(&self, now: u64) -> Option<f64> {
        self.store.p99_ms(now)
    }
}

/// The rings of one snapshot's rules: `domains[domain][rule_id]`.
#[derive(Debug, Default)]
pub struct SnapshotHistory {
    domains: HashMap<String, Vec<Arc<RuleRing>>>,
}

impl SnapshotHistory {
    /// The rings of a domain's rules, indexed by `RuleId`.
    pub fn domain(&self, name: &str) -> Option<&[Arc<RuleRing>]> {
        self.domains.get(name).map(Vec::as_slice)
    }
}

#[cfg(test)]
mod tests;
