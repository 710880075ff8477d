//! From a request's descriptors to the charges the store must make.
//!
//! Pure: takes a snapshot's `Domain` and the request, returns one `Plan` per descriptor
//! (in request order) and the `Charge`s to send. Applies overrides, `replaces`,
//! `unlimited` and the hits rules. No I/O, no clock.

use crate::algorithm::{Hits, Params};
use crate::config::{Domain, Lookup, Rule, RuleLimit, Unit};
use crate::store::{key, Charge};

use super::wire::RateLimitDescriptor;

/// What one descriptor needs.
#[derive(Debug, Clone, PartialEq)]
pub enum Plan<'a> {
    /// Unmatched, explicit allow, or replaced: OK with no limit, no store call.
    Pass,
    /// `unlimited: true`: OK, remaining u32::MAX, no store call.
    Unlimited(&'a Rule),
    /// Charged against a bucket: `charge` indexes the batch sent to the store.
    Limited(Limit<'a>),
}

/// A descriptor that is charged, with what the response needs to describe it.
#[derive(Debug, Clone, PartialEq)]
pub struct Limit<'a> {
    /// The matched rule; None for a request's own `limit` override.
    pub rule: Option<&'a Rule>,
    pub params: Params,
    pub unit: Unit,
    pub charge: usize,
}

impl Limit<'_> {
    pub fn shadow(&self) -> bool {
        self.rule.is_some_and(|r| r.shadow_mode)
    }
    pub fn quota(&self) -> bool {
        self.rule.is_some_and(|r| r.quota_mode)
    }
    /// `current_limit.name`: the rule's name, empty for overrides and unnamed rules.
    pub fn name(&self) -> &str {
        self.rule.and_then(|r| r.name.as_deref()).unwrap_or("")
    }
}

/// Plans every descriptor of a request in a known domain.
pub fn plan<'a>(
    domain: &'a Domain,
    descriptors: &[RateLimitDescriptor],
    request_hits: u32,
    key_prefix: &str,
) -> (Vec<Plan<'a>>, Vec<Charge>) {
    let mut plans: Vec<Plan<'a>> = descriptors.iter().map(|d| lookup(domain, d)).collect();
    drop_replaced(&mut plans);
    let mut charges = Vec::new();
    for (plan, descriptor) in plans.iter_mut().zip(descriptors) {
        if let Plan::Limited(limit) = plan {
            let entries = descriptor.pairs();
            let key = match limit.rule {
                Some(rule) => {
                    key::rule_key(key_prefix, &domain.name, rule, limit.params.algorithm, limit.unit, entries)
                }
                None => {
                    key::override_key(key_prefix, &domain.name, limit.params.algorithm, limit.unit, entries)
                }
            };
            limit.charge = charges.len();
            charges.push(Charge { key, params: limit.params, hits: hits(descriptor, request_hits) });
        }
    }
    (plans, charges)
}

fn lookup<'a>(domain: &'a Domain, descriptor: &RateLimitDescriptor) -> Plan<'a> {
    if let Some(over) = &descriptor.limit {
        return match override_unit(over.unit) {
            Some(unit) => Plan::Limited(Limit {
                rule: None,
                // `--default-algorithm`, as for the limits in the files that name none.
                params: crate::config::model::params(
                    domain.default_algorithm,
                    u64::from(over.requests_per_unit),
                    unit,
                    None,
                ),
                unit,
                charge: 0,
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
            RuleLimit::Limited(limits) => Plan::Limited(Limit {
                rule: Some(rule),
                params: limits[0].params,
                unit: limits[0].unit,
                charge: 0,
            }),
        },
    }
}

/// A matched rule whose name another matched rule `replaces` is not applied (as
/// envoyproxy/ratelimit: collect every replaced name first, then drop).
fn drop_replaced(plans: &mut [Plan<'_>]) {
    let replaced: Vec<&str> =
        plans.iter().filter_map(plan_rule).flat_map(|r| r.replaces.iter().map(String::as_str)).collect();
    if replaced.is_empty() {
        return;
    }
    let replaced: Vec<String> = replaced.into_iter().map(str::to_string).collect();
    for plan in plans.iter_mut() {
        let name = plan_rule(plan).and_then(|r| r.name.as_deref());
        if name.is_some_and(|n| replaced.iter().any(|r| r == n)) {
            *plan = Plan::Pass;
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
