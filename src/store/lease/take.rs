//! Taking a lease: a leasable charge answered from the tokens held, or the block to take
//! from Redis (a refill, sent by a task), and Redis's answers (`filled`, `learn`) turned
//! into leases and hints. No I/O, no clock: callers pass `now`.

use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::algorithm::{Algorithm, Decision, Params};
use crate::store::charge::StoreError;

use super::entry::{Entry, Hint, Lease, Meter};
use super::refund::{return_by, Return};
use super::settings::{LEASE_SHARE, MIN_BLOCK};
use super::table::LeaseTable;

/// What a leasable charge gets from the table.
#[derive(Debug)]
pub enum Take {
    /// Answered from the lease.
    Served(Decision),
    /// A refill of this key is in flight: wait for it (`true` when done), then ask again.
    Wait(watch::Receiver<bool>),
    /// Take this block from Redis (in a task), hand the answer to `filled`, then wait.
    Refill(Refill),
    /// Charge Redis as without leases.
    Remote,
}

/// A block to take from Redis for one key. Its `done` sender wakes the waiters.
#[derive(Debug)]
pub struct Refill {
    pub key: String,
    pub params: Params,
    pub block: u64,
    id: u64,
    done: watch::Sender<bool>,
}

impl Refill {
    /// A waiter's view of this refill (true once it is done).
    pub fn subscribe(&self) -> watch::Receiver<bool> {
        self.done.subscribe()
    }
}

impl LeaseTable {
    /// A leasable `Consume(hits)` of `key` at `now`. `first`: the request's first look
    /// (counts the hits); after a wait, `false` (a key no longer tracked then goes to
    /// Redis).
    pub fn take(&self, key: &str, params: &Params, hits: u64, now: Instant, first: bool) -> Take {
        let time = self.settings.time;
        let mut shard = self.shard(key);
        if !shard.contains_key(key) {
            if !first {
                return Take::Remote;
            }
            if shard.len() >= self.shard_cap {
                self.evict_one(&mut shard, now);
            }
            let meter = Meter { start: now, current: 0, previous: 0 };
            shard.insert(key.into(), Entry { params: *params, meter, lease: None, refill: None, hint: None });
        }
        let Some(entry) = shard.get_mut(key) else { return Take::Remote };
        if entry.params != *params {
            // A reload changed the rule: the old tokens go back, the new limit applies now.
            self.retire(key, entry, now);
            entry.refill = None;
            entry.hint = None;
            entry.params = *params;
        }
        if first {
            entry.meter.count(hits, now, time);
        }
        if let Some(lease) = &mut entry.lease {
            if now < lease.expires && lease.tokens >= hits {
                lease.tokens -= hits;
                let decision = lease.served(now);
                self.served.fetch_add(1, Ordering::Relaxed);
                return Take::Served(decision);
            }
            if now < lease.expires && lease.tokens > 0 {
                // Too few for this request, enough for smaller ones: keep it.
                return Take::Remote;
            }
        }
        self.retire(key, entry, now);
        if let Some((_, waiting)) = &entry.refill {
            return Take::Wait(waiting.clone());
        }
        let block = self.block(entry, params, hits, now);
        if block < MIN_BLOCK.max(hits) {
            return Take::Remote;
        }
        let id = self.next_refill.fetch_add(1, Ordering::Relaxed);
        let (done, waiting) = watch::channel(false);
        entry.refill = Some((id, waiting));
        Take::Refill(Refill { key: key.to_string(), params: *params, block, id, done })
    }

    /// Spends `hits` of `key`'s lease at `now` if it holds that many, and nothing else: no
    /// hit counted, no refill, no lease ended (a request out of time takes its last look).
    pub fn spend(&self, key: &str, params: &Params, hits: u64, now: Instant) -> Option<Decision> {
        let mut shard = self.shard(key);
        let entry = shard.get_mut(key).filter(|e| e.params == *params)?;
        let lease = entry.lease.as_mut().filter(|l| now < l.expires && l.tokens >= hits)?;
        lease.tokens -= hits;
        self.served.fetch_add(1, Ordering::Relaxed);
        Some(lease.served(now))
    }

    /// The block to take for `entry` now (0: none).
    fn block(&self, entry: &Entry, params: &Params, hits: u64, now: Instant) -> u64 {
        let time = self.settings.time;
        let capacity = match params.algorithm {
            Algorithm::Gcra => params.burst,
            Algorithm::SlidingWindow | Algorithm::FixedWindow => params.limit,
        };
        let cap = capacity.min(MIN_BLOCK.max(capacity / LEASE_SHARE));
        let mut block = entry.meter.rate().min(cap);
        if let Some(hint) = entry.hint.filter(|h| now.saturating_duration_since(h.at) < time) {
            block = block.min(hint.fits);
        }
        // The tail of a window: a lease would end before it paid off.
        let window_end = entry.hint.and_then(|h| h.window_end);
        if window_end.is_some_and(|end| now < end && end.saturating_duration_since(now) < time) {
            return 0;
        }
        if hits > block {
            return 0;
        }
        block
    }

    /// Redis's answer to `refill` (sent at `sent`), at `now`; wakes its waiters.
    pub fn filled(&self, refill: Refill, sent: Instant, result: &Result<Decision, StoreError>, now: Instant) {
        let time = self.settings.time;
        let granted = matches!(result, Ok(d) if d.allowed);
        let window_end =
            result.as_ref().ok().and_then(|d| window_left(&refill.params, d)).map(|left| sent + left);
        {
            let mut shard = self.shard(&refill.key);
            let current = shard
                .get_mut(refill.key.as_str())
                .filter(|e| e.refill.as_ref().is_some_and(|(id, _)| *id == refill.id));
            match (current, result) {
                (Some(entry), Ok(d)) if granted => {
                    entry.refill = None;
                    self.retire(&refill.key, entry, now);
                    let end = sent + time;
                    let expires = window_end.map_or(end, |w| end.min(w));
                    entry.lease =
                        Some(Lease { tokens: refill.block, expires, window_end, basis: *d, basis_at: now });
                    entry.hint = Some(Hint { fits: d.remaining, at: now, window_end });
                    self.blocks.fetch_add(1, Ordering::Relaxed);
                    self.taken.fetch_add(refill.block, Ordering::Relaxed);
                    if expires <= now {
                        self.retire(&refill.key, entry, now);
                    }
                }
                (Some(entry), _) => {
                    // Denied or failed: single charges for a lease time.
                    entry.refill = None;
                    entry.hint = Some(Hint { fits: 0, at: now, window_end });
                }
                (None, _) if granted => {
                    // Reset, evicted or re-parameterised meanwhile: the block goes back.
                    self.taken.fetch_add(refill.block, Ordering::Relaxed);
                    let by = window_end.map(|w| return_by(w, time));
                    self.queue(Return {
                        key: refill.key.clone(),
                        params: refill.params,
                        tokens: refill.block,
                        by,
                        since: now,
                    });
                }
                (None, _) => {}
            }
        }
        let _ = refill.done.send(true);
    }

    /// Redis's answer to a single leasable charge of `key` under `params`: what fits now.
    pub fn learn(&self, key: &str, params: &Params, result: &Result<Decision, StoreError>, now: Instant) {
        let Ok(decision) = result else { return };
        let mut shard = self.shard(key);
        let Some(entry) = shard.get_mut(key).filter(|e| e.params == *params) else { return };
        let fits = if decision.allowed { decision.remaining } else { 0 };
        let window_end = window_left(params, decision).map(|left| now + left);
        entry.hint =
            Some(Hint { fits, at: now, window_end: window_end.or(entry.hint.and_then(|h| h.window_end)) });
    }
}

/// The time left in the window of an answer of a window algorithm (None for GCRA, or
/// when the answer does not tell): a fixed window reports its end; an allowed sliding
/// window with hits in it reports the end of the next window.
fn window_left(params: &Params, decision: &Decision) -> Option<Duration> {
    let left = match params.algorithm {
        Algorithm::Gcra => return None,
        Algorithm::FixedWindow => decision.reset_us,
        Algorithm::SlidingWindow if decision.allowed && decision.reset_us > params.unit_us => {
            decision.reset_us - params.unit_us
        }
        Algorithm::SlidingWindow => return None,
    };
    (left > 0).then(|| Duration::from_micros(left))
}
