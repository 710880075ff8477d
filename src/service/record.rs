//! Counting decisions: one increment per decided descriptor, on pre-resolved handles.
//!
//! Rules with `detailed_metric` or `value_to_metric` put the request's values into the
//! `rule` label (their owners opted into that cardinality); all others use the handles
//! resolved when the snapshot was built, so counting allocates nothing.

use crate::algorithm::Hits;
use crate::config::Domain;
use crate::escape::escape;
use crate::live::Active;
use crate::metrics::Metrics;
use crate::store::Charge;

use super::plan::Plan;
use super::respond::Outcome;
use super::wire::RateLimitRequest;

/// Records each descriptor's outcome and hits.
pub fn record(
    metrics: &Metrics,
    active: &Active,
    domain: &Domain,
    request: &RateLimitRequest,
    plans: &[Plan<'_>],
    charges: &[Charge],
    outcomes: &[Option<Outcome>],
) {
    let rules = active.counters.domains.get(&domain.name);
    for ((plan, outcome), descriptor) in plans.iter().zip(outcomes).zip(&request.descriptors) {
        let Some(outcome) = *outcome else { continue };
        let (rule, hits) = match plan {
            Plan::Pass => continue,
            Plan::Unlimited(rule) => (Some(*rule), 0),
            Plan::Limited(limit) => (limit.rule, consumed(&charges[limit.charge])),
        };
        match rule {
            Some(rule) if rule.detailed_metric || rule.value_to_metric => {
                // Escaped: a value that is not UTF-8 (or holds `\`) shows as `\xNN`, and
                // two distinct values never share a label.
                let values: Vec<_> = descriptor.entries.iter().map(|e| escape(&e.value)).collect();
                let label = format!("{}:{}", rule.label(), values.join(":"));
                metrics.rule_counters(&domain.name, &label).record(outcome, hits);
            }
            Some(rule) => {
                if let Some(counters) = rules.and_then(|r| r.get(rule.id.0)) {
                    counters.record(outcome, hits);
                }
            }
            None => {
                if let Some(counters) = active.counters.overrides.get(&domain.name) {
                    counters.record(outcome, hits);
                }
            }
        }
    }
}

fn consumed(charge: &Charge) -> u64 {
    match charge.hits {
        Hits::Consume(n) => n,
        Hits::Peek | Hits::Refund(_) => 0,
    }
}
