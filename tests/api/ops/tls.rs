//! gRPC over TLS and mTLS, with throwaway certificates made by the `openssl` command line
//! (a CA, a server certificate for localhost/127.0.0.1, a client certificate).

use std::path::{Path, PathBuf};
use std::process::Command;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use tollgate::app::{StoreKind, TlsFiles};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Identity};

use super::{user_limit, user_policy};
use crate::support::*;

/// Runs `openssl` in `dir` with whitespace-separated arguments.
fn openssl(dir: &Path, args: &str) {
    let args: Vec<&str> = args.split_whitespace().collect();
    let out =
        Command::new("openssl").args(&args).current_dir(dir).output().expect("openssl must be installed");
    assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

const EC_KEY: &str = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";

/// `name`.pem / `name`.key, signed by the CA in `dir`, with the given X.509 extensions.
fn sign(dir: &Path, name: &str, subject: &str, extensions: &str) {
    std::fs::write(dir.join(format!("{name}.ext")), extensions).expect("write ext");
    openssl(dir, &format!("req {EC_KEY} -keyout {name}.key -out {name}.csr -subj {subject}"));
    openssl(
        dir,
        &format!(
            "x509 -req -in {name}.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
             -out {name}.pem -extfile {name}.ext"
        ),
    );
}

struct Certs {
    dir: tempfile::TempDir,
}

impl Certs {
    fn new() -> Certs {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path();
        openssl(
            p,
            &format!("req -x509 {EC_KEY} -keyout ca.key -out ca.pem -days 2 -subj /CN=tollgate-test-CA"),
        );
        sign(
            p,
            "server",
            "/CN=localhost",
            "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n",
        );
        sign(p, "client", "/CN=envoy", "extendedKeyUsage=clientAuth\n");
        Certs { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn read(&self, name: &str) -> Vec<u8> {
        std::fs::read(self.path(name)).expect("read cert")
    }

    fn server(&self, client_ca: bool) -> TlsFiles {
        TlsFiles {
            cert: self.path("server.pem"),
            key: self.path("server.key"),
            client_ca: client_ca.then(|| self.path("ca.pem")),
        }
    }

    /// A TLS client that trusts the CA, with the client certificate when `identity`.
    async fn client(
        &self,
        addr: std::net::SocketAddr,
        identity: bool,
    ) -> Result<RateLimitServiceClient<Channel>, tonic::transport::Error> {
        Ok(RateLimitServiceClient::new(self.channel(addr, identity).await?))
    }

    /// A TLS channel that trusts the CA, with the client certificate when `identity`.
    async fn channel(
        &self,
        addr: std::net::SocketAddr,
        identity: bool,
    ) -> Result<Channel, tonic::transport::Error> {
        let mut tls = ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(self.read("ca.pem")))
            .domain_name("localhost");
        if identity {
            tls = tls.identity(Identity::from_pem(self.read("client.pem"), self.read("client.key")));
        }
        Channel::from_shared(format!("https://{addr}")).expect("uri").tls_config(tls)?.connect().await
    }
}

async fn tls_app(certs: &Certs, client_ca: bool) -> TestApp {
    let options = Options { tls: Some(certs.server(client_ca)), ..Options::new(StoreKind::Memory) };
    spawn_with(options, &[("api.yaml", &user_policy(7))]).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_serves_a_client_that_trusts_the_ca() {
    let certs = Certs::new();
    let mut app = tls_app(&certs, false).await;
    let addr = app.running.as_ref().expect("running").grpc_addr;
    app.client = certs.client(addr, false).await.expect("TLS connect");
    assert_eq!(user_limit(&app).await, 7);
    // Plaintext gRPC is not served on a TLS port.
    let plain = RateLimitServiceClient::connect(format!("http://{addr}")).await;
    let refused = match plain {
        Err(_) => true,
        Ok(mut client) => client.should_rate_limit(request("api", &[&[("user", "a")]])).await.is_err(),
    };
    assert!(refused, "a plaintext client was served on the TLS port");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mtls_rejects_a_client_without_a_certificate() {
    let certs = Certs::new();
    let mut app = tls_app(&certs, true).await;
    let addr = app.running.as_ref().expect("running").grpc_addr;
    let anonymous = match certs.client(addr, false).await {
        Err(_) => true,
        Ok(mut client) => client.should_rate_limit(request("api", &[&[("user", "a")]])).await.is_err(),
    };
    assert!(anonymous, "a client without a certificate was served");
    app.client = certs.client(addr, true).await.expect("mTLS connect");
    assert_eq!(user_limit(&app).await, 7);
}

/// One immediate RLQS report of `{user: a}` on `channel`: the assignment's `max_tokens`.
async fn rlqs_tokens(channel: Channel) -> Result<u32, tonic::Status> {
    use envoy_types::pb::envoy::r#type::v3::rate_limit_strategy::Strategy;
    use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::bucket_action::BucketAction as Kind;
    use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_client::RateLimitQuotaServiceClient;
    use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_usage_reports::BucketQuotaUsage;
    use envoy_types::pb::envoy::service::rate_limit_quota::v3::{BucketId, RateLimitQuotaUsageReports};
    let usage = BucketQuotaUsage {
        bucket_id: Some(BucketId { bucket: [("user".to_string(), "a".to_string())].into() }),
        time_elapsed: Some(Default::default()),
        num_requests_allowed: 1,
        num_requests_denied: 0,
    };
    let report = RateLimitQuotaUsageReports { domain: "api".into(), bucket_quota_usages: vec![usage] };
    // One report, then the stream stays open (as Envoy keeps it) until the answer is read.
    use futures_util::StreamExt;
    let outbound = futures_util::stream::iter([report]).chain(futures_util::stream::pending());
    let mut answers =
        RateLimitQuotaServiceClient::new(channel).stream_rate_limit_quotas(outbound).await?.into_inner();
    let response = answers.message().await?.ok_or_else(|| tonic::Status::unknown("stream ended"))?;
    let action = response.bucket_action.into_iter().next().and_then(|a| a.bucket_action);
    match action {
        Some(Kind::QuotaAssignmentAction(a)) => match a.rate_limit_strategy.and_then(|s| s.strategy) {
            Some(Strategy::TokenBucket(bucket)) => Ok(bucket.max_tokens),
            other => Err(tonic::Status::unknown(format!("not a token bucket: {other:?}"))),
        },
        other => Err(tonic::Status::unknown(format!("not an assignment: {other:?}"))),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rlqs_is_served_over_mtls_as_rls_is_and_refused_without_a_certificate() {
    let certs = Certs::new();
    let app = tls_app(&certs, true).await;
    let addr = app.running.as_ref().expect("running").grpc_addr;
    let anonymous = match certs.channel(addr, false).await {
        Err(_) => true,
        Ok(channel) => rlqs_tokens(channel).await.is_err(),
    };
    assert!(anonymous, "an RLQS stream without a client certificate was served");
    let channel = certs.channel(addr, true).await.expect("mTLS connect");
    assert_eq!(rlqs_tokens(channel).await.expect("an assignment"), 6, "7 a unit less the first request");
}
