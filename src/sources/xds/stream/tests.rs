//! The stream's state across answers, without a network: `Client::answer` on responses made
//! here, the compile step swapped for one that panics (no real input is known to panic the
//! compiler, so the seam is the `compile` field; the JoinError path is the production one).

use prost::Message;

use super::*;
use crate::config::xds::proto::{RateLimitConfig, RateLimitDescriptor, RateLimitPolicy, RateLimitUnit};
use crate::sources::serving::XdsState;
use crate::telemetry::metrics::Metrics;

fn client() -> Client {
    let live = Live::for_xds(LoadOptions::default(), Arc::new(Metrics::new()), XdsState::default());
    Client {
        settings: XdsSettings::new("127.0.0.1:1"),
        live: Arc::new(live),
        resources: Default::default(),
        acked: String::new(),
        received: watch::channel(false).0,
        compile,
    }
}

/// Domain `domain` (also the resource's name): `user` limited to `requests` per `unit`.
fn resource(domain: &str, requests: u32, unit: RateLimitUnit) -> Any {
    let config = RateLimitConfig {
        name: domain.into(),
        domain: domain.into(),
        descriptors: vec![RateLimitDescriptor {
            key: "user".into(),
            rate_limit: Some(RateLimitPolicy {
                unit: unit as i32,
                requests_per_unit: requests,
                ..Default::default()
            }),
            ..Default::default()
        }],
    };
    Any { type_url: TYPE_URL.into(), value: config.encode_to_vec() }
}

fn response(version: &str, resources: Vec<Any>) -> DiscoveryResponse {
    DiscoveryResponse {
        version_info: version.into(),
        resources,
        type_url: TYPE_URL.into(),
        nonce: format!("n{version}"),
        ..Default::default()
    }
}

/// The limit serving for `domain`, if it is configured.
fn serving(client: &Client, domain: &str) -> Option<u64> {
    let active = client.live.load();
    let domain = active.snapshot.domain(domain)?;
    domain.rules.first().and_then(|rule| rule.limits().first()).map(|limit| limit.params.limit)
}

#[tokio::test]
async fn a_panicking_compile_is_nacked_and_every_last_good_version_survives_it() {
    let mut client = client();
    let first = client
        .answer(response(
            "1",
            vec![resource("xds", 3, RateLimitUnit::Minute), resource("other", 5, RateLimitUnit::Minute)],
        ))
        .await;
    assert!(first.error_detail.is_none(), "{first:?}");

    client.compile = |_, _, _| panic!("planted: the compile step panics");
    let second = client.answer(response("2", vec![resource("other", 6, RateLimitUnit::Minute)])).await;
    let detail = second.error_detail.expect("the failed compile is NACKed").message;
    assert!(detail.contains("panicked"), "{detail}");
    assert_eq!((second.version_info.as_str(), second.response_nonce.as_str()), ("2", "n2"));
    assert_eq!((serving(&client, "xds"), serving(&client, "other")), (Some(3), Some(5)), "version 1 serves");
    let state = client.live.xds_state().expect("xds state");
    assert_eq!(state.acked_version.as_deref(), Some("1"));
    assert_eq!(state.last_nack.map(|n| n.version).as_deref(), Some("2"));

    // The compile works again: a bad `xds` finds the last good version the panic left alone.
    client.compile = compile;
    let third = client
        .answer(response(
            "3",
            vec![resource("xds", 9, RateLimitUnit::Unknown), resource("other", 6, RateLimitUnit::Minute)],
        ))
        .await;
    assert!(third.error_detail.is_some_and(|d| d.message.starts_with("xds: ")));
    assert_eq!(serving(&client, "xds"), Some(3), "xds keeps its last good version through the panic");
    assert_eq!(serving(&client, "other"), Some(6));
}
