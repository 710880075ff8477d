//! Integer arithmetic that saturates at `MAX_VALUE` (2^53 − 1), as the Lua scripts do, so
//! that Rust and Redis give bit-for-bit the same answers. Used by the three algorithms.

/// The largest value the algorithms take in, store, compute with or return: 2^53 − 1.
///
/// Every input (limit, unit, burst, hits, `now`, stored state) is clamped to it and every
/// sum or product saturates at it. It is the largest integer a Lua number (a double) holds
/// exactly, so the Redis scripts, which clamp and saturate the same way, give bit-for-bit
/// the same answers on every input. As µs since the epoch it is the year 2255; as a count,
/// 9·10^15 — no real limit comes near it.
pub const MAX_VALUE: u64 = (1 << 53) - 1;

/// `x` clamped to [`MAX_VALUE`].
pub(crate) fn clamp(x: u64) -> u64 {
    x.min(MAX_VALUE)
}

/// `a + b`, saturating at [`MAX_VALUE`].
pub(crate) fn add(a: u64, b: u64) -> u64 {
    a.saturating_add(b).min(MAX_VALUE)
}

/// `floor(a * b / c)` computed exactly (no intermediate overflow), saturating at
/// [`MAX_VALUE`]; `c == 0` saturates.
pub(crate) fn mul_div(a: u64, b: u64, c: u64) -> u64 {
    match u128::from(a).saturating_mul(u128::from(b)).checked_div(u128::from(c)) {
        Some(q) => u64::try_from(q).map_or(MAX_VALUE, clamp),
        None => MAX_VALUE,
    }
}

/// `(floor(a * b / c), (a * b) % c)` computed exactly, the quotient saturating at
/// [`MAX_VALUE`] (the remainder is exact even then); `c == 0` gives `(MAX_VALUE, 0)`.
/// The Lua scripts' `muldiv` gives the same pair for `a, b, c <= MAX_VALUE`.
pub(crate) fn mul_div_rem(a: u64, b: u64, c: u64) -> (u64, u64) {
    let product = u128::from(a) * u128::from(b);
    match (product.checked_div(u128::from(c)), product.checked_rem(u128::from(c))) {
        (Some(q), Some(r)) => (u64::try_from(q).map_or(MAX_VALUE, clamp), u64::try_from(r).unwrap_or(0)),
        _ => (MAX_VALUE, 0),
    }
}

/// `ceil(a * b / c)`, exactly, saturating at [`MAX_VALUE`]; `c == 0` saturates.
pub(crate) fn mul_div_ceil(a: u64, b: u64, c: u64) -> u64 {
    let product = u128::from(a).saturating_mul(u128::from(b));
    match product.checked_div(u128::from(c)) {
        Some(q) => {
            let q = q + u128::from(product % u128::from(c) != 0);
            u64::try_from(q).map_or(MAX_VALUE, clamp)
        }
        None => MAX_VALUE,
    }
}
