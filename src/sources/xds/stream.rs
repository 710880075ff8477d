//! One ADS stream at a time, state of the world, wildcard: the first request subscribes to
//! every `RateLimitConfig`; each response is decoded whole, applied per resource and answered.
//!
//! Every request carries the node (id and metadata), the type URL and no resource names; the
//! subscription carries the `version_info` last acknowledged, each answer the
//! `response_nonce` of the response it answers. The answer to a response of our type always
//! carries that response's `version_info`, so that go-control-plane, which compares only
//! versions, does not resend it in a loop; an `error_detail` (code INVALID_ARGUMENT) says
//! what of it was not applied:
//! - every resource decodes: what serves is built from it (every resource that compiled;
//!   for a rejected one its last good version, or nothing), and the detail names each
//!   rejected resource with its rule path and field (a partial ACK);
//! - some resource does not decode or is of another type, or the compile step failed (it
//!   panicked): nothing of it applies, every last good version keeps serving, and the
//!   detail names each bad slot by index and type URL (a NACK; the version acknowledged
//!   stays the previous one in the state, the metrics and the next subscription).
//!
//! The last good versions are never moved out of the client: the compile step reads them
//! through an `Arc` and returns the next state, so a compile that panics (or an answer that
//! is cancelled) leaves them whole. A response of another type is NACKed with the previous
//! version.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};
use envoy_types::pb::google::protobuf::{value::Kind, Any, Struct, Value};
use envoy_types::pb::google::rpc::Status;
use tokio::sync::{mpsc, watch};
use tonic::metadata::{MetadataKey, MetadataValue};

use crate::config::xds::{decode, Applied, Resources, Undecodable, TYPE_URL};
use crate::config::LoadOptions;
use crate::sources::serving::{Live, Nack};
use crate::telemetry::metrics::xds::XdsResult;

use super::backoff::Backoff;
use super::channel::connect;
use super::settings::XdsSettings;

/// gRPC's INVALID_ARGUMENT, the code of the `error_detail` of a rejection.
const INVALID_ARGUMENT: i32 = 3;

/// Why a stream ended.
enum Ended {
    /// No connection: retry after `connect_retry`.
    Connect(String),
    /// The stream broke (or the server closed it): retry after the backoff; `applied` when
    /// it had delivered a response.
    Stream { error: String, applied: bool },
}

/// The client's state across streams.
struct Client {
    settings: XdsSettings,
    live: Arc<Live>,
    /// The last good version of every resource. Shared with the compile task, never moved
    /// into it: replaced only once a compile has returned.
    resources: Arc<Resources>,
    /// `version_info` last acknowledged ("" before the first).
    acked: String,
    received: watch::Sender<bool>,
    /// The compile step ([`compile`]); a field only so that a test can make it panic.
    compile: Compile,
}

/// Compiles one response's resources against the last good versions, leaving them as they
/// are: the next state is `Applied::resources`.
type Compile = fn(&Resources, &[Any], &LoadOptions) -> Result<Applied, Undecodable>;

/// The compile step: every resource decoded (any slot that does not decode rejects the
/// response whole), then compiled per resource.
fn compile(state: &Resources, resources: &[Any], options: &LoadOptions) -> Result<Applied, Undecodable> {
    let configs = decode(resources.iter().map(|r| (r.type_url.as_str(), r.value.as_slice())))?;
    Ok(state.apply(configs, options))
}

/// Connects, serves streams and reconnects until `stop` flips to true.
pub async fn run(
    settings: XdsSettings,
    live: Arc<Live>,
    received: watch::Sender<bool>,
    mut stop: watch::Receiver<bool>,
) {
    let mut backoff = Backoff::new(settings.backoff);
    let mut client =
        Client { settings, live, resources: Arc::default(), acked: String::new(), received, compile };
    loop {
        let ended = tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            ended = client.stream() => ended,
        };
        let (error, wait) = match ended {
            Ended::Connect(error) => (error, client.settings.connect_retry),
            Ended::Stream { error, applied } => {
                if applied {
                    backoff.reset();
                }
                (error, backoff.next())
            }
        };
        tracing::warn!(server = %client.settings.server, %error, retry_in_ms = wait.as_millis() as u64,
            "xDS stream ended; the last good config keeps serving");
        client.live.update_xds(|state| {
            state.connected = false;
            state.last_stream_error = Some(error);
        });
        client.live.metrics().xds().connected(false);
        tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            _ = tokio::time::sleep(wait) => {}
        }
    }
}

impl Client {
    /// One stream, until it breaks.
    async fn stream(&mut self) -> Ended {
        let channel = match connect(&self.settings).await {
            Ok(channel) => channel,
            Err(error) => return Ended::Connect(error),
        };
        let mut ads = AggregatedDiscoveryServiceClient::new(channel)
            .max_decoding_message_size(self.settings.max_message_bytes);
        let (requests, outbound) = mpsc::channel::<DiscoveryRequest>(4);
        // The subscription: the last acknowledged version, no nonce (it would be another
        // stream's), no resource names (wildcard).
        let first = self.request(self.acked.clone(), String::new(), None);
        if requests.send(first).await.is_err() {
            return Ended::Stream { error: "request channel closed".into(), applied: false };
        }
        let outbound = futures_util::stream::unfold(outbound, |mut rx| async move {
            rx.recv().await.map(|request| (request, rx))
        });
        let mut request = tonic::Request::new(outbound);
        for (key, value) in &self.settings.headers {
            // Checked at start-up (`app`), so a failure here only skips the header.
            if let (Ok(key), Ok(value)) =
                (MetadataKey::from_bytes(key.as_bytes()), MetadataValue::try_from(value))
            {
                request.metadata_mut().insert(key, value);
            }
        }
        let mut inbound = match ads.stream_aggregated_resources(request).await {
            Ok(response) => response.into_inner(),
            Err(status) => return Ended::Stream { error: status_text(&status), applied: false },
        };
        self.live.update_xds(|state| state.connected = true);
        self.live.metrics().xds().connected(true);
        tracing::info!(server = %self.settings.server, node = %self.settings.node_id, "xDS stream open");
        let mut applied = false;
        loop {
            let response = match inbound.message().await {
                Ok(Some(response)) => response,
                Ok(None) => return Ended::Stream { error: "the server closed the stream".into(), applied },
                Err(status) => return Ended::Stream { error: status_text(&status), applied },
            };
            let answer = self.answer(response).await;
            applied = true;
            if requests.send(answer).await.is_err() {
                return Ended::Stream { error: "request channel closed".into(), applied };
            }
        }
    }

    /// Applies one response and makes its ACK (or partial ACK, or NACK).
    async fn answer(&mut self, response: DiscoveryResponse) -> DiscoveryRequest {
        let DiscoveryResponse { version_info: version, resources, type_url, nonce, .. } = response;
        if type_url != TYPE_URL {
            let message = format!("unexpected type_url {type_url:?} (subscribed to {TYPE_URL})");
            self.rejected(XdsResult::Nack, &version, &nonce, &message, Vec::new());
            return self.request(self.acked.clone(), nonce, Some(message));
        }
        let (state, compile, options) = (Arc::clone(&self.resources), self.compile, *self.live.options());
        // Compiling is CPU work: off the async workers.
        let job = tokio::task::spawn_blocking(move || compile(&state, &resources, &options));
        let applied = match job.await {
            Ok(Ok(applied)) => applied,
            Ok(Err(undecodable)) => return self.refuse(version, nonce, undecodable.to_string()),
            Err(e) => {
                let message = format!(
                    "response rejected as a whole, nothing of it applied (every last good version serves): \
                     compiling it failed: {e}"
                );
                return self.refuse(version, nonce, message);
            }
        };
        self.apply(version, nonce, applied)
    }

    /// Applies nothing of a response: answers it with its version and `message` (a NACK),
    /// the last good versions and the version acknowledged unchanged.
    fn refuse(&self, version: String, nonce: String, message: String) -> DiscoveryRequest {
        self.rejected(XdsResult::Nack, &version, &nonce, &message, Vec::new());
        self.request(version, nonce, Some(message))
    }

    /// Serves what `applied` built, keeps its state, and makes the ACK (or partial ACK).
    fn apply(&mut self, version: String, nonce: String, mut applied: Applied) -> DiscoveryRequest {
        self.resources = Arc::new(std::mem::take(&mut applied.resources));
        let names: Vec<String> = applied.rejected.iter().map(|r| r.name.clone()).collect();
        let rejection = applied.rejection_text();
        let domains = applied.snapshot.domains.len();
        self.live.apply_xds(applied.snapshot);
        self.acked = version.clone();
        match &rejection {
            Some(message) => {
                tracing::error!(%version, rejected = ?names,
                    "xDS resources rejected (their last good version keeps serving, if any); the rest applied:\n{message}");
                self.rejected(XdsResult::Partial, &version, &nonce, message, names);
            }
            None => {
                tracing::info!(%version, domains, "xDS snapshot applied");
                self.live.metrics().xds().answered(XdsResult::Ack, &version, &[]);
                self.live.update_xds(|state| state.rejected.clear());
            }
        }
        self.live.update_xds(|state| {
            state.snapshot_received = true;
            state.acked_version = Some(version.clone());
        });
        self.received.send_replace(true);
        self.request(version, nonce, rejection)
    }

    /// Records a rejection in the state and the metrics.
    fn rejected(&self, result: XdsResult, version: &str, nonce: &str, message: &str, names: Vec<String>) {
        if result == XdsResult::Nack {
            tracing::error!(%version, "xDS response rejected: {message}");
        }
        self.live.metrics().xds().answered(result, version, &names);
        let at = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap_or(Duration::ZERO).as_secs();
        let nack =
            Nack { at, version: version.to_owned(), nonce: nonce.to_owned(), message: message.to_owned() };
        self.live.update_xds(|state| {
            state.last_nack = Some(nack);
            if result != XdsResult::Nack {
                state.rejected = names;
            }
        });
    }

    fn request(
        &self,
        version_info: String,
        response_nonce: String,
        error: Option<String>,
    ) -> DiscoveryRequest {
        DiscoveryRequest {
            version_info,
            node: Some(self.node()),
            type_url: TYPE_URL.to_owned(),
            response_nonce,
            error_detail: error.map(|message| Status {
                code: INVALID_ARGUMENT,
                message,
                details: Vec::new(),
            }),
            ..Default::default()
        }
    }

    /// The node, on every request as the peer sends it: id and string-valued metadata.
    fn node(&self) -> Node {
        let fields = self
            .settings
            .node_metadata
            .iter()
            .map(|(k, v)| (k.clone(), Value { kind: Some(Kind::StringValue(v.clone())) }))
            .collect();
        Node { id: self.settings.node_id.clone(), metadata: Some(Struct { fields }), ..Default::default() }
    }
}

fn status_text(status: &tonic::Status) -> String {
    format!("{:?}: {}", status.code(), status.message())
}

#[cfg(test)]
mod tests;
