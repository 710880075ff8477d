//! YAML merge keys (`<<: *base`, `<<: [*a, *b]`) resolved on the typed structs, so that
//! scalars keep their text and errors keep serde_yaml's line and path.
//!
//! serde_yaml 0.9 resolves merge keys only on a `Value`, which has no positions and turns
//! `value: 123` into a number. Here every mapping of the policy schema is read as a
//! *layer*: the keys written in it (each remembering whether it was present, even as
//! `null`) plus the layers its `<<` names. Aliases are replayed by serde_yaml's own event
//! parser, so a wrong type or unknown field inside merged content is reported at the
//! anchor's text, with a path through `<<` (`descriptors[2].<<.unit`).
//!
//! Semantics are YAML 1.1's merge: a key written in the mapping wins over a merged one;
//! of several merged mappings, the earlier one wins; merging is shallow (a written
//! `rate_limit` replaces the merged `rate_limit` as a whole); merged mappings may merge
//! in turn. A key that overrides a merged one is not a duplicate key. Owns only this
//! resolution; the shape of the result is `raw`'s, `yaml::parse` reads the layers, and
//! nothing here validates values.

use std::fmt;
use std::marker::PhantomData;

use serde::de::{self, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};

use super::raw::{
    RawCalendar, RawDescriptor, RawFile, RawRateLimit, RawReplaces, RawReservations, RawResponse,
};

/// A field as written: `None` when absent, `Some(None)` when written as `null` (which
/// still overrides a merged value), `Some(Some(_))` otherwise.
type Written<T> = Option<Option<T>>;

/// Deserializes a present field, keeping "present but null" apart from "absent".
fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<T>, D::Error> {
    T::deserialize(d).map(Some)
}

/// The mappings a `<<` key names, in order: one mapping or a sequence of mappings.
#[derive(Debug)]
struct Merged<T>(Vec<T>);

impl<T> Default for Merged<T> {
    fn default() -> Self {
        Merged(Vec::new())
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Merged<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(MergedVisitor(PhantomData))
    }
}

struct MergedVisitor<T>(PhantomData<T>);

impl<'de, T: Deserialize<'de>> Visitor<'de> for MergedVisitor<T> {
    type Value = Merged<T>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a mapping or a list of mappings to merge (`<<: *name` or `<<: [*a, *b]`)")
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        T::deserialize(de::value::MapAccessDeserializer::new(map)).map(|one| Merged(vec![one]))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut all = Vec::new();
        while let Some(one) = seq.next_element()? {
            all.push(one);
        }
        Ok(Merged(all))
    }
}

/// Fills every field still absent in `$into` from `$from`: written keys win.
macro_rules! fill {
    ($into:ident, $from:ident; $($field:ident),+) => {
        $( if $into.$field.is_none() { $into.$field = $from.$field; } )+
    };
}

/// A whole file, as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a mapping with `domain` and `descriptors`")]
pub(super) struct FileLayer {
    #[serde(default, deserialize_with = "present")]
    domain: Written<String>,
    #[serde(default, deserialize_with = "present")]
    failure_mode: Written<String>,
    #[serde(default, deserialize_with = "present")]
    charge: Written<String>,
    #[serde(default, deserialize_with = "present")]
    hash_tag: Written<String>,
    #[serde(default, deserialize_with = "present")]
    consistency: Written<String>,
    #[serde(default, deserialize_with = "present")]
    reservations: Written<ReservationsLayer>,
    #[serde(default, deserialize_with = "present")]
    descriptors: Written<Vec<DescriptorLayer>>,
    #[serde(rename = "<<", default)]
    merged: Merged<FileLayer>,
}

/// A domain's `reservations`, as written (no merge keys inside: two fields).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a mapping with `key` and `ttl`")]
struct ReservationsLayer {
    #[serde(default)]
    key: Option<String>,
    #[serde(default)]
    ttl: Option<String>,
}

impl FileLayer {
    fn flatten(mut self) -> Self {
        for base in std::mem::take(&mut self.merged).0 {
            let base = base.flatten();
            fill!(self, base; domain, failure_mode, charge, hash_tag, consistency, reservations, descriptors);
        }
        self
    }

    /// The file with every merge key resolved.
    pub(super) fn resolve(self) -> RawFile {
        let file = self.flatten();
        RawFile {
            domain: file.domain.flatten(),
            failure_mode: file.failure_mode.flatten(),
            charge: file.charge.flatten(),
            hash_tag: file.hash_tag.flatten(),
            consistency: file.consistency.flatten(),
            reservations: file.reservations.flatten().map(|r| RawReservations { key: r.key, ttl: r.ttl }),
            descriptors: resolve_all(file.descriptors),
        }
    }
}

/// One descriptor node, as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a descriptor mapping with a `key`")]
struct DescriptorLayer {
    #[serde(default, deserialize_with = "present")]
    key: Written<String>,
    #[serde(default, deserialize_with = "present")]
    value: Written<String>,
    #[serde(default, deserialize_with = "present")]
    rate_limit: Written<RateLimitLayer>,
    #[serde(default, deserialize_with = "present")]
    rate_limits: Written<Vec<RateLimitLayer>>,
    #[serde(default, deserialize_with = "present")]
    descriptors: Written<Vec<DescriptorLayer>>,
    #[serde(default, deserialize_with = "present")]
    shadow_mode: Option<bool>,
    #[serde(default, deserialize_with = "present")]
    detailed_metric: Option<bool>,
    #[serde(default, deserialize_with = "present")]
    quota_mode: Option<bool>,
    #[serde(default, deserialize_with = "present")]
    value_to_metric: Option<bool>,
    #[serde(default, deserialize_with = "present")]
    share_threshold: Option<bool>,
    #[serde(default, deserialize_with = "present")]
    lease: Option<bool>,
    #[serde(default, deserialize_with = "present")]
    metadata: Written<serde_yaml::Mapping>,
    #[serde(rename = "<<", default)]
    merged: Merged<DescriptorLayer>,
}

impl DescriptorLayer {
    fn flatten(mut self) -> Self {
        for base in std::mem::take(&mut self.merged).0 {
            let base = base.flatten();
            fill!(self, base; key, value, rate_limit, rate_limits, descriptors, shadow_mode, detailed_metric,
                quota_mode, value_to_metric, share_threshold, lease, metadata);
        }
        self
    }

    fn resolve(self) -> RawDescriptor {
        let node = self.flatten();
        RawDescriptor {
            key: node.key.flatten(),
            value: node.value.flatten(),
            rate_limit: node.rate_limit.flatten().map(RateLimitLayer::resolve),
            rate_limits: node
                .rate_limits
                .flatten()
                .map(|all| all.into_iter().map(RateLimitLayer::resolve).collect()),
            descriptors: resolve_all(node.descriptors),
            shadow_mode: node.shadow_mode.unwrap_or_default(),
            detailed_metric: node.detailed_metric.unwrap_or_default(),
            quota_mode: node.quota_mode.unwrap_or_default(),
            value_to_metric: node.value_to_metric.unwrap_or_default(),
            share_threshold: node.share_threshold.unwrap_or_default(),
            lease: node.lease.unwrap_or_default(),
            metadata: node.metadata.flatten(),
        }
    }
}

fn resolve_all(nodes: Written<Vec<DescriptorLayer>>) -> Option<Vec<RawDescriptor>> {
    nodes.flatten().map(|nodes| nodes.into_iter().map(DescriptorLayer::resolve).collect())
}

/// A `rate_limit` block (or one entry of `rate_limits`), as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a rate_limit mapping")]
struct RateLimitLayer {
    #[serde(default, deserialize_with = "present")]
    unit: Written<String>,
    #[serde(default, deserialize_with = "present")]
    unit_multiplier: Written<u64>,
    #[serde(default, deserialize_with = "present")]
    requests_per_unit: Written<u32>,
    #[serde(default, deserialize_with = "present")]
    unlimited: Option<bool>,
    #[serde(default, deserialize_with = "present")]
    name: Written<String>,
    #[serde(default, deserialize_with = "present")]
    replaces: Written<Vec<ReplacesLayer>>,
    #[serde(default, deserialize_with = "present")]
    algorithm: Written<String>,
    #[serde(default, deserialize_with = "present")]
    burst: Written<u64>,
    #[serde(default, deserialize_with = "present")]
    rollout: Written<f64>,
    #[serde(default, deserialize_with = "present")]
    penalty: Written<String>,
    #[serde(default, deserialize_with = "present")]
    response: Written<ResponseLayer>,
    #[serde(default, deserialize_with = "present")]
    overdraft: Option<bool>,
    #[serde(default, deserialize_with = "present")]
    calendar: Written<CalendarLayer>,
    #[serde(rename = "<<", default)]
    merged: Merged<RateLimitLayer>,
}

impl RateLimitLayer {
    fn flatten(mut self) -> Self {
        for base in std::mem::take(&mut self.merged).0 {
            let base = base.flatten();
            fill!(self, base; unit, unit_multiplier, requests_per_unit, unlimited, name, replaces, algorithm,
                burst, rollout, penalty, response, overdraft, calendar);
        }
        self
    }

    fn resolve(self) -> RawRateLimit {
        let limit = self.flatten();
        RawRateLimit {
            unit: limit.unit.flatten(),
            unit_multiplier: limit.unit_multiplier.flatten(),
            requests_per_unit: limit.requests_per_unit.flatten(),
            unlimited: limit.unlimited.unwrap_or_default(),
            name: limit.name.flatten(),
            replaces: limit
                .replaces
                .flatten()
                .map(|all| all.into_iter().map(ReplacesLayer::resolve).collect()),
            algorithm: limit.algorithm.flatten(),
            burst: limit.burst.flatten(),
            rollout: limit.rollout.flatten(),
            penalty: limit.penalty.flatten(),
            response: limit.response.flatten().map(ResponseLayer::resolve),
            overdraft: limit.overdraft.unwrap_or_default(),
            // `calendar:` with nothing after it is `calendar: {}` (UTC).
            calendar: limit.calendar.map(|c| RawCalendar { time_zone: c.and_then(|c| c.time_zone) }),
        }
    }
}

/// A limit's `calendar`, as written (no merge keys inside: one field).
#[derive(Debug, Default, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a mapping with an optional `time_zone`, such as {time_zone: Europe/Berlin}"
)]
struct CalendarLayer {
    #[serde(default)]
    time_zone: Option<String>,
}

/// A limit's `response`, as written (no merge keys inside: it is small and specific).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a mapping with `body`, `content_type` and `headers`")]
struct ResponseLayer {
    #[serde(default)]
    body: Option<String>,
    #[serde(default)]
    content_type: Option<String>,
    #[serde(default)]
    headers: Option<serde_yaml::Mapping>,
}

impl ResponseLayer {
    fn resolve(self) -> RawResponse {
        let headers = self
            .headers
            .map(|map| map.into_iter().map(|(name, value)| (scalar(&name), scalar(&value))).collect());
        RawResponse { body: self.body, content_type: self.content_type, headers }
    }
}

/// A header name or value as written: a string as is, a number or bool as YAML prints it.
fn scalar(value: &serde_yaml::Value) -> String {
    match value {
        serde_yaml::Value::String(s) => s.clone(),
        serde_yaml::Value::Number(n) => n.to_string(),
        serde_yaml::Value::Bool(b) => b.to_string(),
        other => serde_yaml::to_string(other).unwrap_or_default().trim().to_owned(),
    }
}

/// One `replaces` entry, as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a mapping with a `name`")]
struct ReplacesLayer {
    #[serde(default, deserialize_with = "present")]
    name: Written<String>,
    #[serde(rename = "<<", default)]
    merged: Merged<ReplacesLayer>,
}

impl ReplacesLayer {
    fn resolve(mut self) -> RawReplaces {
        for base in std::mem::take(&mut self.merged).0 {
            let base = base.resolve();
            if self.name.is_none() {
                self.name = Some(base.name);
            }
        }
        RawReplaces { name: self.name.flatten() }
    }
}
