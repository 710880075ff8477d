//! An ADS management server (go-control-plane's snapshot-cache behaviour, over mTLS) and
//! the certificates of one test, shared by the test binaries that need a real xDS server:
//! included with `#[path = "../support/ads/mod.rs"] mod ads;` (or from `tests/api`).

pub mod certs;
pub mod server;
