//! Test harness: real processes on free loopback ports, each owned (and killed on drop) by
//! the test that started it.
//!
//! `topology` wires the compose demo's four parts without Docker: redis-server, the
//! `tollgate` binary, an in-test upstream and Envoy running the shipped `envoy/envoy.yaml`.
//! `rlqs` wires Tollgate as a Rate Limit Quota Service instead: two Envoys with the quota
//! filter, two Tollgates, one Redis; `load` drives and records paced traffic through them.

pub mod compose;
pub mod descriptors;
pub mod envoy;
pub mod http;
pub mod load;
pub mod process;
pub mod rlqs;
pub mod tollgate;
pub mod topology;
pub mod yaml;

use std::net::{Ipv4Addr, SocketAddr};

/// A loopback address on a port that was free a moment ago.
pub fn free_loopback() -> SocketAddr {
    SocketAddr::from((Ipv4Addr::LOCALHOST, crate::redis_support::free_port()))
}
