//! One limit of a rule with several, as `/v1/status` shows it (`LimitStatus`).
//!
//! Part of `status`; imports only the config. Pure but for the instant it is given.

use serde::Serialize;

use crate::config::rule::PeriodView;
use crate::config::{Limit, Rule};

/// One limit of a rule with several.
#[derive(Debug, Clone, Serialize)]
pub struct LimitStatus {
    /// Its label in metrics (`<path>/<name>`).
    pub label: String,
    pub name: Option<String>,
    pub limit: u64,
    pub unit: &'static str,
    pub unit_multiplier: u64,
    pub algorithm: &'static str,
    /// The share of its buckets enforced (`rollout`, 1 when absent).
    pub rollout: f64,
    /// Its `penalty` in seconds (0: none).
    pub penalty_seconds: u64,
    /// Its calendar period and next reset; absent unless it has a `calendar`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub calendar: Option<PeriodView>,
}

impl LimitStatus {
    /// `limit` of `rule`, with a calendar limit's period at `now_us`.
    pub fn of(rule: &Rule, limit: &Limit, now_us: u64) -> LimitStatus {
        LimitStatus {
            label: rule.limit_label(limit),
            name: limit.name.clone(),
            limit: limit.params.limit,
            unit: limit.unit.as_str(),
            unit_multiplier: limit.multiplier,
            algorithm: limit.params.algorithm.as_str(),
            rollout: limit.rollout.share(),
            penalty_seconds: limit.penalty_seconds(),
            calendar: limit.calendar_view(now_us),
        }
    }
}
