//! The limits of one descriptor node: its `rate_limit` (one limit, or `unlimited`) or its
//! `rate_limits` (several named limits, unique within the node), and the node's
//! `replaces`; then the `Rule` they make.
//!
//! Part of `compile`: every problem is pushed, none stops the walk, and a node with any
//! problem yields no rule. Each limit's numbers are `numbers`' (its `response`,
//! `response`'s). Pure.

use std::collections::HashMap;

use super::super::raw::{RawDescriptor, RawRateLimit};
use super::super::rule::{Level, Rule, RuleId, RuleLimit};
use super::{metadata, Builder};

/// Most entries a `rate_limits` list may hold. The service tracks a rule's limits in a
/// 64-bit mask; 16 keeps well inside it and a descriptor's script call small.
pub const MAX_RATE_LIMITS: usize = 16;

/// A node's compiled limits, before they become a `Rule`: what it enforces, and the names
/// it replaces.
type NodeLimits = (RuleLimit, Vec<String>);

impl Builder<'_> {
    /// Validates the node's `rate_limit` or `rate_limits` and records its rule; `None` when
    /// it has neither, or has errors.
    pub(super) fn rule(&mut self, raw: &RawDescriptor, path: &str, levels: &[Level]) -> Option<RuleId> {
        let unlimited = raw.rate_limit.as_ref().filter(|r| r.unlimited).map(|_| format!("{path}.rate_limit"));
        if self.refuse_with_reservations(raw, path, unlimited.as_deref()) {
            return None;
        }
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
        let calendar = matches!(&limit, RuleLimit::Limited(all) if all.iter().any(|l| l.calendar.is_some()));
        if raw.lease && calendar {
            self.error(
                format!("{path}.lease"),
                "lease: true on a rule with a calendar: leases refill by epoch windows, not calendar \
                 periods; remove one",
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
