//! From a request's descriptors to the charges the store must make.
//!
//! Pure: takes a snapshot's `Domain` and the request, returns one `Plan` per descriptor
//! (in request order), the `Charge`s to send and the `Groups` that stand or fall together.
//! Applies overrides, `replaces` (per rule name and per limit name), `unlimited`, the hits
//! rules and the domain's `charge` mode. No I/O, no clock.
//!
//! Charges and groups. A descriptor charges one bucket per limit of its rule; those charges
//! are one group (a descriptor passes only if every limit passes, and then all are
//! charged). In an `all_or_nothing` domain, the charges of every descriptor that can deny
//! the request alone (neither shadow nor quota mode) form one group, placed first in the
//! batch; shadow and quota descriptors keep a group each (a shadow denial never denies the
//! request; a quota descriptor denies only with all the others). A limit's `rollout` may
//! leave a bucket staged (`stage`): such a descriptor keeps its own group too, split into
//! runs of staged and enforced limits, so that a staged denial spares no enforced charge.

use std::ops::Range;

use crate::algorithm::Hits;
use crate::config::{ChargeMode, Domain, Lookup, Rule, RuleLimit, Unit};
use crate::store::{key, Charge, Groups};

use super::wire::RateLimitDescriptor;

/// At most this many limits per rule (`rate_limits` is capped at compile time): replaced
/// limits are a bit mask.
pub const MAX_LIMITS: usize = 64;

/// What one descriptor needs.
#[derive(Debug, Clone, PartialEq)]
pub enum Plan<'a> {
    /// Unmatched, explicit allow, or replaced: OK with no limit, no store call.
    Pass,
    /// `unlimited: true`: OK, remaining u32::MAX, no store call.
    Unlimited(&'a Rule),
    /// Charged against one bucket per limit: `charges` indexes the batch sent to the store.
    Limited(Limit<'a>),
}

/// A descriptor that is charged, with what the response needs to describe it.
#[derive(Debug, Clone, PartialEq)]
pub struct Limit<'a> {
    /// The matched rule; None for a request's own `limit` override.
    pub rule: Option<&'a Rule>,
    /// The request's own `limit` (with `rule: None`).
    pub own: Option<crate::config::Limit>,
    /// Bit `i` set: the rule's limit `i` was replaced (`replaces` named it) and is not charged.
    pub replaced: u64,
    /// The charges of this descriptor's limits, in the order of `limits()`.
    pub charges: Range<usize>,
    /// Bit `i` set: the `i`-th limit charged (in the order of `limits()`) has a `rollout`
    /// that leaves this bucket out: its denial is counted (`shadow_rollout`), not enforced.
    pub staged: u64,
}

impl<'a> Limit<'a> {
    pub fn shadow(&self) -> bool {
        self.rule.is_some_and(|r| r.shadow_mode)
    }
    pub fn quota(&self) -> bool {
        self.rule.is_some_and(|r| r.quota_mode)
    }

    /// Whether the `i`-th limit charged is staged for this bucket (see `staged`).
    pub fn is_staged(&self, i: usize) -> bool {
        i < MAX_LIMITS && self.staged & (1 << i) != 0
    }

    /// A descriptor that never denies the request alone: a shadow rule, or one with a
    /// staged bucket (it keeps its own group in an `all_or_nothing` domain, as shadow
    /// and quota descriptors do).
    fn apart(&self) -> bool {
        self.shadow() || self.quota() || self.staged != 0
    }

    /// The limits charged, in order (those not replaced), with their index in the rule.
    pub fn limits(&self) -> impl Iterator<Item = &crate::config::Limit> + '_ {
        let rule_limits = self.rule.map_or(&[][..], |rule| rule.limits());
        let replaced = self.replaced;
        rule_limits
            .iter()
            .enumerate()
            .filter(move |(i, _)| replaced & (1 << i) == 0)
            .map(|(_, limit)| limit)
            .chain(self.own.iter())
    }

    /// The index in the rule's own `limits()` of the `i`-th limit charged (replaced limits
    /// are not charged): what the rule's metric series are indexed by.
    pub fn rule_index(&self, i: usize) -> usize {
        (0..MAX_LIMITS).filter(|bit| self.replaced & (1 << bit) == 0).nth(i).unwrap_or(i)
    }

    /// `current_limit.name` of `limit`: its own name in `rate_limits`, else the rule's
    /// name; empty for overrides and unnamed rules.
    pub fn name_of<'l>(&'l self, limit: &'l crate::config::Limit) -> &'l str {
        match &limit.name {
            Some(name) => name,
            None => self.rule.and_then(|r| r.name.as_deref()).unwrap_or(""),
        }
    }

    /// The metric and log label of `limit` (see `Rule::limit_label`).
    pub fn label_of(&self, limit: &crate::config::Limit) -> String {
        match self.rule {
            Some(rule) => rule.limit_label(limit),
            None => String::new(),
        }
    }
}

/// Plans every descriptor of a request in a known domain.
pub fn plan<'a>(
    domain: &'a Domain,
    descriptors: &[RateLimitDescriptor],
    request_hits: u32,
    key_prefix: &str,
) -> (Vec<Plan<'a>>, Vec<Charge>, Groups) {
    plan_keyed(domain, descriptors, descriptors, request_hits, key_prefix)
}

/// [`plan`] matching `descriptors` and keying buckets with `keyed`: the same descriptors
/// with their values keyed-hashed (`--key-secret-file`, `KeySecret::value`), so that no
/// key holds a request value in the clear. `keyed` has the shape of `descriptors`.
pub fn plan_keyed<'a>(
    domain: &'a Domain,
    descriptors: &[RateLimitDescriptor],
    keyed: &[RateLimitDescriptor],
    request_hits: u32,
    key_prefix: &str,
) -> (Vec<Plan<'a>>, Vec<Charge>, Groups) {
    let mut plans: Vec<Plan<'a>> = descriptors.iter().map(|d| lookup(domain, d)).collect();
    drop_replaced(&mut plans);
    let descriptors = keyed;
    stage(domain, &mut plans, descriptors, key_prefix);
    // One charge per descriptor is the common case: one allocation.
    let mut charges = Vec::with_capacity(descriptors.len());
    let mut ends = Vec::new();
    let joint = domain.charge == ChargeMode::AllOrNothing;
    // Joint descriptors first (one group), then every other descriptor (a group each).
    if joint {
        for (plan, descriptor) in plans.iter_mut().zip(descriptors) {
            if let Plan::Limited(limit) = plan {
                if !limit.apart() {
                    push_charges(domain, limit, descriptor, request_hits, key_prefix, &mut charges);
                }
            }
        }
        close_group(&mut ends, 0, charges.len());
    }
    for (plan, descriptor) in plans.iter_mut().zip(descriptors) {
        if let Plan::Limited(limit) = plan {
            if !joint || limit.apart() {
                let start = charges.len();
                push_charges(domain, limit, descriptor, request_hits, key_prefix, &mut charges);
                if limit.staged == 0 {
                    close_group(&mut ends, start, charges.len());
                } else {
                    // A staged denial must not spare the enforced limits their charge (nor
                    // an enforced one the staged): each run of limits alike is a group.
                    let mut run = start;
                    for i in 1..=limit.charges.len() {
                        if i == limit.charges.len() || limit.is_staged(i) != limit.is_staged(i - 1) {
                            close_group(&mut ends, run, start + i);
                            run = start + i;
                        }
                    }
                }
            }
        }
    }
    (plans, charges, Groups::from_ends(ends))
}

/// Ends the group `start..end` (nothing if empty). Groups of one are left implicit while
/// every group so far is one (`ends` stays empty and allocates nothing: the common case);
/// the first larger group writes them out.
fn close_group(ends: &mut Vec<usize>, start: usize, end: usize) {
    if end <= start || (end - start == 1 && ends.is_empty()) {
        return;
    }
    if ends.is_empty() {
        ends.extend(1..=start);
    }
    ends.push(end);
}

/// Marks the staged buckets of rules with a partial `rollout` (their keys are computed
/// here and again by `push_charges`: only such rules pay for it).
fn stage(domain: &Domain, plans: &mut [Plan<'_>], descriptors: &[RateLimitDescriptor], key_prefix: &str) {
    for (plan, descriptor) in plans.iter_mut().zip(descriptors) {
        let Plan::Limited(limit) = plan else { continue };
        let Some(rule) = limit.rule.filter(|rule| rule.limits().iter().any(|l| l.rollout.is_partial()))
        else {
            continue;
        };
        let mut staged = 0;
        for (i, one) in limit.limits().enumerate().take(MAX_LIMITS) {
            if one.rollout.is_partial() {
                let key = key::limit_key(key_prefix, domain, rule, one, descriptor.pairs());
                if !one.rollout.enforces(&key) {
                    staged |= 1 << i;
                }
            }
        }
        limit.staged = staged;
    }
}

fn push_charges(
    domain: &Domain,
    limit: &mut Limit<'_>,
    descriptor: &RateLimitDescriptor,
    request_hits: u32,
    key_prefix: &str,
    charges: &mut Vec<Charge>,
) {
    let start = charges.len();
    let hits = hits(descriptor, request_hits);
    for one in limit.limits() {
        let entries = descriptor.pairs();
        let key = match limit.rule {
            Some(rule) => key::limit_key(key_prefix, domain, rule, one, entries),
            None => key::domain_override_key(key_prefix, domain, one.params.algorithm, one.unit, entries),
        };
        let hits = if one.overdraft { hits.overdrawn() } else { hits };
        // A calendar limit's period is computed here, from this instance's clock, and goes
        // with the charge to whichever store decides it (see `Limit::charge_params`).
        let params = match one.calendar {
            Some(_) => one.charge_params(crate::store::memory::now_us()),
            None => one.params,
        };
        charges.push(Charge { key, params, hits });
    }
    limit.charges = start..charges.len();
}

fn lookup<'a>(domain: &'a Domain, descriptor: &RateLimitDescriptor) -> Plan<'a> {
    if let Some(over) = &descriptor.limit {
        return match override_unit(over.unit) {
            Some(unit) => Plan::Limited(Limit {
                rule: None,
                // `--default-algorithm`, as for the limits in the files that name none.
                own: Some(crate::config::Limit::single(
                    crate::config::rule::params(
                        domain.default_algorithm,
                        u64::from(over.requests_per_unit),
                        unit,
                        None,
                    ),
                    unit,
                )),
                replaced: 0,
                charges: 0..0,
                staged: 0,
            }),
            // An override with an unknown unit cannot be enforced; Envoy's own behaviour
            // for a bad override is to ignore it, so fall back to the configured rules.
            None => lookup_rule(domain, descriptor),
        };
    }
    lookup_rule(domain, descriptor)
}

fn lookup_rule<'a>(domain: &'a Domain, descriptor: &RateLimitDescriptor) -> Plan<'a> {
    match domain.lookup(descriptor.pairs()) {
        Lookup::NoMatch | Lookup::Allow => Plan::Pass,
        Lookup::Rule(rule) => match &rule.limit {
            RuleLimit::Unlimited => Plan::Unlimited(rule),
            RuleLimit::Limited(_) => {
                Plan::Limited(Limit { rule: Some(rule), own: None, replaced: 0, charges: 0..0, staged: 0 })
            }
        },
    }
}

/// A matched rule whose name another matched rule `replaces` is not applied (as
/// envoyproxy/ratelimit: collect every replaced name first, then drop); a limit of
/// `rate_limits` whose name is replaced is not charged, and a rule left with no limit
/// passes.
fn drop_replaced(plans: &mut [Plan<'_>]) {
    let replaced: Vec<&str> =
        plans.iter().filter_map(plan_rule).flat_map(|r| r.replaces.iter().map(String::as_str)).collect();
    if replaced.is_empty() {
        return;
    }
    let replaced: Vec<String> = replaced.into_iter().map(str::to_string).collect();
    let named = |name: Option<&str>| name.is_some_and(|n| replaced.iter().any(|r| r == n));
    for plan in plans.iter_mut() {
        if named(plan_rule(plan).and_then(|r| r.name.as_deref())) {
            *plan = Plan::Pass;
            continue;
        }
        if let Plan::Limited(limit) = plan {
            let Some(rule) = limit.rule else { continue };
            for (i, one) in rule.limits().iter().enumerate().take(MAX_LIMITS) {
                if named(one.name.as_deref()) {
                    limit.replaced |= 1 << i;
                }
            }
            if limit.limits().next().is_none() {
                *plan = Plan::Pass;
            }
        }
    }
}

fn plan_rule<'a>(plan: &Plan<'a>) -> Option<&'a Rule> {
    match plan {
        Plan::Pass => None,
        Plan::Unlimited(rule) => Some(rule),
        Plan::Limited(limit) => limit.rule,
    }
}

/// The descriptor's own `hits_addend` when set (explicit 0 = peek), else the request's
/// (0 = 1). `is_negative_hits` gives them back.
pub fn hits(descriptor: &RateLimitDescriptor, request_hits: u32) -> Hits {
    let n = match &descriptor.hits_addend {
        Some(own) => own.value,
        None => u64::from(request_hits.max(1)),
    };
    match (n, descriptor.is_negative_hits) {
        (0, _) => Hits::Peek,
        (n, true) => Hits::Refund(n),
        (n, false) => Hits::Consume(n),
    }
}

/// `envoy.type.v3.RateLimitUnit` of an override (no week there).
fn override_unit(unit: i32) -> Option<Unit> {
    Some(match unit {
        1 => Unit::Second,
        2 => Unit::Minute,
        3 => Unit::Hour,
        4 => Unit::Day,
        5 => Unit::Month,
        6 => Unit::Year,
        _ => return None,
    })
}

#[cfg(test)]
pub(crate) mod tests;
