//! RLQS messages as they come off the wire (usage reports, bytes-typed) and go onto it
//! (bucket actions, envoy-types' own response).
//!
//! Inbound, the messages are wire-compatible with
//! `envoy.service.rate_limit_quota.v3.RateLimitQuotaUsageReports`, with `bytes` where Envoy
//! has `string`: Envoy copies header bytes as they come into a `BucketId`, and a proto3
//! `string` that is not UTF-8 makes prost fail the *whole* report — every bucket of that
//! Envoy, every 5 s. A proto `map<string, string>` is on the wire a repeated message
//! `{key = 1; value = 2}`, so `BucketId` decodes as a repeated [`Entry`] of bytes. The
//! RLS path (`service::wire`) does the same.
//!
//! A [`BucketKey`] is a bucket id made canonical: entries sorted by key (Envoy reorders
//! its map between reports), a repeated key resolved as protobuf does (the last wins).
//! It is also the only way back onto the wire, so every answer echoes the id Envoy holds.
//! An id that is not UTF-8 is [`InvalidBucketId::NotUtf8`]: Envoy's parser would reject it
//! in a response (proto3 `string`) and reset the stream, so it can never be answered; the
//! caller counts it and Envoy keeps its `no_assignment_behavior` for that bucket.
//!
//! Outbound, every assignment carries a TTL of whole seconds ≥ 1 ([`Ttl`]): Envoy 1.40
//! reads only the seconds, and an unset or zero TTL expires the assignment at once.
//!
//! Owns the shapes and their validation only: what a bucket means is `map`'s business.

use std::collections::BTreeMap;
use std::num::NonZeroU32;

use envoy_rlqs::rate_limit_quota_response::bucket_action::{
    AbandonAction, BucketAction as Action, QuotaAssignmentAction,
};
use envoy_rlqs::rate_limit_quota_response::BucketAction;
use envoy_types::pb::envoy::r#type::v3::rate_limit_strategy::{BlanketRule, Strategy};
use envoy_types::pb::envoy::r#type::v3::{RateLimitStrategy, TokenBucket as EnvoyTokenBucket};
use envoy_types::pb::envoy::service::rate_limit_quota::v3 as envoy_rlqs;
use envoy_types::pb::google::protobuf::{Duration, UInt32Value};
use prost::bytes::Bytes;

use crate::algorithm::share::TokenBucket;

/// The gRPC service name: the endpoint's path prefix, and the name health checks ask about.
pub const SERVICE_NAME: &str = "envoy.service.rate_limit_quota.v3.RateLimitQuotaService";

/// `RateLimitQuotaUsageReports` with a `bytes` domain and bytes-typed bucket ids.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RateLimitQuotaUsageReports {
    /// The filter's domain; not UTF-8 means no configured domain.
    #[prost(bytes = "bytes", tag = "1")]
    pub domain: Bytes,
    #[prost(message, repeated, tag = "2")]
    pub bucket_quota_usages: Vec<BucketQuotaUsage>,
}

/// `RateLimitQuotaUsageReports.BucketQuotaUsage`: one bucket's counts since its last report.
#[derive(Clone, PartialEq, prost::Message)]
pub struct BucketQuotaUsage {
    #[prost(message, optional, tag = "1")]
    pub bucket_id: Option<BucketId>,
    /// Whole seconds since the last report (Envoy truncates); present and zero on the
    /// immediate report of a new bucket. Never divided by.
    #[prost(message, optional, tag = "2")]
    pub time_elapsed: Option<Duration>,
    #[prost(uint64, tag = "3")]
    pub num_requests_allowed: u64,
    #[prost(uint64, tag = "4")]
    pub num_requests_denied: u64,
}

/// `BucketId` with its `map<string, string>` as the repeated entries it is on the wire.
#[derive(Clone, PartialEq, prost::Message)]
pub struct BucketId {
    #[prost(message, repeated, tag = "1")]
    pub bucket: Vec<Entry>,
}

/// One map entry of a `BucketId`, both sides as Envoy sent them.
#[derive(Clone, PartialEq, Eq, Hash, prost::Message)]
pub struct Entry {
    #[prost(bytes = "bytes", tag = "1")]
    pub key: Bytes,
    #[prost(bytes = "bytes", tag = "2")]
    pub value: Bytes,
}

impl Entry {
    /// An entry from anything byte-like; copies.
    pub fn new(key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Entry {
        Entry { key: Bytes::copy_from_slice(key.as_ref()), value: Bytes::copy_from_slice(value.as_ref()) }
    }
}

impl BucketQuotaUsage {
    /// `allowed + denied`, saturating: the demand `algorithm::share` weighs.
    pub fn demand(&self) -> u64 {
        self.num_requests_allowed.saturating_add(self.num_requests_denied)
    }

    /// The immediate report Envoy sends when it creates the bucket (`time_elapsed` 0 or
    /// absent): its counts are the first requests only, not a period's demand.
    pub fn is_immediate(&self) -> bool {
        self.time_elapsed.is_none_or(|d| d.seconds <= 0 && d.nanos <= 0)
    }
}

/// Size bounds on what one Envoy may send. Below them anything goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// Buckets in one report message. Envoy sends every bucket it holds every 5 s.
    pub max_buckets: usize,
    /// Entries of one bucket id (as the RLS path's entries per descriptor).
    pub max_entries: usize,
    /// Bytes of one key or one value (as the RLS path's value bound).
    pub max_value_bytes: usize,
}

impl Default for Bounds {
    fn default() -> Self {
        Bounds { max_buckets: 10_000, max_entries: 32, max_value_bytes: 4096 }
    }
}

/// Why a report, as a whole, is not used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidReport {
    #[error("the report has {count} buckets, more than the {max} allowed")]
    TooManyBuckets { count: usize, max: usize },
}

/// Why one bucket id cannot be answered. The stream and the other buckets go on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidBucketId {
    #[error("the bucket id is missing or has no entries")]
    Empty,
    #[error("the bucket id has an empty key")]
    EmptyKey,
    #[error("the bucket id has an empty value")]
    EmptyValue,
    #[error("the bucket id has {count} entries, more than the {max} allowed")]
    TooManyEntries { count: usize, max: usize },
    #[error("a key or value of the bucket id has {bytes} bytes, more than the {max} allowed")]
    TooLong { bytes: usize, max: usize },
    #[error("the bucket id is not UTF-8: it can never be answered")]
    NotUtf8,
}

impl InvalidBucketId {
    /// The `reason` label of `tollgate_rlqs_invalid_total`.
    pub fn reason(&self) -> &'static str {
        match self {
            InvalidBucketId::Empty => "empty_id",
            InvalidBucketId::EmptyKey | InvalidBucketId::EmptyValue => "bad_entry",
            InvalidBucketId::TooManyEntries { .. } => "too_many_entries",
            InvalidBucketId::TooLong { .. } => "too_long",
            InvalidBucketId::NotUtf8 => "not_utf8",
        }
    }
}

impl RateLimitQuotaUsageReports {
    /// The domain, if it is UTF-8 (otherwise no configured domain can match it).
    pub fn domain(&self) -> Option<&str> {
        std::str::from_utf8(&self.domain).ok()
    }

    /// Whether the report as a whole is within `bounds` (each bucket id is checked on its
    /// own by [`BucketKey::new`]).
    pub fn check(&self, bounds: &Bounds) -> Result<(), InvalidReport> {
        let count = self.bucket_quota_usages.len();
        if count > bounds.max_buckets {
            return Err(InvalidReport::TooManyBuckets { count, max: bounds.max_buckets });
        }
        Ok(())
    }
}

/// A bucket id made canonical: UTF-8, non-empty, within bounds, entries sorted by key,
/// each key once (the last one sent wins, as in a protobuf map). Equal for every order
/// Envoy sends the same map in.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BucketKey {
    entries: Vec<(String, String)>,
}

impl BucketKey {
    /// Validates and canonicalises `id` (`None`: the usage had no id).
    pub fn new(id: Option<&BucketId>, bounds: &Bounds) -> Result<BucketKey, InvalidBucketId> {
        let entries = id.map(|id| id.bucket.as_slice()).unwrap_or_default();
        if entries.is_empty() {
            return Err(InvalidBucketId::Empty);
        }
        if entries.len() > bounds.max_entries {
            return Err(InvalidBucketId::TooManyEntries { count: entries.len(), max: bounds.max_entries });
        }
        let mut map = BTreeMap::new();
        for entry in entries {
            let bytes = entry.key.len().max(entry.value.len());
            if bytes > bounds.max_value_bytes {
                return Err(InvalidBucketId::TooLong { bytes, max: bounds.max_value_bytes });
            }
            let key = std::str::from_utf8(&entry.key).map_err(|_| InvalidBucketId::NotUtf8)?;
            let value = std::str::from_utf8(&entry.value).map_err(|_| InvalidBucketId::NotUtf8)?;
            // A later entry with the same key replaces the earlier one, as a protobuf map.
            map.insert(key.to_owned(), value.to_owned());
        }
        if map.keys().any(String::is_empty) {
            return Err(InvalidBucketId::EmptyKey);
        }
        if map.values().any(String::is_empty) {
            return Err(InvalidBucketId::EmptyValue);
        }
        Ok(BucketKey { entries: map.into_iter().collect() })
    }

    /// The entries, sorted by key, each key once.
    pub fn entries(&self) -> impl ExactSizeIterator<Item = (&str, &str)> + Clone {
        self.entries.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// The id as Envoy's message: the keys and values exactly as Envoy sent them, which is
    /// what Envoy looks its bucket up by.
    pub fn to_envoy(&self) -> envoy_rlqs::BucketId {
        envoy_rlqs::BucketId { bucket: self.entries.iter().cloned().collect() }
    }
}

/// An assignment's time to live: whole seconds, at least 1 (Envoy 1.40 ignores nanos and
/// expires an assignment without a TTL at once).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ttl(pub NonZeroU32);

impl Ttl {
    fn duration(self) -> Duration {
        Duration { seconds: i64::from(self.0.get()), nanos: 0 }
    }
}

/// A blanket rule: every request of the bucket allowed, or every one denied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Blanket {
    AllowAll,
    DenyAll,
}

fn assign(key: &BucketKey, strategy: Strategy, ttl: Ttl) -> BucketAction {
    BucketAction {
        bucket_id: Some(key.to_envoy()),
        bucket_action: Some(Action::QuotaAssignmentAction(QuotaAssignmentAction {
            assignment_time_to_live: Some(ttl.duration()),
            rate_limit_strategy: Some(RateLimitStrategy { strategy: Some(strategy) }),
        })),
    }
}

/// Assigns `bucket` to the bucket `key` for `ttl`: `max_tokens`, `tokens_per_fill` (always
/// set, > 0) and `fill_interval` in whole seconds, as `algorithm::share` made them.
pub fn token_bucket(key: &BucketKey, bucket: TokenBucket, ttl: Ttl) -> BucketAction {
    let token_bucket = EnvoyTokenBucket {
        max_tokens: bucket.max_tokens,
        tokens_per_fill: Some(UInt32Value { value: bucket.tokens_per_fill.max(1) }),
        fill_interval: Some(Duration { seconds: i64::from(bucket.fill_interval_s.max(1)), nanos: 0 }),
    };
    assign(key, Strategy::TokenBucket(token_bucket), ttl)
}

/// Assigns a blanket rule to the bucket `key` for `ttl`. ALLOW_ALL is enum value 0 and is
/// still on the wire (a oneof field set to 0 is encoded); an unset strategy would be
/// dropped by Envoy.
pub fn blanket(key: &BucketKey, rule: Blanket, ttl: Ttl) -> BucketAction {
    let rule = match rule {
        Blanket::AllowAll => BlanketRule::AllowAll,
        Blanket::DenyAll => BlanketRule::DenyAll,
    };
    assign(key, Strategy::BlanketRule(rule as i32), ttl)
}

/// Tells Envoy to forget the bucket `key` (it stops reporting it, and recreates it on its
/// next matching request).
pub fn abandon(key: &BucketKey) -> BucketAction {
    BucketAction {
        bucket_id: Some(key.to_envoy()),
        bucket_action: Some(Action::AbandonAction(AbandonAction {})),
    }
}

/// Sets the TTL of an assignment `action` (an abandon has none).
pub fn set_ttl(action: &mut BucketAction, ttl: Ttl) {
    if let Some(Action::QuotaAssignmentAction(assign)) = &mut action.bucket_action {
        assign.assignment_time_to_live = Some(ttl.duration());
    }
}

/// One response carrying `actions` (Envoy applies them in order).
pub fn response(actions: Vec<BucketAction>) -> envoy_rlqs::RateLimitQuotaResponse {
    envoy_rlqs::RateLimitQuotaResponse { bucket_action: actions }
}

#[cfg(test)]
mod tests;
