//! A response the client cannot read whole — a resource whose bytes do not decode, or of a
//! foreign type — is rejected whole, against the real management server of
//! `tests/support/ads`: nothing of it applies, every last good version keeps serving, and the
//! answer's `error_detail` names the slot (index and type URL). A decodable but invalid
//! domain is still rejected alone (its last good version kept, the others applied).

use envoy_types::pb::envoy::service::discovery::v3::DiscoveryRequest;
use tollgate::config::xds::proto::RateLimitUnit;
use tollgate::config::xds::TYPE_URL;

use super::{acked, allowed, good, resource, spawn, PATIENCE};
use crate::ads::certs::Certs;
use crate::ads::server::ManagementServer;
use crate::ads::{cut_short, raw};
use crate::support::{eventually, metric, TestApp};

/// A type URL the client did not subscribe to.
const CLUSTER: &str = "type.googleapis.com/envoy.config.cluster.v3.Cluster";

/// The client's answer to the response with `nonce`, once it has come.
async fn answer_to(server: &ManagementServer, nonce: &str) -> DiscoveryRequest {
    let find = || server.requests().into_iter().find(|r| r.response_nonce == nonce);
    assert!(eventually(PATIENCE, || async { find().is_some() }).await, "no answer to response {nonce}");
    find().expect("the answer")
}

/// The `error_detail` of `answer`, a whole rejection of the response of `version`: the
/// answer carries that version (go-control-plane parks it instead of resending in a loop)
/// and INVALID_ARGUMENT.
fn rejection(answer: DiscoveryRequest, version: &str) -> String {
    assert_eq!(answer.version_info, version, "{answer:?}");
    let detail = answer.error_detail.expect("a rejection carries an error_detail");
    assert_eq!(detail.code, 3, "INVALID_ARGUMENT: {detail:?}");
    detail.message
}

/// The metric `series`, which must be exported.
async fn exported(app: &TestApp, series: &str) -> f64 {
    let metrics = app.metrics().await;
    metric(&metrics, series).unwrap_or_else(|| panic!("{series} is not exported:\n{metrics}"))
}

#[tokio::test]
async fn a_resource_that_does_not_decode_rejects_the_whole_response_and_every_last_good_version_serves() {
    let certs = Certs::new();
    let mut server = ManagementServer::start(certs.server.clone()).await;
    server.set("1", vec![good("xds", 3), good("other", 5)]);
    let app = spawn(&server, &certs, false).await;
    assert!(acked(&app, "1").await);
    assert_eq!(allowed(&app, "xds", "u1", 5).await, 3);

    // Version 2: `other` changes, and `xds`'s slot holds bytes that do not decode.
    server.set("2", vec![cut_short(good("xds", 3)), good("other", 7)]);
    let answer = answer_to(&server, "2").await;
    assert_eq!(allowed(&app, "xds", "u2", 5).await, 3, "xds keeps limiting at 3/min");
    assert_eq!(allowed(&app, "other", "u2", 9).await, 5, "nothing of version 2 applied");
    let detail = rejection(answer, "2");
    assert!(detail.contains(&format!("resources[0] ({TYPE_URL}): cannot decode")), "{detail}");
    assert!(detail.contains("rejected as a whole"), "{detail}");
    assert!(acked(&app, "1").await, "version 1 is still what serves");
    assert_eq!(exported(&app, "tollgate_xds_responses_total{result=\"nack\"}").await, 1.0);
    assert_eq!(exported(&app, "tollgate_xds_acked_version_info{version=\"1\"}").await, 1.0);
    let rlconfig = app.admin("GET", "/rlconfig").await.body;
    assert!(rlconfig.contains("acked version: 1") && rlconfig.contains("last nack: version 2"), "{rlconfig}");
    // No resend loop with a go-control-plane server: each version was sent once.
    assert_eq!(server.responses(), [("1".to_string(), "1".to_string()), ("2".to_string(), "2".to_string())]);

    // The next good snapshot applies as usual.
    server.set("3", vec![good("xds", 4)]);
    assert!(eventually(PATIENCE, || acked(&app, "3")).await, "version 3 acknowledged");
    assert_eq!(allowed(&app, "xds", "u3", 9).await, 4);
    assert_eq!(allowed(&app, "other", "u3", 9).await, 9, "other left out of version 3: removed");
    server.stop().await;
}

#[tokio::test]
async fn a_foreign_type_or_an_undecodable_beside_an_invalid_domain_rejects_the_whole_response() {
    let certs = Certs::new();
    let mut server = ManagementServer::start(certs.server.clone()).await;
    server.set("1", vec![good("xds", 3), good("other", 5)]);
    let app = spawn(&server, &certs, false).await;
    assert!(acked(&app, "1").await);

    // Version 2: `other`'s slot holds a resource of a foreign type (a valid one's bytes).
    let foreign = raw(CLUSTER, &good("other", 7).value);
    server.set("2", vec![good("xds", 4), foreign]);
    let answer = answer_to(&server, "2").await;
    assert_eq!(allowed(&app, "xds", "u2", 9).await, 3, "xds's change in version 2 not applied");
    assert_eq!(allowed(&app, "other", "u2", 9).await, 5, "other keeps its last good version");
    let detail = rejection(answer, "2");
    assert!(detail.contains(&format!("resources[1] ({CLUSTER}): unexpected resource type")), "{detail}");

    // Version 3: `xds` decodes but is invalid, `other` changes, and slot 2 does not decode.
    let undecodable = raw(TYPE_URL, b"\xff\xff");
    server.set("3", vec![resource("xds", 9, RateLimitUnit::Unknown), good("other", 7), undecodable]);
    let answer = answer_to(&server, "3").await;
    assert_eq!(allowed(&app, "xds", "u3", 9).await, 3);
    assert_eq!(allowed(&app, "other", "u3", 9).await, 5, "nothing of version 3 applied");
    let detail = rejection(answer, "3");
    assert!(detail.contains(&format!("resources[2] ({TYPE_URL}): cannot decode")), "{detail}");
    assert!(!detail.contains("resources[0]") && !detail.contains("resources[1]"), "{detail}");
    assert_eq!(exported(&app, "tollgate_xds_responses_total{result=\"nack\"}").await, 2.0);

    // Version 4: the invalid domain alone is the per-domain rule: its last good version
    // (kept through both rejections) serves, the rest applies.
    server.set("4", vec![resource("xds", 9, RateLimitUnit::Unknown), good("other", 7)]);
    assert!(eventually(PATIENCE, || acked(&app, "4")).await, "version 4 acknowledged");
    assert_eq!(allowed(&app, "xds", "u4", 9).await, 3, "xds keeps its last good version");
    assert_eq!(allowed(&app, "other", "u4", 9).await, 7, "other applied");
    let detail = answer_to(&server, "4").await.error_detail.expect("xds rejected").message;
    assert!(detail.starts_with("xds: descriptors[0].rate_limit.unit:"), "{detail}");
    assert_eq!(exported(&app, "tollgate_xds_responses_total{result=\"partial\"}").await, 1.0);
    assert_eq!(exported(&app, "tollgate_xds_rejected_resources{resource=\"xds\"}").await, 1.0);
    server.stop().await;
}
