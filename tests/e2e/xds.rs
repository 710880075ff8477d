//! Policies only over xDS, through a real Envoy: Tollgate runs with no policy file, reads
//! the `edge` domain from an ADS management server in the test (go-control-plane's
//! snapshot-cache behaviour, mTLS), Envoy's requests are limited by it, and a new snapshot
//! changes the limit without a restart.

use std::time::{Duration, Instant};

use envoy_types::pb::google::protobuf::Any;
use tollgate::config::xds::proto::RateLimitUnit;

use crate::ads::certs::Certs;
use crate::ads::server::ManagementServer;
use crate::harness::http;
use crate::harness::topology::{Changes, Topology, XdsSource};

/// Envoy's actions: the `x-api-key` header as the `api_key` descriptor.
const ACTIONS: &str = "
- actions:
    - request_headers: { header_name: x-api-key, descriptor_key: api_key }
";

/// The `edge` domain: `api_key` limited to `per_minute` a minute.
fn edge_domain(per_minute: u32) -> Any {
    crate::ads::resource("edge", "api_key", per_minute, RateLimitUnit::Minute)
}

/// The status codes of `n` requests with `x-api-key: key`.
fn codes(edge: &Topology, key: &str, n: usize) -> Vec<u16> {
    (0..n).map(|_| edge.get("/", &[("x-api-key", key)]).status).collect()
}

#[test]
fn envoy_is_limited_by_policies_that_arrive_only_over_xds_and_a_new_snapshot_changes_them() {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let certs = Certs::new();
    let server = runtime.block_on(ManagementServer::start(certs.server.clone()));
    server.set("1", vec![edge_domain(2)]);
    let edge = Topology::start_changed(Changes {
        vhost_rate_limits: Some(ACTIONS),
        xds: Some(XdsSource {
            server: server.addr,
            certs: certs.dir.path().to_path_buf(),
            san: "xds.test".into(),
        }),
        ..Changes::default()
    });
    let rlconfig = http::get(edge.tollgate.admin, "/rlconfig", &[]).body;
    assert!(
        rlconfig.starts_with("source: xds") && rlconfig.contains("acked version: 1"),
        "no policy file, the xDS snapshot serves: {rlconfig}"
    );
    assert_eq!(codes(&edge, "alice", 3), [200, 200, 429], "version 1: 2 per minute");

    // Version 2 raises the limit to 4: applied without a restart, Envoy's next requests
    // are decided by it (a key of its own: alice's bucket keeps its count).
    server.set("2", vec![edge_domain(4)]);
    let deadline = Instant::now() + Duration::from_secs(20);
    while !http::get(edge.tollgate.admin, "/rlconfig", &[]).body.contains("acked version: 2") {
        assert!(Instant::now() < deadline, "version 2 never acknowledged");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(codes(&edge, "bob", 5), [200, 200, 200, 200, 429], "version 2: 4 per minute");
    assert_eq!(edge.envoy.stat_or_zero("cluster.upstream.ratelimit.error"), 0, "{}", edge.envoy.log_tail());
    assert!(
        server.requests().iter().all(|r| r.error_detail.is_none()),
        "every response was acknowledged without a rejection"
    );
    drop(edge);
    drop(server);
}
