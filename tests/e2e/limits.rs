//! Limits envoyproxy/ratelimit never built, as Envoy sees them: several limits on one
//! descriptor (a denial by one charges none), `charge: all_or_nothing` (a request denied
//! by one descriptor charges none of the others), and windows of several units, whose
//! `current_limit` Envoy turns into its `x-ratelimit-*` headers.

use crate::harness::topology::{Changes, Topology};

/// Per API key: `tight` 2 per minute and `loose` 3 per hour; a request with `x-bypass`
/// adds a descriptor whose rule replaces `tight`, so only `loose` is charged.
const SEVERAL: &str = "\
domain: edge
descriptors:
  - key: api_key
    rate_limits:
      - { name: tight, unit: minute, requests_per_unit: 2 }
      - { name: loose, unit: hour, requests_per_unit: 3, algorithm: fixed_window }
  - key: bypass
    rate_limit: { name: bypass, unit: hour, requests_per_unit: 1000, replaces: [{ name: tight }] }
";

const SEVERAL_ACTIONS: &str = "
- actions:
    - request_headers: { header_name: x-api-key, descriptor_key: api_key }
- actions:
    - request_headers: { header_name: x-bypass, descriptor_key: bypass, skip_if_absent: true }
";

#[test]
fn a_descriptor_denied_by_one_limit_charges_none_of_the_others() {
    let edge = Topology::start_changed(Changes {
        policies: &[("edge.yaml", SEVERAL)],
        vhost_rate_limits: Some(SEVERAL_ACTIONS),
        ..Changes::default()
    });
    let key = [("x-api-key", "alice")];
    let codes: Vec<u16> = (0..3).map(|_| edge.get("/", &key).status).collect();
    assert_eq!(codes, [200, 200, 429], "tight (2 per minute) denies the third");
    // Envoy's headers name the limit that denied it: 2 per minute.
    let denied = edge.get("/", &key);
    assert_eq!(denied.status, 429);
    assert_eq!(denied.header("x-ratelimit-limit"), Some(r#"2, 2;w=60;name="tight""#), "{denied:#?}");
    // `loose` (3 per hour) was charged twice, not four times: with `tight` replaced, one
    // more request passes, and the next is denied by `loose`.
    let bypass = [("x-api-key", "alice"), ("x-bypass", "1")];
    let passed = edge.get("/", &bypass);
    assert_eq!(passed.status, 200, "loose still had 1 of 3: {passed:#?}");
    let over = edge.get("/", &bypass);
    assert_eq!(over.status, 429, "{over:#?}");
    let limit = over.header("x-ratelimit-limit").unwrap_or_default();
    assert!(limit.starts_with("3, ") && limit.contains(r#"3;w=3600;name="loose""#), "{over:#?}");
    assert_eq!(edge.envoy.stat_or_zero("cluster.upstream.ratelimit.error"), 0, "{}", edge.envoy.log_tail());
}

/// Per API key 2 per minute, per client address 3 per minute.
fn per_key_and_client(charge: &str) -> String {
    format!(
        "\
domain: edge
charge: {charge}
descriptors:
  - key: api_key
    rate_limit: {{ name: per-key, unit: minute, requests_per_unit: 2 }}
  - key: remote_address
    rate_limit: {{ name: per-client, unit: minute, requests_per_unit: 3 }}
"
    )
}

const KEY_AND_CLIENT_ACTIONS: &str = "
- actions:
    - request_headers: { header_name: x-api-key, descriptor_key: api_key }
- actions:
    - remote_address: {}
";

/// The client's codes for keys alice, alice, alice, bob, carol (one client address).
fn codes_for(charge: &str) -> Vec<u16> {
    let edge = Topology::start_changed(Changes {
        policies: &[("edge.yaml", &per_key_and_client(charge))],
        vhost_rate_limits: Some(KEY_AND_CLIENT_ACTIONS),
        ..Changes::default()
    });
    ["alice", "alice", "alice", "bob", "carol"]
        .into_iter()
        .map(|key| edge.get("/", &[("x-api-key", key)]).status)
        .collect()
}

#[test]
fn all_or_nothing_does_not_charge_the_client_for_a_request_its_key_denied() {
    // Per descriptor (the peer's behaviour): alice's third request is denied by her key but
    // still charges the client, so bob is the client's fourth request and is denied.
    assert_eq!(codes_for("per_descriptor"), [200, 200, 429, 429, 429]);
    // All or nothing: the denied request charged nothing; bob is the client's third.
    assert_eq!(codes_for("all_or_nothing"), [200, 200, 429, 200, 429]);
}

/// 2 per 30 seconds per API key (GCRA: both at once, then one every 15 s).
const WINDOW: &str = "\
domain: edge
descriptors:
  - key: api_key
    rate_limit: { name: per-key, unit: second, unit_multiplier: 30, requests_per_unit: 2 }
";

#[test]
fn a_window_of_30_seconds_reaches_envoy_as_its_per_minute_rate() {
    let edge = Topology::start_changed(Changes {
        policies: &[("edge.yaml", WINDOW)],
        vhost_rate_limits: Some(
            "\n- actions:\n    - request_headers: { header_name: x-api-key, descriptor_key: api_key }\n",
        ),
        ..Changes::default()
    });
    let key = [("x-api-key", "dave")];
    let first = edge.get("/", &key);
    assert_eq!(first.status, 200);
    // current_limit says 4 per minute (Envoy's units are whole units): its header.
    assert_eq!(first.header("x-ratelimit-limit"), Some(r#"4, 4;w=60;name="per-key""#), "{first:#?}");
    let codes: Vec<u16> = (0..2).map(|_| edge.get("/", &key).status).collect();
    assert_eq!(codes, [200, 429], "2 per 30 s: the third within the window is denied");
}
