//! Header bytes that are not UTF-8, through the real Envoy: limited like any other value.
//!
//! Envoy copies header bytes ≥ 0x80 into descriptor values as they come. A server that
//! decodes values as proto3 `string` fails the whole request, and Envoy then fails open for
//! every descriptor of it — the attack of issue #12, item 1. Here a fail-closed domain with a
//! 3/minute limit on `x-username` (the `/login` route's actions of the shipped Envoy config)
//! must answer 200, 200, 200, 429 to a client whose header holds the byte 0xff.

use crate::harness::envoy::FilterOverrides;
use crate::harness::topology::Topology;

/// Replaces the shipped `login` policy: 3 per minute per (client address, username).
const LOGIN: &str = "\
domain: login
failure_mode: closed
descriptors:
  - key: remote_address
    descriptors:
      - key: username
        rate_limit: { name: per-user, unit: minute, requests_per_unit: 3 }
";

#[test]
fn a_header_value_that_is_not_utf8_is_limited_in_its_own_bucket() {
    let edge = Topology::start_with_policies(FilterOverrides::default(), &[("login.yaml", LOGIN)]);
    let user: &[(&str, &[u8])] = &[("x-username", b"\xff")];
    for k in 1..=3u64 {
        let ok = edge.get_bytes("/login", user);
        assert_eq!(ok.status, 200, "request {k}: {ok:#?}");
        // The limit headers prove Tollgate decided (a failing-open Envoy sends none).
        assert_eq!(ok.int_header("x-ratelimit-remaining"), 3 - k, "request {k}: {ok:#?}");
    }
    let denied = edge.get_bytes("/login", user);
    assert_eq!(denied.status, 429, "4th request with x-username: \\xff: {denied:#?}");
    assert_eq!(denied.header("x-upstream"), None);
    assert_eq!(edge.upstream.hits(), 3);

    // Envoy forwards the byte itself: another byte, and the text `\xff`, are other buckets
    // (a replacement character or an escape would have merged them with the first).
    for other in [&b"\xfe"[..], b"\\xff", b"\xff\xfe"] {
        let r = edge.get_bytes("/login", &[("x-username", other)]);
        assert_eq!(r.status, 200, "{other:?}: {r:#?}");
        assert_eq!(r.int_header("x-ratelimit-remaining"), 2, "{other:?} has its own bucket");
    }
    assert_eq!(edge.envoy.stat_or_zero("cluster.upstream.ratelimit.error"), 0, "{}", edge.envoy.log_tail());
}
