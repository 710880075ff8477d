//! How one limit's headroom is shared out among the Envoys holding its bucket over RLQS
//! (`envoy.service.rate_limit_quota.v3`): a token bucket, or DENY_ALL, for every holder.
//!
//! Owns the arithmetic only: no I/O, no clock, no protobuf. The caller reads the store's
//! headroom for the bucket, knows who holds it, and pushes every grant this returns (the
//! smaller ones included: a newcomer's share is taken from the others at once).
//!
//! ## Inputs
//! - The limit, [`Params`]: GCRA admits `ρ = limit / unit` with a capacity of `burst`;
//!   the windows admit `limit` per window of `unit`.
//! - [`Headroom`] `H`: GCRA, the tokens the store would admit at once now (burst
//!   included); windows, `limit − count` of the current window and the µs left in it.
//! - The [`Holder`]s: each one's demand `d` (`allowed + denied` of its latest report, capped
//!   at [`DEMAND_CAP`]), whether it is a newcomer (its only report is the immediate one,
//!   `time_elapsed` 0) and its outstanding claim `c` (the `max_tokens` last granted to it).
//!   `time_elapsed` is never an input: Envoy truncates it to whole seconds and sends 0 on
//!   an immediate report, so demand is a count per report period, never a rate.
//!
//! ## Weights
//! `d'_e = max(d_e, 1)`; a newcomer's `d'` is the median of the others' `d'` (the lower
//! median; 1 when no holder has reported yet). `W = Σ d'`, weight `w_e = d'_e / W`. An idle
//! Envoy keeps weight `1 / W`: a floor, never more than its weight from a busy one.
//!
//! ## Capacity (`max_tokens`)
//! Pool `P = H` (GCRA: `min(H, burst)`). Each target is `t_e = ⌊P·d'_e / W⌋`, so
//! `Σ t_e ≤ P` before anything else. The rounding leftover `P − Σ t_e` (< number of
//! holders) gives 1 token to each holder whose target is 0, heaviest first (then in
//! input order), while it lasts: **a holder keeps at least 1 token only when `H` has a
//! token nobody else's floor-rounded share took**. A holder whose claim `c` is at most its
//! target and at least 7/8 of it keeps `c` (an unchanged grant keeps Envoy's running
//! bucket; this only lowers the sum). `max_tokens` is then clamped to `u32::MAX` (lowering
//! again). A holder left with 0 tokens gets [`Grant::DenyAll`]. Hence
//! `Σ max_tokens ≤ H`, rounding and clamping included (`never_over_grants`).
//!
//! ## Refill (`tokens_per_fill` per `fill_interval`)
//! Envoy 1.40 reads `fill_interval` in whole seconds (a sub-second interval divides by 0:
//! no limit), so the interval is always a whole number of seconds ≥ 1.
//! - GCRA: `T = max(1, ⌊unit / 1 s⌋)` and `F = ⌊ρ·T·d'/W⌋`, each floor taken on an exact
//!   integer, so `F/T ≤ w·ρ` and `Σ F/T ≤ ρ`. When `F` would be 0 the holder gets
//!   `F = 1` per `T = ⌈1 / (w·ρ)⌉` s (still `≤ w·ρ`, never sub-second). `F` is clamped to
//!   `u32::MAX` (only lowers the rate); a `T` past `u32::MAX` s (a share under one token
//!   per 136 years) cannot be sent without raising the rate, so that holder gets DENY_ALL.
//! - Windows: `F = 1` per `T = max(1, ⌈left⌉)` s, `left` the time to the window's end.
//!   Envoy's bucket accrues continuously from whole tokens, so before the window ends it
//!   accrues less than one token: the fill adds nothing in the window, and the caller tops
//!   the holders up at the edge. The bound still counts 1 per holder per window, for the
//!   truncation Envoy does when it resizes a bucket (it keeps the fill ratio). A `left`
//!   past `u32::MAX` s (never with units up to a year) gives DENY_ALL, as for GCRA.
//!
//! ## The bound ([`bound`])
//! With `N` holders, per window of a window limit (GCRA: over any interval `t`, the limit
//! being `burst + ρ·t`), the fleet admits at most
//!
//! ```text
//! limit + N   (each Envoy's first request of the bucket, decided by no_assignment_behavior
//!              before any assignment; requests racing the bucket's creation included)
//!       + N   (windows only: one token of refill per holder per window, see above)
//! ```
//!
//! The capacity floor costs nothing (it comes out of `H`), nor does the rate
//! (`Σ F/T ≤ ρ`). Outside this function, and to be added by whoever states the bound: `N`
//! more per re-creation of the bucket on an Envoy (abandon, restart), and the holders'
//! outstanding claims when RLS traffic charges the same bucket.
//!
//! All arithmetic is integer (u128 where products need it) and saturating: huge demands,
//! limits at [`MAX_VALUE`] and thousands of holders never panic.

use super::bucket::{Algorithm, Params};
use super::saturating::{clamp, MAX_VALUE};

/// Demand above this per report counts as this: 2^32 requests in one 5 s report is far past
/// any real Envoy, and the cap keeps every product of the weights inside `u128`.
pub const DEMAND_CAP: u64 = 1 << 32;

const MICROS_PER_SECOND: u128 = 1_000_000;

/// The store's room for the bucket right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Headroom {
    /// GCRA: tokens the store would admit at once now, burst included.
    Gcra { tokens: u64 },
    /// Fixed or sliding window: `limit − count` of the current window (for a sliding
    /// window, of the estimate), and the µs until the window ends (the caller passes the
    /// whole unit when it cannot tell: never less than the time left, or the refill is
    /// faster than one token per window).
    Window { remaining: u64, left_us: u64 },
}

impl Headroom {
    fn tokens(self) -> u64 {
        match self {
            Headroom::Gcra { tokens } => tokens,
            Headroom::Window { remaining, .. } => remaining,
        }
    }
}

/// One Envoy holding the bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Holder {
    /// `allowed + denied` of its latest report (saturating; capped at [`DEMAND_CAP`]).
    pub demand: u64,
    /// Its only report so far is the immediate one (`time_elapsed` 0): its demand is
    /// unknown and taken as the median of the others'.
    pub newcomer: bool,
    /// `max_tokens` last granted to it and not yet expired; 0 if none.
    pub claim: u64,
}

/// Envoy's `envoy.type.v3.TokenBucket`, in the units Envoy 1.40 honours.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenBucket {
    /// Capacity, and the tokens a fresh bucket starts with. Always ≥ 1.
    pub max_tokens: u32,
    /// Tokens added per interval. Always ≥ 1 (the proto requires `> 0`).
    pub tokens_per_fill: u32,
    /// The interval in whole seconds, always ≥ 1 (Envoy truncates to seconds).
    pub fill_interval_s: u32,
}

/// What one holder is granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grant {
    /// Admit from this bucket.
    TokenBucket(TokenBucket),
    /// Nothing is left for this holder now: deny everything until the next grant.
    DenyAll,
}

impl Grant {
    /// The tokens this grant lets the holder admit at once (0 for DENY_ALL).
    pub fn max_tokens(self) -> u64 {
        match self {
            Grant::TokenBucket(b) => u64::from(b.max_tokens),
            Grant::DenyAll => 0,
        }
    }
}

/// The grant of every holder, in the order of `holders` (see the module doc for the math
/// and its guarantees). A limit of 0, a headroom of 0 or no holders give DENY_ALL for all
/// (or an empty vector).
pub fn shares(params: &Params, headroom: Headroom, holders: &[Holder]) -> Vec<Grant> {
    let weights = weights(holders);
    let total: u128 = weights.iter().map(|&w| u128::from(w)).sum();
    let pool = match (params.algorithm, headroom) {
        (Algorithm::Gcra, h) => clamp(h.tokens()).min(clamp(params.burst)),
        (_, h) => clamp(h.tokens()),
    };
    if params.limit == 0 || pool == 0 || total == 0 {
        return vec![Grant::DenyAll; holders.len()];
    }
    let tokens = capacities(pool, &weights, total, holders);
    tokens
        .iter()
        .zip(&weights)
        .map(|(&max_tokens, &weight)| {
            let max_tokens = u32::try_from(max_tokens).unwrap_or(u32::MAX);
            match refill(params, headroom, weight, total) {
                Some((tokens_per_fill, fill_interval_s)) if max_tokens > 0 => {
                    Grant::TokenBucket(TokenBucket { max_tokens, tokens_per_fill, fill_interval_s })
                }
                _ => Grant::DenyAll,
            }
        })
        .collect()
}

/// The extra admissions the scheme allows beyond the limit, per window (GCRA: per
/// interval, beyond `burst + ρ·t`), with `holders` Envoys holding the bucket: `N` for
/// GCRA, `2N` for the windows (see the module doc). Saturates at [`MAX_VALUE`].
pub fn bound(params: &Params, holders: u64) -> u64 {
    let per_holder = match params.algorithm {
        Algorithm::Gcra => 1,
        Algorithm::SlidingWindow | Algorithm::FixedWindow => 2,
    };
    clamp(holders.saturating_mul(per_holder))
}

/// `d'` of every holder: `max(d, 1)` capped, newcomers at the others' lower median.
fn weights(holders: &[Holder]) -> Vec<u64> {
    let mut reported: Vec<u64> =
        holders.iter().filter(|h| !h.newcomer).map(|h| h.demand.clamp(1, DEMAND_CAP)).collect();
    reported.sort_unstable();
    let median = match reported.len() {
        0 => 1,
        n => reported[(n - 1) / 2],
    };
    holders.iter().map(|h| if h.newcomer { median } else { h.demand.clamp(1, DEMAND_CAP) }).collect()
}

/// `⌊a·b / c⌋` for `b ≤ c`, exactly and without overflow while `a < 2^127` and
/// `b, c < 2^64`: `(a / c)·b ≤ a` and `(a % c)·b < 2^128`.
fn scale(a: u128, b: u128, c: u128) -> u128 {
    match c {
        0 => 0,
        c => (a / c) * b + (a % c) * b / c,
    }
}

/// `max_tokens` of every holder, before the u32 clamp; the sum is at most `pool`.
fn capacities(pool: u64, weights: &[u64], total: u128, holders: &[Holder]) -> Vec<u64> {
    let mut tokens: Vec<u64> = weights
        .iter()
        .map(|&w| u64::try_from(scale(u128::from(pool), u128::from(w), total)).unwrap_or(MAX_VALUE))
        .collect();
    let granted: u64 = tokens.iter().fold(0, |sum, &t| sum.saturating_add(t));
    let mut leftover = pool.saturating_sub(granted);
    // Floors from the rounding leftover only, heaviest first, so no floor is paid for by
    // another holder's share.
    let mut starved: Vec<usize> = (0..tokens.len()).filter(|&i| tokens[i] == 0).collect();
    starved.sort_by_key(|&i| std::cmp::Reverse(weights[i]));
    for i in starved {
        if leftover == 0 {
            break;
        }
        tokens[i] = 1;
        leftover -= 1;
    }
    // A claim just under the target is kept as it is: Envoy then keeps its running bucket.
    for (t, h) in tokens.iter_mut().zip(holders) {
        if h.claim > 0 && h.claim <= *t && h.claim >= *t - *t / 8 {
            *t = h.claim;
        }
    }
    tokens
}

/// `(tokens_per_fill, fill_interval_s)` of a holder of weight `weight / total`; `None`
/// when the interval would not fit a u32 of seconds (shortening it would raise the rate).
fn refill(params: &Params, headroom: Headroom, weight: u64, total: u128) -> Option<(u32, u32)> {
    match (params.algorithm, headroom) {
        (Algorithm::Gcra, _) => gcra_refill(params, weight, total),
        (_, h) => {
            let left_us = match h {
                Headroom::Window { left_us, .. } => left_us,
                Headroom::Gcra { .. } => params.unit_us,
            };
            let seconds = u128::from(left_us).div_ceil(MICROS_PER_SECOND).max(1);
            Some((1, u32::try_from(seconds).ok()?))
        }
    }
}

/// GCRA: `F` per `T` s with `F/T ≤ ρ·weight/total`, `F, T ≥ 1`.
fn gcra_refill(params: &Params, weight: u64, total: u128) -> Option<(u32, u32)> {
    let limit = u128::from(clamp(params.limit));
    let unit_us = u128::from(clamp(params.unit_us).max(1));
    let interval = (unit_us / MICROS_PER_SECOND).clamp(1, u128::from(u32::MAX));
    // ρ·T in tokens, floored: ≤ 2^53 · 2^32 · 2^20, inside u128.
    let per_interval = limit * interval * MICROS_PER_SECOND / unit_us;
    let fill = scale(per_interval, u128::from(weight), total);
    if fill > 0 {
        let interval = u32::try_from(interval).unwrap_or(u32::MAX);
        return Some((u32::try_from(fill).unwrap_or(u32::MAX), interval));
    }
    // One token per ⌈1 / (w·ρ)⌉ s = ⌈total·unit / (limit·weight·1 s)⌉; the product below
    // stays under 2^128 because ρ·weight/total < 1 token per `interval` here.
    let numerator = total.saturating_mul(unit_us);
    let denominator = limit.saturating_mul(u128::from(weight)).saturating_mul(MICROS_PER_SECOND);
    let seconds = numerator.div_ceil(denominator.max(1)).max(1);
    u32::try_from(seconds).ok().map(|seconds| (1, seconds))
}

#[cfg(test)]
mod tests;
