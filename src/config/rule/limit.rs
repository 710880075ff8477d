//! The compiled limits of a rule: `Limit` (its numbers, window, rollout, denial response and
//! overdraft) and the helpers that build its `Params` from what a config writes (`params`,
//! `params_window`, `penalty_seconds`).
//!
//! Part of `rule`; imports only its siblings (`unit`, `rollout`, `response`), never
//! `rule.rs` itself, which re-exports it. Pure.

use std::sync::Arc;

use crate::algorithm::{Algorithm, Params};

use super::calendar::{Calendar, PeriodView};
use super::response::DenialResponse;
use super::rollout::Rollout;
use super::unit::Unit;

/// One limit of a rule: its numbers and what enters its bucket identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limit {
    /// `rate_limits[].name` (required and unique within the node there; part of the bucket
    /// identity). `None` for a `rate_limit`, whose name (`Rule::name`) is not.
    pub name: Option<String>,
    /// The numbers: `params.unit_us` is the whole window, `unit × multiplier`.
    pub params: Params,
    /// The unit as written.
    pub unit: Unit,
    /// `unit_multiplier` (1 when absent): the window is this many units. Part of the
    /// bucket identity when not 1.
    pub multiplier: u64,
    /// `rollout`: the share of the limit's buckets that is enforced (the others are decided
    /// and counted as in shadow mode). Not part of the bucket identity: raising it by a
    /// reload changes no bucket.
    pub rollout: Rollout,
    /// `response`: the body and headers of the 429 when this limit denies.
    pub response: Option<Arc<DenialResponse>>,
    /// `overdraft: true`: every consume is recorded, even past the limit (`Hits::Overdraw`).
    pub overdraft: bool,
    /// `calendar`: the fixed window's windows are this calendar's periods, not `unit`-long
    /// epoch-aligned windows. Part of the bucket identity (its own key tag and the zone).
    pub calendar: Option<Calendar>,
}

impl Limit {
    /// A limit of one unit, as `rate_limit` without `unit_multiplier` writes.
    pub fn single(params: Params, unit: Unit) -> Limit {
        Limit {
            name: None,
            params,
            unit,
            multiplier: 1,
            rollout: Rollout::FULL,
            response: None,
            overdraft: false,
            calendar: None,
        }
    }

    /// The numbers one charge of this limit at `now_us` (the instance's clock, µs since the
    /// epoch) is decided with: `params`, and for a calendar limit the period `now_us` is in.
    pub fn charge_params(&self, now_us: u64) -> Params {
        match &self.calendar {
            Some(calendar) => Params { period: Some(calendar.period_at(now_us)), ..self.params },
            None => self.params,
        }
    }

    /// A calendar limit's period at `now_us` and its next reset, for displays; `None` for
    /// any other limit.
    pub fn calendar_view(&self, now_us: u64) -> Option<PeriodView> {
        self.calendar.as_ref().map(|calendar| calendar.view(now_us))
    }

    /// The window in words for displays: `calendar month, Europe/Berlin` for a calendar
    /// limit, else as [`Limit::window`].
    pub fn period_text(&self) -> String {
        match &self.calendar {
            Some(calendar) => calendar.describe(),
            None => self.window(),
        }
    }

    /// The window in words: `second`, `5 minutes` (see [`Unit::window`]).
    pub fn window(&self) -> String {
        self.unit.window(self.multiplier)
    }

    /// `penalty` in seconds (0: none).
    pub fn penalty_seconds(&self) -> u64 {
        self.params.penalty_us / 1_000_000
    }

    /// `penalty` as an operator writes it (`90s`, `10m`, `2h`); `None` without one.
    pub fn penalty_text(&self) -> Option<String> {
        match self.penalty_seconds() {
            0 => None,
            s if s % 3_600 == 0 => Some(format!("{}h", s / 3_600)),
            s if s % 60 == 0 => Some(format!("{}m", s / 60)),
            s => Some(format!("{s}s")),
        }
    }

    /// The window in seconds (`unit × unit_multiplier`).
    pub fn window_seconds(&self) -> u64 {
        self.unit.seconds().saturating_mul(self.multiplier)
    }

    /// What GCRA calls capacity (`burst`) and the windows their limit: the requests a
    /// fresh bucket admits at once.
    pub fn capacity(&self) -> u64 {
        match self.params.algorithm {
            Algorithm::Gcra => self.params.burst,
            Algorithm::SlidingWindow | Algorithm::FixedWindow => self.params.limit,
        }
    }
}

/// The longest `penalty`: a day.
pub const MAX_PENALTY_SECONDS: u64 = 86_400;

/// A `penalty` as written (`30s`, `10m`, `1h`: a whole number and one of `s`, `m`, `h`) in
/// seconds, from 1 to [`MAX_PENALTY_SECONDS`]; else why not, in words for the operator.
pub fn penalty_seconds(written: &str) -> Result<u64, String> {
    let expected = "expected a whole number of seconds, minutes or hours, such as 30s, 10m or 1h";
    let split = written.len().saturating_sub(1);
    let (number, suffix) = (written.get(..split).unwrap_or(""), written.get(split..).unwrap_or(""));
    let scale = match suffix {
        "s" => 1,
        "m" => 60,
        "h" => 3_600,
        _ => return Err(expected.to_owned()),
    };
    if number.is_empty() || !number.bytes().all(|b| b.is_ascii_digit()) {
        return Err(expected.to_owned());
    }
    match number.parse::<u64>().ok().and_then(|n| n.checked_mul(scale)) {
        Some(0) => Err("must be at least 1s (leave penalty out for none)".to_owned()),
        Some(seconds) if seconds <= MAX_PENALTY_SECONDS => Ok(seconds),
        _ => Err("longer than a day, the longest penalty (24h)".to_owned()),
    }
}

/// Convenience for building limit parameters.
pub fn params(algorithm: Algorithm, limit: u64, unit: Unit, burst: Option<u64>) -> Params {
    params_window(algorithm, limit, unit, 1, burst)
}

/// Limit parameters for a window of `multiplier` units (`unit_multiplier`).
pub fn params_window(
    algorithm: Algorithm,
    limit: u64,
    unit: Unit,
    multiplier: u64,
    burst: Option<u64>,
) -> Params {
    Params {
        algorithm,
        limit,
        unit_us: unit.micros().saturating_mul(multiplier),
        burst: burst.unwrap_or(limit),
        penalty_us: 0,
        period: None,
    }
}
