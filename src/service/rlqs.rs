//! The Rate Limit Quota Service (`envoy.service.rate_limit_quota.v3`, RLQS) side of
//! Tollgate: Envoy's `rate_limit_quota` filter streams usage reports per bucket and is
//! answered with a token bucket or a blanket rule per bucket.
//!
//! This phase holds the pure parts the stream service builds on: `wire` (the messages as
//! they come off and go onto the wire) and `map` (a bucket id as a policy descriptor,
//! matched by the same matcher as the RLS path). The share arithmetic is
//! `algorithm::share`. Layers inside, top to bottom: `map`; `wire`.

pub mod map;
pub mod wire;
