//! The gRPC `envoy.service.ratelimit.v3.RateLimitService`: validate → match → charge → respond.
//!
//! One request takes one config snapshot (an `Arc`, held to the end), plans its descriptors
//! (`plan`), sends every charge to the store in one call under one deadline, and builds
//! the response (`respond`). This is the one place that maps errors to a gRPC `Status`:
//! only structurally invalid requests are errors; store failures are answered by the
//! domain's failure policy.
//!
//! Requests are decoded as `wire::RateLimitRequest` (domain, keys and values as bytes) by
//! `server::RateLimitServer`: Envoy sends header bytes that are not UTF-8, and a request
//! must never fail to decode because of them. A domain that is not UTF-8 is an unknown
//! domain; such keys and values are opaque bytes to the matcher and the key builder.
//!
//! Layers inside, top to bottom (`tests/layers.rs`): this file (the re-exports for callers
//! outside); `server`, `rlqs`; `limiter`; `dynamic_metadata`, `record`, `traced`; `respond`;
//! `headers`; `plan`; `bounds`; `wire`. A file here imports the file that holds an item,
//! never this file's re-export of it.

pub mod bounds;
pub mod dynamic_metadata;
pub mod headers;
pub mod plan;
pub(crate) mod record;
pub mod respond;
pub mod rlqs;
pub mod server;
pub mod traced;
pub mod wire;

mod limiter;

pub use limiter::{grpc_timeout, store_budget, validate, RateLimiter, Settings};
pub use server::RateLimitServer;
pub use wire::{RateLimitRequest, SERVICE_NAME};
