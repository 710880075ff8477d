//! The RLQS part of the status view (`/v1/status`'s `rlqs`): this instance's streams and
//! the buckets they hold, busiest first, request values hashed as the hot buckets' are.

use serde::Serialize;

use crate::telemetry::hotkeys::Values;

/// The RLQS side of this instance (`crate::service::rlqs`): its streams and the buckets
/// they hold.
#[derive(Debug, Clone, Serialize, PartialEq, Default)]
pub struct RlqsStatus {
    /// Streams open (one per Envoy and filter domain).
    pub streams: usize,
    /// Buckets the streams hold (a bucket held by two Envoys counts twice).
    pub buckets_held: usize,
    /// The [`RLQS_BUCKETS`] buckets of most demand, each with its Envoy and what it is
    /// assigned; every value hashed as the hot buckets' are. Empty when hot buckets are
    /// hidden (`hot_keys_hidden`).
    pub buckets: Vec<RlqsBucketStatus>,
}

/// At most this many RLQS buckets in a view.
pub const RLQS_BUCKETS: usize = 50;

/// One bucket one Envoy holds.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct RlqsBucketStatus {
    pub domain: String,
    /// The bucket id's entries, sorted by key, values hashed.
    pub bucket: Vec<crate::telemetry::hotkeys::HotEntry>,
    /// The Envoy: `envoy:<x-tollgate-envoy>`, or `stream:<address>#<random>`.
    pub envoy: String,
    /// `allowed + denied` of its latest report (about 5 s).
    pub demand: u64,
    /// `token_bucket`, `allow_all`, `deny_all`, or `none` (not answered yet).
    pub assignment: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokens_per_fill: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fill_interval_seconds: Option<u32>,
}

impl RlqsStatus {
    /// The view of `streams`; bucket values shown as `values` says (`Hashed` or `Keyed`;
    /// `None`: no bucket listed, the hot buckets are hidden).
    pub fn gather(streams: &crate::service::rlqs::Streams, values: Option<Values<'_>>) -> RlqsStatus {
        use crate::service::rlqs::quota::Assignment;
        let mut held = 0;
        let mut busiest: Vec<(u64, RlqsBucketStatus)> = Vec::new();
        streams.view(|envoy, domain, key, bucket| {
            held += 1;
            let Some(values) = values else { return };
            // Only the busiest are kept: a full view of 10,000 buckets per stream is for
            // metrics, not a page.
            if busiest.len() >= RLQS_BUCKETS && busiest.iter().all(|(d, _)| *d >= bucket.demand) {
                return;
            }
            let (assignment, tokens) = match bucket.assignment {
                Some(Assignment::TokenBucket(b)) => ("token_bucket", Some(b)),
                Some(Assignment::AllowAll) => ("allow_all", None),
                Some(Assignment::DenyAll) => ("deny_all", None),
                None => ("none", None),
            };
            let entries = key
                .entries()
                .map(|(k, v)| crate::telemetry::hotkeys::hidden_entry(k, v.as_bytes(), values))
                .collect();
            busiest.push((
                bucket.demand,
                RlqsBucketStatus {
                    domain: domain.to_string(),
                    bucket: entries,
                    envoy: envoy.to_string(),
                    demand: bucket.demand,
                    assignment,
                    max_tokens: tokens.map(|b| b.max_tokens),
                    tokens_per_fill: tokens.map(|b| b.tokens_per_fill),
                    fill_interval_seconds: tokens.map(|b| b.fill_interval_s),
                },
            ));
            if busiest.len() > 2 * RLQS_BUCKETS {
                busiest.sort_by_key(|b| std::cmp::Reverse(b.0));
                busiest.truncate(RLQS_BUCKETS);
            }
        });
        busiest.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.envoy.cmp(&b.1.envoy)));
        busiest.truncate(RLQS_BUCKETS);
        RlqsStatus {
            streams: streams.open(),
            buckets_held: held,
            buckets: busiest.into_iter().map(|(_, b)| b).collect(),
        }
    }
}
