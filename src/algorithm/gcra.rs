//! GCRA (generic cell rate algorithm), the default: the theoretical arrival time (TAT) is
//! the whole state; smooth admission at `limit / unit` with `burst` requests of slack.
//!
//! Owns the math only: no I/O, no clock (`now` is passed in, µs since the epoch).
//! `src/store/lua/gcra.lua` is the same function for Redis; `tests/differential.rs` keeps
//! the two equal. All values are clamped to, and saturate at,
//! [`MAX_VALUE`](super::MAX_VALUE) (2^53 − 1), exactly as the script does.
//!
//! `emission = unit / limit`, `tolerance = emission * burst`. A request of `n` hits moves
//! the TAT to `max(tat, now) + emission * n` and is admitted iff that is at most
//! `now + tolerance`. Hence at most `burst + floor(t * limit / unit)` hits are admitted in
//! any interval of length `t`: `burst` at once on a full bucket, then one per emission
//! interval. `burst == 0` admits nothing; a request with `n > burst` never passes.
//!
//! Exact at every rate: the emission interval is rarely a whole number of µs (300,000/s
//! is 3.33… µs, 2,000,000/s is 0.5 µs) and rounding it would change the rate. A finer
//! time unit is not available (the epoch in µs is already ~2^51, and the scripts are exact
//! only to 2^53), so every instant and duration is a `Span`: whole µs plus a remainder
//! in `1 / limit` µs. `n` emissions are `n * unit / limit` µs, split by `limit` into a
//! quotient and a remainder; nothing is ever rounded except the reported `reset_us`
//! (up, so that retrying then passes) and the expiry (up, so that state only expires once
//! it carries no information).
//!
//! An admitted charge leaves the TAT at most `tolerance` ahead of now, an overdraw at most
//! `tolerance + unit` (its debt is capped at one unit of the limit: `limit` emissions are
//! exactly `unit`), so a 1,000/hour budget with the default burst is full again within 2 h
//! of any report, however large.
//! [`MAX_TOLERANCE_US`] keeps `now + 2 * tolerance` below 2^53 until 2112, so no sum that
//! can admit ever saturates (one past the tolerance may, and is denied all the same). The
//! config rejects a rule past it ([`tolerance_fits`]).

use super::bucket::{Decision, Hits, Outcome, Params, State, Write};
use super::saturating::{add, clamp, mul_div_rem, MAX_VALUE};

/// The longest a GCRA bucket may take to drain a full burst (`burst * unit / limit`):
/// 2^51 µs, about 71 years. With `now` below 2^52 µs (the year 2112), `now` plus twice this
/// stays below 2^53, the largest integer the Lua scripts hold exactly.
pub const MAX_TOLERANCE_US: u64 = 1 << 51;

/// Whether `p` (a GCRA limit) keeps its arithmetic exact: `burst * unit / limit` is at most
/// [`MAX_TOLERANCE_US`]. `limit == 0` never computes a tolerance and always fits.
pub fn tolerance_fits(p: &Params) -> bool {
    if p.limit == 0 {
        return true;
    }
    let (us, rem) = mul_div_rem(clamp(p.burst), clamp(p.unit_us).max(1), clamp(p.limit));
    us < MAX_TOLERANCE_US || (us == MAX_TOLERANCE_US && rem == 0)
}

/// Applies GCRA to the stored TAT `(µs, remainder)` (`None` = never seen or expired).
///
/// Consume: allowed → `Put` the new TAT, expiring at the TAT rounded up to the µs
/// (`Delete` if it is not after `now`, which only a zero-hit consume can do), `remaining` =
/// hits still admissible now, `reset_us` = time until the bucket is full again, rounded up;
/// denied → `Keep`, `reset_us` = time until the same request passes, rounded up.
/// Peek: allowed iff one hit would pass; `remaining` and `reset_us` (time until full)
/// describe the bucket; a denied peek's reset is at least the time until one hit passes
/// (only `burst == 0` makes that longer than the time until full).
/// Refund: moves the TAT back by `n` emissions, never before `now`; always allowed;
/// `Delete` once the bucket is full.
/// Overdraw: as a consume when it fits; otherwise stored all the same, the TAT capped at
/// `now + tolerance + unit` (also one stored further ahead, under another limit or before
/// the cap), and denied with the time until one hit fits again.
/// `remaining` is `burst - ceil(ahead * limit / unit)` where `ahead = tat - now`: hits
/// admissible at once, exactly.
/// A stored remainder is in units of `1 / limit` µs; if the limit changed since (a reload)
/// it is clamped below the new limit: the TAT moves by less than 1 µs.
/// `limit == 0`: consumes and peeks are denied with `reset_us = unit_us`; a refund is
/// allowed with nothing to give back (`remaining` and `reset_us` 0, `Keep`).
pub fn apply(tat: Option<(u64, u64)>, now: u64, p: &Params, hits: Hits) -> Outcome {
    let now = clamp(now);
    let unit = clamp(p.unit_us).max(1);
    let limit = clamp(p.limit);
    if limit == 0 {
        return blocked(unit, hits);
    }
    let bucket = Bucket::at(tat, now, limit, unit, clamp(p.burst));
    match hits {
        Hits::Consume(n) => bucket.consume(clamp(n)),
        Hits::Peek => bucket.peek(),
        Hits::Refund(n) => bucket.refund(clamp(n)),
        Hits::Overdraw(n) => bucket.overdraw(clamp(n)),
    }
}

/// `(fresh, now)`: hits a fresh bucket would admit at `now`, and hits the stored TAT
/// `(µs, remainder)` admits. For [`standing`](super::standing); `limit == 0` admits nothing
/// either way.
pub(super) fn admissible(tat: (u64, u64), now: u64, p: &Params) -> (u64, u64) {
    let now = clamp(now);
    let limit = clamp(p.limit);
    if limit == 0 {
        return (0, 0);
    }
    let bucket = Bucket::at(Some(tat), now, limit, clamp(p.unit_us).max(1), clamp(p.burst));
    (bucket.allowed_at(Span::ZERO).remaining, bucket.allowed_at(bucket.ahead).remaining)
}

/// `limit == 0`: nothing is ever admitted, and nothing is stored that could be refunded.
fn blocked(unit: u64, hits: Hits) -> Outcome {
    let decision = match hits {
        Hits::Refund(_) => Decision { allowed: true, remaining: 0, reset_us: 0 },
        Hits::Consume(_) | Hits::Peek | Hits::Overdraw(_) => denied(unit).decision,
    };
    Outcome { decision, write: Write::Keep }
}

fn denied(reset_us: u64) -> Outcome {
    Outcome { decision: Decision { allowed: false, remaining: 0, reset_us }, write: Write::Keep }
}

/// A duration of `us + frac / limit` µs, `frac < limit` (the bucket's limit). The derived
/// order is the order of the durations: `(us, frac)` compared lexicographically.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Span {
    us: u64,
    frac: u64,
}

impl Span {
    const ZERO: Span = Span { us: 0, frac: 0 };

    /// Rounded up to whole µs.
    fn ceil_us(self) -> u64 {
        add(self.us, u64::from(self.frac > 0))
    }
}

/// One bucket at one instant; every field <= MAX_VALUE, `limit >= 1`.
struct Bucket {
    now: u64,
    limit: u64,
    unit: u64,
    burst: u64,
    /// `burst` emissions: how far ahead of `now` an admitted charge may move the TAT.
    tolerance: Span,
    /// `tolerance + unit`: how far ahead of `now` an overdraw may move the TAT (a debt of
    /// one unit of the limit).
    ceiling: Span,
    /// `max(tat, now) - now`.
    ahead: Span,
}

impl Bucket {
    /// The bucket of the stored TAT `(µs, remainder)` at `now`; every argument <= MAX_VALUE,
    /// `limit, unit >= 1`. A remainder stored under another limit (before a reload) is
    /// clamped below this one (< 1 µs). A TAT past the ceiling is read as it is: clamping
    /// it on read would hold the bucket at the ceiling for as long as that TAT lasts.
    fn at(tat: Option<(u64, u64)>, now: u64, limit: u64, unit: u64, burst: u64) -> Bucket {
        let zero = Span::ZERO;
        let mut bucket = Bucket { now, limit, unit, burst, tolerance: zero, ceiling: zero, ahead: zero };
        bucket.tolerance = bucket.span(burst);
        // `limit` emissions are exactly `unit` µs.
        bucket.ceiling = bucket.plus(bucket.tolerance, Span { us: unit, frac: 0 });
        if let Some((us, rem)) = tat.map(|(us, rem)| (clamp(us), clamp(rem).min(limit - 1))) {
            if us >= now {
                bucket.ahead = Span { us: us - now, frac: rem };
            }
        }
        bucket
    }

    /// `n` emissions: `n * unit / limit` µs, exactly.
    fn span(&self, n: u64) -> Span {
        let (us, frac) = mul_div_rem(n, self.unit, self.limit);
        Span { us, frac }
    }

    /// `a + b`, the µs saturating. `a.frac >= limit - b.frac` is the carry test without
    /// forming a sum that could pass 2^53.
    fn plus(&self, a: Span, b: Span) -> Span {
        if a.frac >= self.limit - b.frac {
            Span { us: add(add(a.us, b.us), 1), frac: a.frac - (self.limit - b.frac) }
        } else {
            Span { us: add(a.us, b.us), frac: a.frac + b.frac }
        }
    }

    /// `a - b` for `a >= b`.
    fn minus(&self, a: Span, b: Span) -> Span {
        if a.frac >= b.frac {
            Span { us: a.us - b.us, frac: a.frac - b.frac }
        } else {
            Span { us: a.us - b.us - 1, frac: a.frac + (self.limit - b.frac) }
        }
    }

    /// `ceil(d * limit / unit)`: the emissions `d` covers, counting a started one.
    fn hits_in(&self, d: Span) -> u64 {
        let (q, r) = mul_div_rem(d.us, self.limit, self.unit);
        let (fq, fr) = (d.frac / self.unit, d.frac % self.unit);
        // ceil((r + fr) / unit) with r, fr < unit, without forming r + fr.
        let carry = if r > self.unit - fr { 2 } else { u64::from(r > 0 || fr > 0) };
        add(add(q, fq), carry)
    }

    /// An allowed answer for a bucket `ahead` of now.
    fn allowed_at(&self, ahead: Span) -> Decision {
        let remaining = self.burst.saturating_sub(self.hits_in(ahead));
        Decision { allowed: true, remaining, reset_us: ahead.ceil_us() }
    }

    /// Stores the TAT `now + ahead`, or drops the state when it carries no information.
    fn store(&self, ahead: Span) -> Outcome {
        let write = if ahead == Span::ZERO {
            Write::Delete
        } else {
            let tat = add(self.now, ahead.us);
            // An instant that saturates is MAX_VALUE exactly (time stands still there).
            let rem = if tat == MAX_VALUE { 0 } else { ahead.frac };
            Write::Put { state: State::Gcra { tat, rem, until: 0 }, expires_at: tat + u64::from(rem > 0) }
        };
        Outcome { decision: self.allowed_at(ahead), write }
    }

    fn consume(&self, n: u64) -> Outcome {
        let new = self.plus(self.ahead, self.span(n));
        if new <= self.tolerance {
            self.store(new)
        } else {
            denied(self.minus(new, self.tolerance).ceil_us())
        }
    }

    /// As `consume`, but a charge that does not fit is stored all the same (the TAT passes
    /// the tolerance), up to the ceiling — a debt of at most one unit of the limit, so that
    /// no report, however large, keeps the bucket more than `tolerance + unit` from full:
    /// denied, with the time until one hit fits again.
    fn overdraw(&self, n: u64) -> Outcome {
        let new = self.plus(self.ahead, self.span(n)).min(self.ceiling);
        let stored = self.store(new);
        if new <= self.tolerance {
            return stored;
        }
        // One more hit passes once `new + emission - tolerance` has gone by. Only a TAT
        // saturated at MAX_VALUE can make that sum not pass the tolerance: then 1 µs.
        let next = self.plus(new, self.span(1));
        let reset_us = if next > self.tolerance { self.minus(next, self.tolerance).ceil_us() } else { 1 };
        Outcome { decision: Decision { allowed: false, remaining: 0, reset_us }, write: stored.write }
    }

    fn peek(&self) -> Outcome {
        let one = self.span(1);
        let next = self.plus(self.ahead, one);
        if next <= self.tolerance {
            Outcome { decision: self.allowed_at(self.ahead), write: Write::Keep }
        } else if one <= self.tolerance {
            // One hit passes sooner than the bucket is full (ahead > 0 here): report full.
            denied(self.ahead.ceil_us())
        } else {
            // burst == 0 admits nothing (not even on an empty bucket): report `ahead + emission`.
            denied(self.minus(next, self.tolerance).ceil_us())
        }
    }

    fn refund(&self, n: u64) -> Outcome {
        let back = self.span(n);
        let ahead = if self.ahead <= back { Span::ZERO } else { self.minus(self.ahead, back) };
        self.store(ahead)
    }
}

#[cfg(test)]
mod tests;
