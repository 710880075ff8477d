//! What a stream keeps of each bucket between reports, what it asks of `Quota` for a
//! bucket, and the answer it gets.

use std::time::Duration;

use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::BucketAction;

use crate::algorithm::share::TokenBucket;

/// One Envoy's view of one bucket, kept by its stream between reports.
#[derive(Debug, Clone, Default)]
pub struct Held {
    /// `allowed + denied` of its latest report.
    pub demand: u64,
    /// Only the immediate report so far.
    pub newcomer: bool,
    /// The last answer had a limit behind it (a bucket that loses it is abandoned).
    pub limited: bool,
    /// The token bucket Envoy runs now (`None`: a blanket rule or nothing).
    pub running: Option<TokenBucket>,
    /// The ledger key of the bucket, once it had a limit.
    pub ledger: Option<String>,
    /// What Envoy was last assigned for the bucket (for the status view).
    pub assignment: Option<Assignment>,
}

/// An assignment as the status view shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Assignment {
    TokenBucket(TokenBucket),
    AllowAll,
    DenyAll,
}

impl Assignment {
    /// What `action` assigns; `None` for an abandon.
    pub fn of(action: &BucketAction) -> Option<Assignment> {
        use envoy_types::pb::envoy::r#type::v3::rate_limit_strategy::Strategy;
        use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::bucket_action::BucketAction as Kind;
        let Some(Kind::QuotaAssignmentAction(assign)) = &action.bucket_action else { return None };
        match assign.rate_limit_strategy.as_ref()?.strategy.as_ref()? {
            Strategy::TokenBucket(bucket) => Some(Assignment::TokenBucket(TokenBucket {
                max_tokens: bucket.max_tokens,
                tokens_per_fill: bucket.tokens_per_fill.as_ref().map_or(1, |f| f.value),
                fill_interval_s: bucket
                    .fill_interval
                    .as_ref()
                    .map_or(1, |d| u32::try_from(d.seconds).unwrap_or(u32::MAX)),
            })),
            Strategy::BlanketRule(0) => Some(Assignment::AllowAll),
            Strategy::BlanketRule(_) => Some(Assignment::DenyAll),
            Strategy::RequestsPerTimeUnit(_) => None,
        }
    }
}

/// What the stream does for one bucket now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ask {
    /// A report's counts for the bucket.
    Report { allowed: u64, denied: u64, immediate: bool },
    /// Look again with no new usage (a wake-up or a push): `fresh` gives a full bucket
    /// (a window's edge, a refill after DENY_ALL).
    Again { fresh: bool },
}

impl Ask {
    /// Adds the counts of `other` (the same bucket twice in one report).
    pub fn add(&mut self, other: Ask) {
        if let (Ask::Report { allowed, denied, .. }, Ask::Report { allowed: a, denied: d, .. }) =
            (self, other)
        {
            *allowed = allowed.saturating_add(a);
            *denied = denied.saturating_add(d);
        }
    }
}

/// The answer for one bucket.
#[derive(Debug, Default)]
pub struct Answer {
    /// The actions to send, in order (empty: nothing to send).
    pub actions: Vec<BucketAction>,
    /// Look again (`Ask::Again { fresh: true }`) after this long: a window's edge, or
    /// when a denied bucket has room again (`None`: at the next report).
    pub wake: Option<Duration>,
    /// Envoy forgets the bucket (it was abandoned): the stream drops it.
    pub forget: bool,
    /// Other holders whose grant is now smaller than their claim: their streams look
    /// again at once, wherever they are on this instance.
    pub shrink: Vec<Shrink>,
}

impl Answer {
    /// An answer of one action, nothing else to do.
    pub fn one(action: BucketAction) -> Answer {
        Answer { actions: vec![action], ..Answer::default() }
    }
}

/// A holder whose share is now below its claim, and the instance holding its stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shrink {
    pub holder: String,
    pub instance: String,
}
