//! The gRPC endpoint of `envoy.service.ratelimit.v3.RateLimitService`, decoding requests
//! as `wire::RateLimitRequest`.
//!
//! envoy-types' generated `RateLimitServiceServer` decodes Envoy's own message, whose
//! `string` fields reject bytes that are not UTF-8 and so fail whole requests Envoy really
//! sends. This is the same endpoint (path, codec, message size limits, compression: none)
//! with our byte-typed message as the decoded type; the response stays Envoy's. Routing
//! only: every decision is `RateLimiter`'s.

use std::convert::Infallible;
use std::sync::Arc;

use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use tonic::codegen::{http, Body, BoxFuture, Context, Poll, Service, StdError};
use tonic::server::{Grpc, NamedService, UnaryService};
use tonic::{Request, Response, Status};
use tonic_prost::ProstCodec;

use super::limiter::RateLimiter;
use super::wire::{RateLimitRequest, SERVICE_NAME};

/// The one method this service has.
const SHOULD_RATE_LIMIT: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

/// The `RateLimitService` gRPC service, for `tonic::transport::Server::add_service`.
#[derive(Debug, Clone)]
pub struct RateLimitServer {
    limiter: Arc<RateLimiter>,
}

impl RateLimitServer {
    pub fn new(limiter: RateLimiter) -> RateLimitServer {
        RateLimitServer { limiter: Arc::new(limiter) }
    }
}

impl NamedService for RateLimitServer {
    const NAME: &'static str = SERVICE_NAME;
}

impl<B> Service<http::Request<B>> for RateLimitServer
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
        if request.uri().path() != SHOULD_RATE_LIMIT {
            return Box::pin(async { Ok(Status::unimplemented("unknown method").into_http()) });
        }
        let method = ShouldRateLimit(self.limiter.clone());
        Box::pin(async move {
            let codec = ProstCodec::<RateLimitResponse, RateLimitRequest>::default();
            Ok(Grpc::new(codec).unary(method, request).await)
        })
    }
}

/// `ShouldRateLimit` as tonic's unary handler.
struct ShouldRateLimit(Arc<RateLimiter>);

impl UnaryService<RateLimitRequest> for ShouldRateLimit {
    type Response = RateLimitResponse;
    type Future = BoxFuture<Response<RateLimitResponse>, Status>;

    fn call(&mut self, request: Request<RateLimitRequest>) -> Self::Future {
        let limiter = self.0.clone();
        Box::pin(async move { limiter.should_rate_limit(request).await })
    }
}
