//! The request path's settings, fixed at startup (`crate::app` fills them from the CLI).

use std::time::Duration;

use crate::store::key::KeySecret;

use super::super::{bounds, headers};

/// Request-path settings fixed at startup.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Longest a request waits for the store (also bounded by the caller's grpc-timeout).
    pub store_timeout: Duration,
    /// Prepended to every bucket key (for a Redis shared with other tenants).
    pub key_prefix: String,
    /// A decision counts as `near_limit` above this share of the limit consumed.
    pub near_limit_ratio: f64,
    /// Global shadow mode: decide and count everything, answer OK.
    pub shadow_mode: bool,
    /// Add `x-ratelimit-*` and `retry-after` to `response_headers_to_add`.
    pub response_headers: bool,
    /// Add the peer's `RateLimit-Limit/-Remaining/-Reset` under these names.
    pub limit_headers: Option<headers::LimitHeaderNames>,
    /// `--ratelimit-headers ietf`: add the draft standard's `RateLimit-Policy` and `RateLimit`.
    pub ietf_headers: bool,
    /// `--retry-after-jitter`: up to this share of the wait added to `retry-after` at random.
    pub retry_after_jitter: f64,
    /// Answer the request and the passed rules' `metadata` as `dynamic_metadata`.
    pub response_dynamic_metadata: bool,
    /// Bounds on request size; past them the failure policy answers.
    pub bounds: bounds::Bounds,
    /// Cap on buckets of the in-memory limiter used by `failure_mode: local` domains.
    pub local_max_keys: usize,
    /// `--key-secret-file`: request values enter keys, metrics, the hot-key view and spans
    /// keyed-hashed (`KeySecret::value`), never in the clear.
    pub key_secret: Option<KeySecret>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            store_timeout: Duration::from_millis(10),
            key_prefix: String::new(),
            near_limit_ratio: 0.8,
            shadow_mode: false,
            response_headers: false,
            limit_headers: None,
            ietf_headers: false,
            retry_after_jitter: 0.0,
            response_dynamic_metadata: false,
            bounds: bounds::Bounds::default(),
            local_max_keys: 100_000,
            key_secret: None,
        }
    }
}
