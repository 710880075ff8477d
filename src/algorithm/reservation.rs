//! Reservations: an estimate held before the work and settled with the actual usage after
//! (a descriptor naming a reservation, `reservations:` in a domain; docs/policies.md).
//!
//! Pure, like the rest of `algorithm`. One call names reservation `id` and the limits of
//! its descriptor (the members of a group, as [`joint`] takes them); the caller reads the
//! buckets' states and the reservation's record (a [`Book`] per bucket in memory; a hash
//! and a sorted set beside the first bucket in Redis), calls [`apply`] with one `now`, and
//! writes what it returns. `src/store/lua/reserve.lua` is the same function for Redis (kept
//! equal by `tests/differential.rs`).
//!
//! What a call does, by the record it finds (see [`apply`]):
//! - none, with hits: **reserve** — every limit consumes the hits, all or nothing
//!   (whatever the limit's `overdraft` says); admitted: the record holds each limit's
//!   amount and window; denied: nothing is held and the record says so (refused);
//! - held: **settle** — the hits are the actual usage; each limit on its own gives back
//!   what it held beyond it (the same window only: a refund into a later window would
//!   give away that window's quota) or overdraws what went past it (recorded whether or
//!   not it fits, within the overdraft's cap of one unit of debt); the record says settled;
//! - settled or refused, or none with no hits, or a refund (`is_negative_hits`):
//!   **plain** — the group as any group of the descriptor would be charged (a peek when
//!   its hits are 0).
//!
//! A record lives `ttl` after it is written. One that expires still held was never
//! settled: its amount stays charged (the conservative side) and the call that finds it
//! counts it. Each call removes at most [`SWEEP`] expired records (its cost stays bounded),
//! soonest first, then its own if expired.

use std::collections::{BTreeSet, HashMap};

use super::bucket::{Algorithm, Hits, Params, State};
use super::joint::{self, Joint, Member};
use super::saturating::{add, clamp};

/// Expired records a call removes at most (`reserve.lua`'s `SWEEP`).
pub const SWEEP: usize = 16;

/// What one limit holds for a reservation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Held {
    /// The hits reserved (clamped to `MAX_VALUE`).
    pub n: u64,
    /// The window they were reserved in ([`window_start`]; 0 for GCRA).
    pub window: u64,
}

/// A reservation's record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    /// Reserved and not settled yet: one entry per member, in order.
    Held(Vec<Held>),
    /// Settled, or refused: later calls naming it are plain.
    Done,
}

/// What a call did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Charged as if it named no reservation.
    Plain,
    /// Admitted and held.
    Reserved,
    /// Denied: nothing held.
    Refused,
    /// The held amounts settled with the actual usage.
    Settled,
}

impl Phase {
    /// Its number in `reserve.lua`'s reply.
    pub fn code(self) -> u64 {
        match self {
            Phase::Plain => 0,
            Phase::Reserved => 1,
            Phase::Refused => 2,
            Phase::Settled => 3,
        }
    }

    /// The phase numbered `code` in a reply, if any.
    pub fn from_code(code: u64) -> Option<Phase> {
        [Phase::Plain, Phase::Reserved, Phase::Refused, Phase::Settled].into_iter().find(|p| p.code() == code)
    }

    /// The `phase` label of metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Plain => "plain",
            Phase::Reserved => "reserved",
            Phase::Refused => "refused",
            Phase::Settled => "settled",
        }
    }
}

/// The answers of a call, what to write to the buckets, and the record to write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// As [`joint::apply`]'s (settles: [`joint::apply_each`]'s).
    pub joint: Joint,
    pub phase: Phase,
    /// The record to store (expiring `ttl` from now), or `None`: the record is unchanged.
    pub record: Option<Record>,
}

/// The window a limit's reservation is taken in at `now`: a window's start, 0 for GCRA
/// (whose refunds never give away a later window's quota: its TAT never goes before now).
pub fn window_start(params: &Params, now: u64) -> u64 {
    match params.algorithm {
        Algorithm::Gcra => 0,
        Algorithm::SlidingWindow | Algorithm::FixedWindow => {
            let now = clamp(now);
            now - now % clamp(params.unit_us).max(1)
        }
    }
}

/// The hits a member asks for, as reserved or used (peeks and refunds: 0).
fn used(hits: Hits) -> u64 {
    match hits {
        Hits::Consume(n) | Hits::Overdraw(n) => clamp(n),
        Hits::Peek | Hits::Refund(_) => 0,
    }
}

/// Decides a call naming a reservation whose record is `record` (`None`: none, or
/// expired) at `now`, on the buckets' `stored` states (see the module doc).
pub fn apply(stored: &[Option<State>], record: Option<&Record>, now: u64, members: &[Member]) -> Outcome {
    let refund = members.iter().any(|m| matches!(m.hits, Hits::Refund(_)));
    let any = members.iter().any(|m| used(m.hits) > 0);
    match record {
        Some(Record::Held(held)) if !refund => settle(stored, held, now, members),
        None if any && !refund => reserve(stored, now, members),
        _ => Outcome { joint: joint::apply(stored, now, members), phase: Phase::Plain, record: None },
    }
}

fn reserve(stored: &[Option<State>], now: u64, members: &[Member]) -> Outcome {
    let consumes: Vec<Member> = members
        .iter()
        .map(|m| Member {
            hits: if let Hits::Overdraw(n) = m.hits { Hits::Consume(n) } else { m.hits },
            ..*m
        })
        .collect();
    let joint = joint::apply(stored, now, &consumes);
    if !joint.passed() {
        return Outcome { joint, phase: Phase::Refused, record: Some(Record::Done) };
    }
    let held =
        members.iter().map(|m| Held { n: used(m.hits), window: window_start(&m.params, now) }).collect();
    Outcome { joint, phase: Phase::Reserved, record: Some(Record::Held(held)) }
}

fn settle(stored: &[Option<State>], held: &[Held], now: u64, members: &[Member]) -> Outcome {
    let settles: Vec<Member> = members
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let (n, window) = held.get(i).map_or((0, None), |h| (h.n, Some(h.window)));
            let actual = used(m.hits);
            let hits = if actual > n {
                Hits::Overdraw(actual - n)
            } else if actual < n && window == Some(window_start(&m.params, now)) {
                Hits::Refund(n - actual)
            } else {
                Hits::Peek
            };
            Member { hits, ..*m }
        })
        .collect();
    let joint = joint::apply_each(stored, now, &settles);
    Outcome { joint, phase: Phase::Settled, record: Some(Record::Done) }
}

/// The reservation records beside one bucket: by id, with when each expires (µs).
#[derive(Debug, Clone, Default)]
pub struct Book {
    records: HashMap<Vec<u8>, (Record, u64)>,
    /// (expiry, id), soonest first (ids in byte order among equals, as a Redis sorted set).
    expiries: BTreeSet<(u64, Vec<u8>)>,
}

impl Book {
    /// Removes up to [`SWEEP`] expired records (soonest first) and then `id`'s if it has
    /// expired, and answers `id`'s live record and how many removed records were still
    /// held (never settled).
    pub fn open(&mut self, id: &[u8], now: u64) -> (Option<Record>, u64) {
        let now = clamp(now);
        let due: Vec<Vec<u8>> = self
            .expiries
            .iter()
            .take_while(|(at, _)| *at <= now)
            .take(SWEEP)
            .map(|(_, f)| f.clone())
            .collect();
        let mut expired: u64 = due.iter().map(|f| self.drop(f)).sum();
        if self.records.get(id).is_some_and(|(_, at)| *at <= now) {
            expired += self.drop(id);
        }
        (self.records.get(id).map(|(r, _)| r.clone()), expired)
    }

    /// Stores `record` for `id`, expiring `ttl_us` after `now`.
    pub fn put(&mut self, id: &[u8], record: Record, now: u64, ttl_us: u64) {
        let at = add(clamp(now), ttl_us);
        if let Some((_, was)) = self.records.insert(id.to_vec(), (record, at)) {
            self.expiries.remove(&(was, id.to_vec()));
        }
        self.expiries.insert((at, id.to_vec()));
    }

    /// Removes every expired record: how many were still held.
    pub fn expire(&mut self, now: u64) -> u64 {
        let now = clamp(now);
        let due: Vec<Vec<u8>> =
            self.expiries.iter().take_while(|(at, _)| *at <= now).map(|(_, f)| f.clone()).collect();
        due.iter().map(|f| self.drop(f)).sum()
    }

    /// Whether `id` has a record (live or not yet swept).
    pub fn contains(&self, id: &[u8]) -> bool {
        self.records.contains_key(id)
    }

    /// How many records it holds.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// Whether no record is left.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// The latest expiry of a record (µs), 0 when empty.
    pub fn last_expiry(&self) -> u64 {
        self.expiries.last().map_or(0, |(at, _)| *at)
    }

    /// Removes `id`'s record: 1 if it was still held, else 0.
    fn drop(&mut self, id: &[u8]) -> u64 {
        match self.records.remove(id) {
            Some((record, at)) => {
                self.expiries.remove(&(at, id.to_vec()));
                u64::from(matches!(record, Record::Held(_)))
            }
            None => 0,
        }
    }
}

#[cfg(test)]
mod tests;
