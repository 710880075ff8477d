//! Counting decisions: one increment per decided descriptor, on pre-resolved handles.
//!
//! Rules that carry request values in their `rule` label (`detailed_metric`,
//! `value_to_metric`) are counted under a label composed from the descriptor's values,
//! bounded by `Metrics::record_per_value`; all others use the handles resolved when the
//! snapshot was built, so counting allocates nothing. The status page's one-minute history
//! (`metrics::history`) counts each decided descriptor once more, per rule, on the
//! snapshot's rings: one clock read per request, two relaxed atomics per descriptor. The
//! hot-key sketch (`crate::telemetry::hotkeys`) counts each charged descriptor once, at that second:
//! `hot_buckets` says which bucket that is.

use crate::algorithm::Hits;
use crate::config::Domain;
use crate::sources::serving::Active;
use crate::store::Charge;
use crate::telemetry::hotkeys::ChargedBucket;
use crate::telemetry::metrics::history::Class;
use crate::telemetry::metrics::{Metrics, RuleSeries};

use super::plan::Plan;
use super::respond::Verdict;
use super::wire::{RateLimitDescriptor, RateLimitRequest};

/// Records each descriptor's outcome and hits. `local` flags the charges the
/// `failure_mode: local` limiter decided (empty when none was).
#[allow(clippy::too_many_arguments)]
pub fn record(
    metrics: &Metrics,
    active: &Active,
    domain: &Domain,
    request: &RateLimitRequest,
    plans: &[Plan<'_>],
    charges: &[Charge],
    verdicts: &[Option<Verdict>],
    local: &[bool],
) {
    let rules = active.counters.domains.get(&domain.name);
    let rings = active.history.domain(&domain.name).unwrap_or_default();
    let second = metrics.history().now();
    active.hot_keys.record(&domain.name, second, hot_buckets(plans, charges, &request.descriptors));
    for ((plan, verdict), descriptor) in plans.iter().zip(verdicts).zip(&request.descriptors) {
        let Some(Verdict { outcome, limit: index }) = *verdict else { continue };
        let (rule, hits) = match plan {
            Plan::Pass => continue,
            Plan::Unlimited(rule) => (Some(*rule), 0),
            Plan::Limited(limit) => {
                (limit.rule, charges.get(limit.charges.start + index).map_or(0, consumed))
            }
        };
        if let Some(ring) = rule.and_then(|rule| rings.get(rule.id.0)) {
            let local = match plan {
                Plan::Limited(limit) => local.get(limit.charges.clone()).is_some_and(|c| c.contains(&true)),
                _ => false,
            };
            ring.record(second, Class::of(outcome, local));
        }
        // The deciding limit's index among the rule's limits (replaced limits are skipped
        // by the plan, not by the rule's series).
        let index = match plan {
            Plan::Limited(limit) => limit.rule_index(index),
            _ => 0,
        };
        match rule {
            Some(rule) => match rules.and_then(|r| r.get(rule.id.0)) {
                Some(RuleSeries::Fixed(counters)) => {
                    if let Some(counters) = counters.get(index).or(counters.first()) {
                        counters.record(outcome, hits)
                    }
                }
                Some(RuleSeries::PerValue) => match rule.limits() {
                    [] | [_] => {
                        metrics.record_per_value(&domain.name, rule, values(descriptor), outcome, hits)
                    }
                    limits => {
                        let base = limits
                            .get(index)
                            .map_or_else(|| rule.label().to_string(), |l| rule.limit_label(l));
                        metrics.record_per_value_as(
                            &domain.name,
                            rule,
                            &base,
                            values(descriptor),
                            outcome,
                            hits,
                        )
                    }
                },
                None => {}
            },
            None => {
                if let Some(counters) = active.counters.overrides.get(&domain.name) {
                    counters.record(outcome, hits);
                }
            }
        }
    }
}

/// The bucket of each charged descriptor that the hot-key sketch counts: its first limit's.
pub(crate) fn hot_buckets<'a>(
    plans: &'a [Plan<'a>],
    charges: &'a [Charge],
    descriptors: &'a [RateLimitDescriptor],
) -> impl Iterator<Item = ChargedBucket<'a, impl ExactSizeIterator<Item = (&'a [u8], &'a [u8])> + Clone>> {
    plans.iter().zip(descriptors).filter_map(|(plan, descriptor)| {
        let Plan::Limited(limit) = plan else { return None };
        let charge = charges.get(limit.charges.clone()).and_then(<[Charge]>::first)?;
        Some(ChargedBucket { rule: limit.rule, key: &charge.key, entries: descriptor.pairs() })
    })
}

fn consumed(charge: &Charge) -> u64 {
    match charge.hits {
        Hits::Consume(n) | Hits::Overdraw(n) => n,
        Hits::Peek | Hits::Refund(_) => 0,
    }
}

/// The entry values of a descriptor, as the bytes the metric label is composed from.
fn values(descriptor: &RateLimitDescriptor) -> impl Iterator<Item = &[u8]> {
    descriptor.entries.iter().map(|entry| entry.value.as_ref())
}

#[cfg(test)]
mod tests;
