//! One limit's numbers: its `unit` and `unit_multiplier` (the window, bounded), its
//! `requests_per_unit`, `algorithm` and `burst`, and the fields that change how it counts:
//! `penalty`, `rollout` and `overdraft`.
//!
//! Part of `compile` (called by `limits` for each limit of a node): every problem is
//! pushed, none stops the walk, and a limit with any problem yields none. Pure.

use crate::algorithm::{gcra, Algorithm};

use super::super::model::{ChargeMode, Consistency};
use super::super::raw::RawRateLimit;
use super::super::rule::{self, Limit, Rollout, Unit};
use super::Builder;

/// Longest window (`unit × unit_multiplier`): 2^51 µs, about 71 years, GCRA's own bound on a
/// drain time. With `now` below 2^52 µs (the year 2112), `now` plus two windows (when a
/// sliding window's state expires) stays below 2^53, where the Lua scripts are exact.
const MAX_WINDOW_US: u64 = gcra::MAX_TOLERANCE_US;

impl Builder<'_> {
    /// unit / unit_multiplier / requests_per_unit / algorithm / burst of one limit (not
    /// `unlimited`); its `name` is the caller's.
    pub(super) fn numbers(&mut self, raw: &RawRateLimit, at: &str) -> Option<Limit> {
        let before = self.errors.len();
        let unit = raw.unit.as_deref().and_then(|unit| {
            let parsed = Unit::parse(unit);
            if parsed.is_none() {
                self.error(
                    format!("{at}.unit"),
                    format!(
                        "unknown unit {unit:?} (expected second, minute, hour, day, week, month or year)"
                    ),
                );
            }
            parsed
        });
        let algorithm = self.algorithm(raw, at);
        if let Some(algorithm) = algorithm {
            self.refuse_unserved(raw, at, algorithm);
        }
        if raw.unit.is_none() {
            self.error(format!("{at}.unit"), "missing unit (second, minute, hour, day, week, month or year)");
        }
        if raw.requests_per_unit.is_none() {
            self.error(
                format!("{at}.requests_per_unit"),
                "missing requests_per_unit (0 blocks everything; `unlimited: true` allows everything)",
            );
        }
        let multiplier = match raw.unit_multiplier {
            None => Some(1),
            Some(0) => {
                self.error(format!("{at}.unit_multiplier"), "unit_multiplier must be at least 1");
                None
            }
            Some(n) => Some(n),
        };
        let (Some(unit), Some(limit), Some(algorithm), Some(multiplier)) =
            (unit, raw.requests_per_unit, algorithm, multiplier)
        else {
            return None;
        };
        if unit.micros().checked_mul(multiplier).is_none_or(|window| window > MAX_WINDOW_US) {
            self.error(
                format!("{at}.unit_multiplier"),
                format!(
                    "unit_multiplier {multiplier} makes a window of {} longer than 71 years (2^51 µs, \
                     beyond what the algorithms count exactly); lower unit_multiplier",
                    unit.window(multiplier)
                ),
            );
            return None;
        }
        let mut params = rule::params_window(algorithm, u64::from(limit), unit, multiplier, raw.burst);
        params.penalty_us = self.penalty(raw, at)?;
        if algorithm == Algorithm::Gcra && !gcra::tolerance_fits(&params) {
            // Only an explicit burst can get here: the default (= limit) drains in one
            // window, and the window fits.
            self.error(
                format!("{at}.burst"),
                format!(
                    "burst {} at {limit} per {} takes more than 71 years to drain (burst × window / \
                     requests_per_unit past 2^51 µs, beyond what GCRA counts exactly); lower \
                     burst or raise requests_per_unit",
                    params.burst,
                    unit.window(multiplier),
                ),
            );
        }
        let rollout = self.rollout(raw, at)?;
        let response = self.response(raw, at)?;
        let overdraft = self.overdraft(raw, at)?;
        let calendar = self.calendar(raw, at, unit, multiplier, algorithm)?;
        let limit = Limit { name: None, params, unit, multiplier, rollout, response, overdraft, calendar };
        (self.errors.len() == before).then_some(limit)
    }

    /// `rollout`, the share of buckets enforced (every one when absent); `None` after an error.
    fn rollout(&mut self, raw: &RawRateLimit, at: &str) -> Option<Rollout> {
        match raw.rollout {
            None => Some(Rollout::FULL),
            Some(r) => {
                let parsed = Rollout::from_share(r);
                if parsed.is_none() {
                    self.error(
                        format!("{at}.rollout"),
                        format!(
                            "rollout {r} is outside (0, 1]: the share of buckets enforced, from \
                             0.000001 to 1 (1, the default, enforces every bucket)"
                        ),
                    );
                }
                parsed
            }
        }
    }

    /// `penalty` in µs (0 when absent): a whole number of seconds, minutes or hours (`30s`,
    /// `10m`, `1h`), from 1 s to a day; `None` after an error.
    fn penalty(&mut self, raw: &RawRateLimit, at: &str) -> Option<u64> {
        let Some(written) = raw.penalty.as_deref() else {
            return Some(0);
        };
        let seconds = rule::penalty_seconds(written);
        match seconds {
            Ok(_) if self.consistency == Consistency::Approximate => {
                self.error(
                    format!("{at}.penalty"),
                    "penalty in a domain with consistency: approximate: a penalty starts at the \
                     breach and must be seen by every later charge, which only exact mode's one \
                     script call per charge gives; remove penalty or set consistency: exact",
                );
                None
            }
            Ok(seconds) => Some(seconds * 1_000_000),
            Err(why) => {
                self.error(format!("{at}.penalty"), format!("penalty {written:?}: {why}"));
                None
            }
        }
    }

    /// `overdraft`; `None` after an error: not with a `penalty` (an overdraw past the limit
    /// is usage, not a breach), nor where charges are not exact (approximate mode) or stand
    /// or fall together (`charge: all_or_nothing`).
    fn overdraft(&mut self, raw: &RawRateLimit, at: &str) -> Option<bool> {
        if !raw.overdraft {
            return Some(false);
        }
        let why = if raw.penalty.is_some() {
            Some("overdraft with a penalty: usage recorded past the limit is no breach; remove one")
        } else if self.consistency == Consistency::Approximate {
            Some(
                "overdraft in a domain with consistency: approximate: usage that must always count \
                 needs exact mode's one script call per charge; set consistency: exact",
            )
        } else if self.charge == ChargeMode::AllOrNothing {
            Some(
                "overdraft in a domain with charge: all_or_nothing: usage that always counts cannot \
                 stand or fall with the rest of a request; use charge: per_descriptor",
            )
        } else {
            None
        };
        match why {
            Some(why) => {
                self.error(format!("{at}.overdraft"), why);
                None
            }
            None => Some(true),
        }
    }

    /// `algorithm` (default `--default-algorithm`, gcra with a `burst`) and the `burst` that
    /// only gcra accepts.
    pub(super) fn algorithm(&mut self, raw: &RawRateLimit, at: &str) -> Option<Algorithm> {
        let algorithm = match raw.algorithm.as_deref().map(str::to_ascii_lowercase).as_deref() {
            // `burst` is gcra's alone: with it, no algorithm means gcra whatever the default.
            None if raw.burst.is_some() => Some(Algorithm::Gcra),
            // Likewise `calendar` is fixed_window's alone.
            None if raw.calendar.is_some() => Some(Algorithm::FixedWindow),
            None => Some(self.default_algorithm),
            Some("gcra") => Some(Algorithm::Gcra),
            Some("sliding_window") => Some(Algorithm::SlidingWindow),
            Some("fixed_window") => Some(Algorithm::FixedWindow),
            Some(_) => {
                let name = raw.algorithm.as_deref().unwrap_or_default();
                self.error(
                    format!("{at}.algorithm"),
                    format!("unknown algorithm {name:?} (expected gcra, sliding_window or fixed_window)"),
                );
                None
            }
        };
        match (raw.burst, algorithm) {
            (Some(0), _) => self.error(format!("{at}.burst"), "burst must be greater than 0"),
            (Some(_), Some(other)) if other != Algorithm::Gcra => self.error(
                format!("{at}.burst"),
                format!("burst applies to gcra only (algorithm is {})", other.as_str()),
            ),
            _ => {}
        }
        algorithm
    }
}
