//! The limits of one descriptor node: its `rate_limit` (one limit, or `unlimited`) or its
//! `rate_limits` (several named limits), each with its numbers, window and algorithm, and
//! the node's `replaces`.
//!
//! Part of `compile`: every problem is pushed, none stops the walk, and a node with any
//! problem yields no rule. Pure.

use std::collections::HashMap;
use std::sync::Arc;

use crate::algorithm::{gcra, Algorithm};

use super::super::model::Consistency;
use super::super::raw::{RawDescriptor, RawRateLimit};
use super::super::rule::{
    self, DenialResponse, Level, Limit, Rollout, Rule, RuleId, RuleLimit, Template, Unit, MAX_RESPONSE_BODY,
    MAX_RESPONSE_HEADERS,
};
use super::headers::{header_name, header_value};
use super::{metadata, Builder};

/// Most entries a `rate_limits` list may hold. The service tracks a rule's limits in a
/// 64-bit mask; 16 keeps well inside it and a descriptor's script call small.
pub const MAX_RATE_LIMITS: usize = 16;

/// Longest window (`unit × unit_multiplier`): 2^51 µs, about 71 years, GCRA's own bound on a
/// drain time. With `now` below 2^52 µs (the year 2112), `now` plus two windows (when a
/// sliding window's state expires) stays below 2^53, where the Lua scripts are exact.
const MAX_WINDOW_US: u64 = gcra::MAX_TOLERANCE_US;

/// A node's compiled limits, before they become a `Rule`: what it enforces, and the names
/// it replaces.
type NodeLimits = (RuleLimit, Vec<String>);

impl Builder<'_> {
    /// Validates the node's `rate_limit` or `rate_limits` and records its rule; `None` when
    /// it has neither, or has errors.
    pub(super) fn rule(&mut self, raw: &RawDescriptor, path: &str, levels: &[Level]) -> Option<RuleId> {
        let (limit, replaces) = match (&raw.rate_limit, &raw.rate_limits) {
            (None, None) => {
                if raw.lease {
                    self.error(
                        format!("{path}.lease"),
                        "lease: true needs a rate_limit on the same descriptor",
                    );
                }
                return None;
            }
            (Some(_), Some(_)) => {
                self.error(
                    format!("{path}.rate_limits"),
                    "rate_limit and rate_limits on one descriptor: write one of them (one limit \
                     in rate_limit, or several named limits in rate_limits)",
                );
                return None;
            }
            (Some(single), None) => self.single(single, &format!("{path}.rate_limit"))?,
            (None, Some(list)) => self.several(list, &format!("{path}.rate_limits"))?,
        };
        let name = match &raw.rate_limit {
            Some(single) => single.name.clone().filter(|name| !name.is_empty()),
            // Each limit of `rate_limits` has its own name; the node has none.
            None => None,
        };
        if raw.lease && limit == RuleLimit::Unlimited {
            self.error(format!("{path}.lease"), "lease: true on an unlimited rule (nothing to lease)");
            return None;
        }
        if self.refuse_lease(raw, path) {
            return None;
        }
        let penalized =
            matches!(&limit, RuleLimit::Limited(all) if all.iter().any(|l| l.params.penalty_us > 0));
        if raw.lease && penalized {
            self.error(
                format!("{path}.lease"),
                "lease: true on a rule with a penalty: a lease spends hits locally, unseen by the \
                 bucket, while a penalty must see every charge after the breach; remove one",
            );
            return None;
        }
        let id = RuleId(self.rules.len());
        self.rules.push(Rule {
            id,
            path: format!("{}{path}", self.prefix),
            name,
            limit,
            shadow_mode: raw.shadow_mode,
            quota_mode: raw.quota_mode,
            lease: raw.lease,
            detailed_metric: raw.detailed_metric,
            value_to_metric: raw.value_to_metric,
            replaces,
            levels: levels.to_vec(),
            metadata: metadata(raw.metadata.as_ref()),
        });
        Some(id)
    }

    /// A `rate_limit` block: one limit, or `unlimited`.
    fn single(&mut self, raw: &RawRateLimit, at: &str) -> Option<NodeLimits> {
        let before = self.errors.len();
        let limit = if raw.unlimited {
            self.unlimited(raw, at);
            Some(RuleLimit::Unlimited)
        } else {
            self.numbers(raw, at).map(|limit| RuleLimit::Limited(vec![limit]))
        };
        let own: Vec<&str> = raw.name.as_deref().filter(|name| !name.is_empty()).into_iter().collect();
        let replaces = self.replaces(raw, at, &own, false);
        (self.errors.len() == before).then_some((limit?, replaces?))
    }

    /// `unlimited: true`: no unit, no window; the algorithm and burst are still checked.
    fn unlimited(&mut self, raw: &RawRateLimit, at: &str) {
        self.algorithm(raw, at);
        if raw.unit.is_some() {
            self.error(format!("{at}.unit"), "unit must not be set together with unlimited: true");
        }
        if raw.unit_multiplier.is_some() {
            self.error(
                format!("{at}.unit_multiplier"),
                "unit_multiplier must not be set together with unlimited: true",
            );
        }
        if raw.rollout.is_some() {
            self.error(format!("{at}.rollout"), "rollout must not be set together with unlimited: true");
        }
        if raw.penalty.is_some() {
            self.error(format!("{at}.penalty"), "penalty must not be set together with unlimited: true");
        }
        if raw.response.is_some() {
            self.error(format!("{at}.response"), "response must not be set together with unlimited: true");
        }
        if raw.overdraft {
            self.error(format!("{at}.overdraft"), "overdraft must not be set together with unlimited: true");
        }
    }

    /// A `rate_limits` list: 1 to [`MAX_RATE_LIMITS`] limits, each named (unique within the
    /// node), in file order; their `replaces` merged.
    fn several(&mut self, list: &[RawRateLimit], at: &str) -> Option<NodeLimits> {
        let before = self.errors.len();
        if list.is_empty() {
            self.error(at, "empty rate_limits list (write at least one limit, or remove the field)");
        }
        if list.len() > MAX_RATE_LIMITS {
            self.error(
                at,
                format!(
                    "{} limits in rate_limits: at most {MAX_RATE_LIMITS} per descriptor (the service \
                     tracks a rule's limits in a 64-bit mask)",
                    list.len()
                ),
            );
        }
        let own = self.names(list, at);
        // A descriptor's limits stand or fall together: all record their usage always, or none.
        if let Some(first) = list.first() {
            if let Some(index) = list.iter().position(|entry| entry.overdraft != first.overdraft) {
                self.error(
                    format!("{at}[{index}].overdraft"),
                    "overdraft on some limits of a descriptor but not others: its limits stand or \
                     fall together, so set overdraft on all of them or none",
                );
            }
        }
        let mut limits = Vec::with_capacity(list.len());
        let mut replaces: Vec<String> = Vec::new();
        for (index, entry) in list.iter().enumerate() {
            let at = format!("{at}[{index}]");
            if entry.unlimited {
                self.error(
                    format!("{at}.unlimited"),
                    "unlimited is not allowed in rate_limits (an unlimited descriptor has \
                     `rate_limit: {unlimited: true}`)",
                );
            } else if let Some(mut limit) = self.numbers(entry, &at) {
                limit.name = entry.name.clone();
                limits.push(limit);
            }
            for name in self.replaces(entry, &at, &own, true).unwrap_or_default() {
                if !replaces.contains(&name) {
                    replaces.push(name);
                }
            }
        }
        (self.errors.len() == before).then_some((RuleLimit::Limited(limits), replaces))
    }

    /// The entries' names, checked present and unique; the valid ones, in file order.
    fn names<'r>(&mut self, list: &'r [RawRateLimit], at: &str) -> Vec<&'r str> {
        let mut first: HashMap<&str, usize> = HashMap::new();
        let mut names = Vec::with_capacity(list.len());
        for (index, entry) in list.iter().enumerate() {
            let path = format!("{at}[{index}].name");
            match entry.name.as_deref() {
                None => self.error(
                    path,
                    "missing name (every limit of rate_limits needs one, unique within the descriptor)",
                ),
                Some("") => self.error(
                    path,
                    "empty name (every limit of rate_limits needs one, unique within the descriptor)",
                ),
                Some(name) => match first.get(name) {
                    Some(earlier) => self.error(
                        path,
                        format!(
                            "duplicate name {name:?}: rate_limits[{earlier}] has it already (names \
                             are unique within a descriptor)"
                        ),
                    ),
                    None => {
                        first.insert(name, index);
                        names.push(name);
                    }
                },
            }
        }
        names
    }

    /// unit / unit_multiplier / requests_per_unit / algorithm / burst of one limit (not
    /// `unlimited`); its `name` is the caller's.
    fn numbers(&mut self, raw: &RawRateLimit, at: &str) -> Option<Limit> {
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
        let limit = Limit { name: None, params, unit, multiplier, rollout, response, overdraft };
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
        } else if self.charge == super::ChargeMode::AllOrNothing {
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

    /// `response`: `Some(None)` when absent, `None` after an error. Every template parses,
    /// and everything is bounded: the body, the number of headers, each value; header names
    /// are HTTP tokens and none Envoy or HTTP owns.
    fn response(&mut self, raw: &RawRateLimit, at: &str) -> Option<Option<Arc<DenialResponse>>> {
        let Some(written) = raw.response.as_ref() else {
            return Some(None);
        };
        let before = self.errors.len();
        let at = format!("{at}.response");
        if written.body.is_none() && written.headers.as_ref().is_none_or(Vec::is_empty) {
            self.error(&at, "an empty response: give a body, headers, or both (or remove response)");
        }
        let body = written.body.as_deref().and_then(|body| {
            if body.len() > MAX_RESPONSE_BODY {
                self.error(
                    format!("{at}.body"),
                    format!("a body of {} bytes: at most {MAX_RESPONSE_BODY}", body.len()),
                );
                return None;
            }
            Template::parse(body).map_err(|why| self.error(format!("{at}.body"), why)).ok()
        });
        if let Some(content_type) = written.content_type.as_deref() {
            if written.body.is_none() {
                self.error(
                    format!("{at}.content_type"),
                    "content_type without a body: it describes the body (give one, or remove it)",
                );
            } else if let Err(why) = header_value(content_type) {
                self.error(format!("{at}.content_type"), why);
            } else if !content_type.contains('/') {
                self.error(
                    format!("{at}.content_type"),
                    format!("{content_type:?} is not a media type (such as application/json)"),
                );
            }
        }
        let written_headers = written.headers.as_deref().unwrap_or_default();
        if written_headers.len() > MAX_RESPONSE_HEADERS {
            self.error(
                format!("{at}.headers"),
                format!("{} headers: at most {MAX_RESPONSE_HEADERS}", written_headers.len()),
            );
        }
        let mut headers = Vec::with_capacity(written_headers.len());
        for (name, value) in written_headers {
            let path = format!("{at}.headers.{name}");
            let lower = name.to_ascii_lowercase();
            if let Err(why) = header_name(&lower) {
                self.error(&path, why);
                continue;
            }
            if let Err(why) = header_value(value) {
                self.error(&path, why);
                continue;
            }
            match Template::parse(value) {
                Ok(template) => headers.push((lower, template)),
                Err(why) => self.error(&path, why),
            }
        }
        (self.errors.len() == before).then(|| {
            let content_type = written.content_type.clone();
            Some(Arc::new(DenialResponse { body, content_type, headers }))
        })
    }

    /// `algorithm` (default `--default-algorithm`, gcra with a `burst`) and the `burst` that
    /// only gcra accepts.
    fn algorithm(&mut self, raw: &RawRateLimit, at: &str) -> Option<Algorithm> {
        let algorithm = match raw.algorithm.as_deref().map(str::to_ascii_lowercase).as_deref() {
            // `burst` is gcra's alone: with it, no algorithm means gcra whatever the default.
            None if raw.burst.is_some() => Some(Algorithm::Gcra),
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

    /// The names in `replaces`; `None` if the list has errors. `own` are the names of the
    /// node's own limits (`several`: of its `rate_limits`), which it may not replace.
    fn replaces(&mut self, raw: &RawRateLimit, at: &str, own: &[&str], several: bool) -> Option<Vec<String>> {
        let Some(list) = raw.replaces.as_ref() else {
            return Some(Vec::new());
        };
        let before = self.errors.len();
        if list.is_empty() {
            self.error(format!("{at}.replaces"), "empty replaces list");
        }
        let mut names = Vec::with_capacity(list.len());
        for (index, entry) in list.iter().enumerate() {
            let path = format!("{at}.replaces[{index}].name");
            match entry.name.as_deref() {
                None | Some("") => self.error(path, "replaces entry without a name"),
                Some(name) if own.contains(&name) && several => self.error(
                    path,
                    format!("{name:?} is a limit of this descriptor's own rate_limits: it cannot replace it"),
                ),
                Some(name) if own.contains(&name) => {
                    self.error(path, format!("rule {name:?} replaces itself"));
                }
                Some(name) => names.push(name.to_owned()),
            }
        }
        (self.errors.len() == before).then_some(names)
    }
}
