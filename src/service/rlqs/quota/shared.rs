//! One holder's grant from the store's answers and the ledger: pure.

use std::time::Duration;

use crate::algorithm::share::{self, Grant, Headroom, Holder, TokenBucket};
use crate::algorithm::{Algorithm, Decision};
use crate::store::rlqs::{Holders, Holding};
use crate::store::Charge;

use super::held::{Held, Shrink};

/// A holder's grant over every limit of its rule, with when to look again and which other
/// holders must shrink.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shared {
    pub grant: Grant,
    pub wake: Option<Duration>,
    pub shrink: Vec<Shrink>,
}

/// Shares each limit's headroom (its decision after the charge) among the live holders,
/// this one first; caps this holder's capacity at the headroom less every other holder's
/// claim; takes the tightest limit. Pure.
pub fn shared(charges: &[Charge], decisions: &[Decision], held: &Held, holders: &Holders) -> Shared {
    let me = Holder { demand: held.demand, newcomer: held.newcomer, claim: holders.claim };
    let live: Vec<&Holding> = holders.others.iter().filter(|h| h.live).collect();
    let mut all = Vec::with_capacity(live.len() + 1);
    all.push(me);
    all.extend(live.iter().map(|h| Holder { demand: h.demand, newcomer: h.newcomer, claim: h.claim }));
    let claimed: u64 = holders.others.iter().fold(0, |sum, h| sum.saturating_add(h.claim));
    let mut tightest: Option<TokenBucket> = None;
    let mut denied = false;
    let mut wake: Option<Duration> = None;
    let mut shrink = Vec::new();
    for (charge, decision) in charges.iter().zip(decisions) {
        let params = &charge.params;
        let window = params.algorithm != Algorithm::Gcra;
        let headroom = if window {
            // A window with no count answers `reset_us` 0 (nothing to wait for), not the
            // time left in it: the refill is then spread over a whole unit, never less
            // (a refill of 1 token per second would add a token per second to every
            // holder for the rest of the window).
            let left_us = if decision.reset_us == 0 { params.unit_us } else { decision.reset_us };
            Headroom::Window { remaining: decision.remaining, left_us }
        } else {
            Headroom::Gcra { tokens: decision.remaining }
        };
        let grants = share::shares(params, headroom, &all);
        for (grant, other) in grants.iter().skip(1).zip(&live) {
            if grant.max_tokens() < other.claim && !shrink.iter().any(|s: &Shrink| s.holder == other.holder) {
                shrink.push(Shrink { holder: other.holder.clone(), instance: other.instance.clone() });
            }
        }
        // Windows: look again just past the edge (a fresh bucket for the new window), when
        // the window has a count (a window with none is full: its `reset_us` is 0, and
        // looking again then would loop). GCRA: after a denial, when one token is back.
        let limit_wake = if window {
            (decision.reset_us > 0).then(|| Duration::from_micros(decision.reset_us.saturating_add(EDGE_US)))
        } else if decision.remaining == 0 {
            let per_token = params.unit_us / params.limit.max(1);
            Some(Duration::from_micros(per_token.clamp(1_000_000, 5_000_000)))
        } else {
            None
        };
        wake = match (wake, limit_wake) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let cap = decision.remaining.saturating_sub(claimed);
        match grants.first().copied().unwrap_or(Grant::DenyAll) {
            Grant::DenyAll => denied = true,
            Grant::TokenBucket(mut bucket) => {
                bucket.max_tokens = bucket.max_tokens.min(u32::try_from(cap).unwrap_or(u32::MAX));
                if bucket.max_tokens == 0 {
                    denied = true;
                    continue;
                }
                tightest = Some(match tightest {
                    None => bucket,
                    Some(t) => tighter(t, bucket),
                });
            }
        }
    }
    let grant = match tightest {
        Some(bucket) if !denied => Grant::TokenBucket(bucket),
        _ => Grant::DenyAll,
    };
    // Nothing now because others hold it, and they are being asked to shrink: look again
    // once they have (a push is applied within the inbox's poll), not at the next report.
    if grant == Grant::DenyAll && !shrink.is_empty() {
        wake = Some(wake.map_or(AFTER_SHRINK, |w| w.min(AFTER_SHRINK)));
    }
    Shared { grant, wake, shrink }
}

/// `grant` with at most `tokens` of capacity (none: DENY_ALL).
pub fn shrunk(grant: Grant, tokens: u64) -> Grant {
    match grant {
        Grant::TokenBucket(mut bucket) if tokens > 0 => {
            bucket.max_tokens = bucket.max_tokens.min(u32::try_from(tokens).unwrap_or(u32::MAX));
            Grant::TokenBucket(bucket)
        }
        _ => Grant::DenyAll,
    }
}

/// How far past a window's edge a holder looks again (its count is then the new window's).
const EDGE_US: u64 = 50_000;

/// How soon a holder left nothing by others' claims looks again, once they were asked to
/// shrink.
const AFTER_SHRINK: Duration = Duration::from_secs(1);

/// The smaller capacity and the slower refill of two limits' buckets.
fn tighter(a: TokenBucket, b: TokenBucket) -> TokenBucket {
    // a.F / a.T ≤ b.F / b.T  ⇔  a.F · b.T ≤ b.F · a.T
    let a_slower = u64::from(a.tokens_per_fill) * u64::from(b.fill_interval_s)
        <= u64::from(b.tokens_per_fill) * u64::from(a.fill_interval_s);
    let (tokens_per_fill, fill_interval_s) = if a_slower {
        (a.tokens_per_fill, a.fill_interval_s)
    } else {
        (b.tokens_per_fill, b.fill_interval_s)
    };
    TokenBucket { max_tokens: a.max_tokens.min(b.max_tokens), tokens_per_fill, fill_interval_s }
}

#[cfg(test)]
mod tests;
