//! Operations, end to end on the in-process server: hot reload by every trigger, exact
//! metrics, `/rlconfig`, the status page (`/`, `/v1/status`, in a real browser too), gRPC
//! health and graceful stop, TLS and mTLS.
//!
//! Signals are not sent here (that would hit the test process): SIGHUP and SIGTERM are
//! tested against the real binary in `tests/ops_bin.rs`.

mod charge;
mod deploy;
mod domains;
mod hotkeys;
mod lifecycle;
mod metrics;
mod reload;
mod status;
mod tls;
mod usage;

use crate::support::*;

/// A one-domain policy: `user` limited to `per_user` per hour.
pub fn user_policy(per_user: u32) -> String {
    format!(
        "domain: api\ndescriptors:\n  - key: user\n    rate_limit: {{ name: per-user, unit: hour, requests_per_unit: {per_user} }}\n"
    )
}

/// The `requests_per_unit` serving `user=alice` now.
pub async fn user_limit(app: &TestApp) -> u32 {
    let response = app.check(request("api", &[&[("user", "alice")]])).await;
    limits(&response)[0]
}
