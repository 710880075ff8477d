//! The Rate Limit Quota Service (`envoy.service.rate_limit_quota.v3`, RLQS) side of
//! Tollgate: Envoy's `rate_limit_quota` filter streams usage reports per bucket and is
//! answered with a token bucket or a blanket rule per bucket, enforced inside Envoy.
//! The same policies and the same store buckets as the RLS path: one budget for both.
//!
//! Layers inside, top to bottom: `server` (the gRPC endpoint); `stream` (one task per
//! stream: reports, wake-ups, pushes, bounds); `quota` (one bucket's assignment: charge,
//! ledger, share, failure policy); `map` (a bucket id as a policy descriptor); `wire` (the
//! messages as they come off and go onto the wire). The share arithmetic is
//! `algorithm::share`, the claims ledger `store::rlqs`.

pub mod map;
pub mod quota;
pub mod server;
pub mod stream;
pub mod wire;

pub use quota::Quota;
pub use server::QuotaServer;
pub use stream::Streams;
