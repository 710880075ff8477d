//! A client that leaves out a header must not skip the other limits of its request.
//!
//! With `skip_if_absent: true` on every action of a `rate_limits` entry, Envoy still calls
//! the service when none applied, with a descriptor that has no entries. Answering that
//! request INVALID_ARGUMENT made Envoy's `failure_mode_deny` (allow, by default) decide for
//! every descriptor of it: the per-client limit was skipped by leaving out `x-tenant`.

use crate::harness::topology::{Changes, Topology};

/// Per client address, 2 per minute; per tenant (a header the client may omit), 100.
const EDGE: &str = "\
domain: edge
descriptors:
  - key: remote_address
    rate_limit: { name: per-client, unit: minute, requests_per_unit: 2 }
  - key: tenant
    rate_limit: { name: per-tenant, unit: minute, requests_per_unit: 100 }
";

const RATE_LIMITS: &str = "
- actions:
    - request_headers: { header_name: x-tenant, descriptor_key: tenant, skip_if_absent: true }
- actions:
    - remote_address: {}
";

#[test]
fn leaving_out_a_skippable_header_skips_no_other_limit() {
    let edge = Topology::start_changed(Changes {
        policies: &[("edge.yaml", EDGE)],
        vhost_rate_limits: Some(RATE_LIMITS),
        ..Changes::default()
    });
    let codes: Vec<u16> = (0..3).map(|_| edge.get("/", &[]).status).collect();
    assert_eq!(codes, [200, 200, 429], "the per-client limit holds without x-tenant");
    let with_tenant = edge.get("/", &[("x-tenant", "acme")]).status;
    assert_eq!(with_tenant, 429, "and with it: the client is over its own limit either way");
}
