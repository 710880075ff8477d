//! The real `tollgate` binary started as envoyproxy/ratelimit is: through a link named
//! `ratelimit` (Envoy Gateway runs `/bin/ratelimit` with no arguments) and with nothing but
//! the peer's environment (`env_clear`, then exactly the variables given).
//!
//! `envoy_gateway` is issue 25's "environment table" test: exactly the environment Envoy
//! Gateway generates, on the peer's fixed ports (its probes, Service and scrape annotations
//! use them), talking to a real ADS server (`tests/support/ads`) over mTLS with
//! certificates shaped as Envoy Gateway's. `peer_mode` covers peer-mode variables Envoy
//! Gateway does not set (a client CA, a file config, Redis) on free ports. `pki` makes the
//! certificates, `process` runs the binary.
//!
//! Certificates are made by the `openssl` command line as Envoy Gateway's certgen makes
//! them (`internal/crypto/certgen.go`): RSA 2048 keys written as PKCS#1
//! (`-----BEGIN RSA PRIVATE KEY-----`), a CA whose CN is `envoy-gateway`, leaves with no
//! extended key usage and the key usage digitalSignature, dataEncipherment,
//! keyEncipherment, contentCommitment (nonRepudiation), marked critical as Go marks it.

#[allow(dead_code)]
#[path = "support/ads/mod.rs"]
mod ads;
#[allow(dead_code)]
#[path = "support/redis.rs"]
mod redis_support;
#[allow(dead_code)]
#[path = "api/support.rs"]
mod support;

#[path = "peer_env/admin_exposure.rs"]
mod admin_exposure;
#[path = "peer_env/envoy_gateway.rs"]
mod envoy_gateway;
#[path = "peer_env/peer_mode.rs"]
mod peer_mode;
#[path = "peer_env/pki.rs"]
mod pki;
#[path = "peer_env/process.rs"]
mod process;

use std::net::SocketAddr;
use std::time::Duration;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Identity};

use support::request;

/// Long enough for a loaded CI machine; every wait polls a condition.
const PATIENCE: Duration = Duration::from_secs(30);

/// The SANs of the `envoy-rate-limit` certificate the tests make: Envoy Gateway's on
/// Kubernetes (`*.<namespace>`) and in host mode (`localhost`). The tests' clients verify
/// `localhost`: rustls (webpki) refuses to match a wildcard followed by a single label, so
/// no name verifies against `*.envoy-gateway-system` alone for a rustls client.
const RLS_SANS: &[&str] = &["*.envoy-gateway-system", "localhost"];

/// The name the tests' gRPC clients verify.
const RLS_NAME: &str = "localhost";

fn local(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// A gRPC client over TLS trusting `ca`, verifying the name [`RLS_NAME`], presenting
/// `identity` if given.
async fn rls_client(
    port: u16,
    ca: Vec<u8>,
    identity: Option<Identity>,
) -> Result<RateLimitServiceClient<Channel>, tonic::transport::Error> {
    let mut tls = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(ca)).domain_name(RLS_NAME);
    if let Some(identity) = identity {
        tls = tls.identity(identity);
    }
    let channel = Channel::from_shared(format!("https://{}", local(port)))
        .expect("uri")
        .tls_config(tls)?
        .connect()
        .await?;
    Ok(RateLimitServiceClient::new(channel))
}

/// The overall codes of `n` requests for `user` in `domain`.
async fn codes(
    client: &mut RateLimitServiceClient<Channel>,
    domain: &str,
    user: &str,
    n: usize,
) -> Vec<Code> {
    let mut codes = Vec::new();
    for _ in 0..n {
        let answer =
            client.should_rate_limit(request(domain, &[&[("user", user)]])).await.expect("ShouldRateLimit");
        codes.push(Code::try_from(answer.into_inner().overall_code).expect("a code"));
    }
    codes
}
