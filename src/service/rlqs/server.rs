//! The gRPC endpoint of `envoy.service.rate_limit_quota.v3.RateLimitQuotaService`, decoding
//! usage reports as `wire::RateLimitQuotaUsageReports` (bytes-typed: one bucket id that is
//! not UTF-8 must not fail a whole report), beside `ShouldRateLimit` on `--grpc-addr`.
//!
//! Routing only: a stream is handed to `stream::Streams`. The Envoy's name is the gRPC
//! initial metadata `x-tollgate-envoy` when it sends one (Envoy: `initial_metadata` of the
//! filter's `rlqs_server`), so that its claims follow it to another instance; otherwise
//! its address and a random part name one stream.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;

use envoy_types::pb::envoy::service::rate_limit_quota::v3::RateLimitQuotaResponse;
use tonic::codegen::{http, Body, BoxFuture, Context, Poll, Service, StdError};
use tonic::server::{Grpc, NamedService, StreamingService};
use tonic::{Request, Response, Status, Streaming};
use tonic_prost::ProstCodec;

use super::stream::{Streams, NAMED_PREFIX};
use super::wire::{RateLimitQuotaUsageReports, SERVICE_NAME};

/// The one method this service has.
const STREAM_RATE_LIMIT_QUOTAS: &str =
    "/envoy.service.rate_limit_quota.v3.RateLimitQuotaService/StreamRateLimitQuotas";

/// The metadata an Envoy names itself with.
pub const ENVOY_NAME_HEADER: &str = "x-tollgate-envoy";

/// Longest Envoy name taken from `x-tollgate-envoy`; a longer or non-printable one is
/// ignored (the stream is named by its address).
const MAX_NAME_BYTES: usize = 128;

/// The `RateLimitQuotaService` gRPC service, for `tonic::transport::Server::add_service`.
#[derive(Debug, Clone)]
pub struct QuotaServer {
    streams: Arc<Streams>,
}

impl QuotaServer {
    pub fn new(streams: Arc<Streams>) -> QuotaServer {
        QuotaServer { streams }
    }
}

impl NamedService for QuotaServer {
    const NAME: &'static str = SERVICE_NAME;
}

impl<B> Service<http::Request<B>> for QuotaServer
where
    B: Body + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        if request.uri().path() != STREAM_RATE_LIMIT_QUOTAS {
            return Box::pin(async { Ok(Status::unimplemented("unknown method").into_http()) });
        }
        let method = StreamQuotas(self.streams.clone());
        Box::pin(async move {
            let codec = ProstCodec::<RateLimitQuotaResponse, RateLimitQuotaUsageReports>::default();
            Ok(Grpc::new(codec).streaming(method, request).await)
        })
    }
}

/// The outbound side of one stream.
type Answers = Pin<Box<dyn futures_util::Stream<Item = Result<RateLimitQuotaResponse, Status>> + Send>>;

/// `StreamRateLimitQuotas` as tonic's streaming handler.
struct StreamQuotas(Arc<Streams>);

impl StreamingService<RateLimitQuotaUsageReports> for StreamQuotas {
    type Response = RateLimitQuotaResponse;
    type ResponseStream = Answers;
    type Future = BoxFuture<Response<Answers>, Status>;

    fn call(&mut self, request: Request<Streaming<RateLimitQuotaUsageReports>>) -> Self::Future {
        let streams = self.0.clone();
        Box::pin(async move {
            let holder = name(&request);
            let mut answers = streams.start(holder, request.into_inner())?;
            let outbound = futures_util::stream::poll_fn(move |cx| answers.poll_recv(cx));
            Ok(Response::new(Box::pin(outbound) as Answers))
        })
    }
}

/// The holder name of a stream: `x-tollgate-envoy` when usable, else the peer address and
/// a random part (a name no other stream has).
fn name<T>(request: &Request<T>) -> String {
    let given =
        request.metadata().get(ENVOY_NAME_HEADER).and_then(|value| value.to_str().ok()).filter(|name| {
            !name.is_empty() && name.len() <= MAX_NAME_BYTES && name.bytes().all(|b| b.is_ascii_graphic())
        });
    match given {
        Some(name) => format!("{NAMED_PREFIX}{name}"),
        None => {
            let peer = request.remote_addr().map_or_else(|| "unknown".to_string(), |addr| addr.to_string());
            format!("stream:{peer}#{:016x}", rand::random::<u64>())
        }
    }
}
