//! A bucket's usage as the store charges it: the RLS path's own plan of the descriptor,
//! keyed as RLS keys it, every consume an overdraw.

use envoy_types::pb::google::protobuf::UInt64Value;
use prost::bytes::Bytes;

use crate::algorithm::Hits;
use crate::config::Domain;
use crate::store::key::KeySecret;
use crate::store::Charge;

use super::super::super::plan::{self, Plan};
use super::super::super::wire::{Entry, RateLimitDescriptor};

/// The charges of the descriptor `entries` in `domain` for `allowed` reported requests,
/// each an overdraw (the usage happened: it is recorded whether or not it fits; 0
/// peeks), and whether the rule is in shadow mode; or why no limit applies.
pub(super) fn charges(
    domain: &Domain,
    entries: &[(&str, &str)],
    allowed: u64,
    key_prefix: &str,
    key_secret: Option<&KeySecret>,
) -> Result<(Vec<Charge>, bool), &'static str> {
    let descriptor = RateLimitDescriptor {
        entries: entries.iter().map(|(k, v)| Entry::new(k, v)).collect(),
        limit: None,
        hits_addend: Some(UInt64Value { value: allowed }),
        is_negative_hits: false,
    };
    // `--key-secret-file`: keyed as the RLS path keys it, so both charge one bucket.
    let keyed = match key_secret {
        Some(secret) => RateLimitDescriptor {
            entries: descriptor
                .entries
                .iter()
                .map(|e| Entry { key: e.key.clone(), value: Bytes::from(secret.value(&e.value)) })
                .collect(),
            ..descriptor.clone()
        },
        None => descriptor.clone(),
    };
    let (plans, mut charges, _) = plan::plan_keyed(
        domain,
        std::slice::from_ref(&descriptor),
        std::slice::from_ref(&keyed),
        1,
        key_prefix,
    );
    let shadow = match plans.first() {
        Some(Plan::Limited(limit)) => limit.shadow(),
        Some(Plan::Unlimited(_)) => return Err("unlimited"),
        Some(Plan::Pass) | None => return Err("no_rule"),
    };
    if charges.is_empty() {
        return Err("no_rule");
    }
    for charge in &mut charges {
        if let Hits::Consume(n) = charge.hits {
            charge.hits = Hits::Overdraw(n);
        }
    }
    Ok((charges, shadow))
}
