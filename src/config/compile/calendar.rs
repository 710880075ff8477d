//! A limit's `calendar`: its zone, and what it may go with — a fixed window (the default
//! when `algorithm` is absent) of one day, week, month or year, in a domain with
//! `consistency: exact`, without a `penalty`.
//!
//! Part of `compile` (called by `numbers` for each limit): every problem is pushed, none
//! stops the walk. Pure.

use crate::algorithm::Algorithm;

use super::super::model::Consistency;
use super::super::raw::RawRateLimit;
use super::super::rule::{Calendar, CalendarError, Unit};
use super::Builder;

impl Builder<'_> {
    /// `calendar`: `Some(None)` when absent, `Some(Some(_))` when valid, `None` after an
    /// error.
    pub(super) fn calendar(
        &mut self,
        raw: &RawRateLimit,
        at: &str,
        unit: Unit,
        multiplier: u64,
        algorithm: Algorithm,
    ) -> Option<Option<Calendar>> {
        let Some(written) = &raw.calendar else {
            return Some(None);
        };
        let before = self.errors.len();
        if algorithm != Algorithm::FixedWindow {
            self.error(
                format!("{at}.calendar"),
                format!(
                    "calendar with algorithm {}: a calendar period is a fixed window's (leave \
                     algorithm out, or set algorithm: fixed_window)",
                    algorithm.as_str()
                ),
            );
        }
        if multiplier != 1 {
            self.error(
                format!("{at}.unit_multiplier"),
                format!(
                    "unit_multiplier {multiplier} with calendar: a calendar period is one day, week, \
                     month or year (remove unit_multiplier)"
                ),
            );
        }
        if raw.penalty.is_some() {
            self.error(
                format!("{at}.penalty"),
                "penalty with calendar: a penalty's end is reckoned in epoch windows, not calendar \
                 periods; remove one",
            );
        }
        if self.consistency == Consistency::Approximate {
            self.error(
                format!("{at}.calendar"),
                "calendar in a domain with consistency: approximate: approximate mode counts epoch \
                 windows locally; set consistency: exact",
            );
        }
        let calendar = match Calendar::new(written.time_zone.as_deref(), unit) {
            Ok(calendar) => Some(calendar),
            Err(why @ CalendarError::UnknownZone(_)) => {
                self.error(format!("{at}.calendar.time_zone"), why.to_string());
                None
            }
            Err(why @ CalendarError::Unit(_)) => {
                self.error(format!("{at}.unit"), format!("{why} with calendar"));
                None
            }
        };
        (self.errors.len() == before).then_some(calendar)
    }
}
