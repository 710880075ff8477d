//! An ADS management server for the tests, behaving as go-control-plane's snapshot cache
//! (the server Envoy Gateway runs) for one wildcard type: per-stream nonces "1", "2", …;
//! a request with a stale nonce is ignored; a request whose version differs from the
//! snapshot's is answered at once with every resource (so a NACK carrying the old version
//! is answered by a resend); the first request on a stream is answered when the snapshot
//! has resources; otherwise the request waits for the next snapshot. It serves over mTLS
//! and can be stopped (every stream broken, the port closed) and started again.
//! `start_as_envoy_gateway` sets its TLS up as Envoy Gateway's ratelimit xDS server does
//! (TLS 1.3 only, a client certificate required and verified, ALPN `h2`) and records every
//! handshake.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_server::{
    AggregatedDiscoveryService, AggregatedDiscoveryServiceServer,
};
use envoy_types::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse, DiscoveryRequest, DiscoveryResponse,
};
use envoy_types::pb::google::protobuf::Any;
use futures_util::Stream;
use tokio::net::TcpStream;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio_rustls::server::TlsStream;
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Certificate, Identity, ServerTlsConfig};
use tonic::{Request, Response, Status, Streaming};

/// The snapshot: version and resources.
pub type Snapshot = (String, Vec<Any>);

/// What every server generation shares: the snapshot, and what was received and sent.
#[derive(Default)]
pub struct Log {
    pub requests: Vec<DiscoveryRequest>,
    /// (version, nonce) of every response sent.
    pub responses: Vec<(String, String)>,
    /// The gRPC metadata each stream was opened with (ASCII entries).
    pub stream_headers: Vec<Vec<(String, String)>>,
    /// Handshakes accepted by `start_as_envoy_gateway`'s TLS: the protocol version
    /// (`TLSv1_3`) and whether the client presented a certificate.
    pub handshakes: Vec<(String, bool)>,
    /// Handshakes it refused, with why.
    pub refused_handshakes: Vec<String>,
}

#[derive(Clone)]
struct Ads {
    snapshot: watch::Sender<Option<Snapshot>>,
    log: Arc<Mutex<Log>>,
    /// Flips to true to break every open stream.
    kill: watch::Receiver<bool>,
}

type ResponseStream = Pin<Box<dyn Stream<Item = Result<DiscoveryResponse, Status>> + Send>>;
type DeltaStream = Pin<Box<dyn Stream<Item = Result<DeltaDiscoveryResponse, Status>> + Send>>;

#[tonic::async_trait]
impl AggregatedDiscoveryService for Ads {
    type StreamAggregatedResourcesStream = ResponseStream;
    type DeltaAggregatedResourcesStream = DeltaStream;

    async fn stream_aggregated_resources(
        &self,
        request: Request<Streaming<DiscoveryRequest>>,
    ) -> Result<Response<ResponseStream>, Status> {
        let (tx, rx) = mpsc::channel(16);
        let headers = request
            .metadata()
            .iter()
            .filter_map(|entry| match entry {
                tonic::metadata::KeyAndValueRef::Ascii(key, value) => {
                    Some((key.to_string(), value.to_str().unwrap_or_default().to_owned()))
                }
                tonic::metadata::KeyAndValueRef::Binary(..) => None,
            })
            .collect();
        self.log.lock().unwrap().stream_headers.push(headers);
        tokio::spawn(serve_stream(request.into_inner(), tx, self.clone()));
        let stream =
            futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|r| (r, rx)) });
        Ok(Response::new(Box::pin(stream)))
    }

    async fn delta_aggregated_resources(
        &self,
        _request: Request<Streaming<DeltaDiscoveryRequest>>,
    ) -> Result<Response<DeltaStream>, Status> {
        Err(Status::unimplemented("state of the world only"))
    }
}

async fn serve_stream(
    mut inbound: Streaming<DiscoveryRequest>,
    tx: mpsc::Sender<Result<DiscoveryResponse, Status>>,
    ads: Ads,
) {
    let mut snapshots = ads.snapshot.subscribe();
    let mut kill = ads.kill.clone();
    let (mut nonce, mut last_nonce, mut first) = (0u64, String::new(), true);
    let mut waiting: Option<String> = None;
    loop {
        let respond = tokio::select! {
            _ = killed(&mut kill) => {
                let _ = tx.send(Err(Status::unavailable("server stopping"))).await;
                return;
            }
            request = inbound.message() => {
                let Ok(Some(request)) = request else { return };
                ads.log.lock().unwrap().requests.push(request.clone());
                if request.type_url.is_empty() {
                    let _ = tx.send(Err(Status::invalid_argument("type URL is required for ADS"))).await;
                    return;
                }
                if !last_nonce.is_empty() && request.response_nonce != last_nonce {
                    continue; // stale nonce: ignored
                }
                let snapshot = snapshots.borrow_and_update().clone();
                let answer = match &snapshot {
                    Some((version, resources)) => *version != request.version_info || (first && !resources.is_empty()),
                    None => false,
                };
                first = false;
                waiting = (!answer).then(|| request.version_info.clone());
                answer
            }
            changed = snapshots.changed(), if waiting.is_some() => {
                if changed.is_err() {
                    return;
                }
                let version = snapshots.borrow_and_update().as_ref().map(|s| s.0.clone());
                version.is_some() && version != waiting
            }
        };
        if !respond {
            continue;
        }
        waiting = None;
        let Some((version, resources)) = snapshots.borrow().clone() else { continue };
        nonce += 1;
        last_nonce = nonce.to_string();
        ads.log.lock().unwrap().responses.push((version.clone(), last_nonce.clone()));
        let response = DiscoveryResponse {
            version_info: version,
            resources,
            type_url: tollgate::config::xds::TYPE_URL.to_owned(),
            nonce: last_nonce.clone(),
            ..Default::default()
        };
        if tx.send(Ok(response)).await.is_err() {
            return;
        }
    }
}

/// Resolves once the server is told to stop (the guard `wait_for` returns is dropped here).
async fn killed(kill: &mut watch::Receiver<bool>) {
    let _ = kill.wait_for(|k| *k).await;
}

/// Envoy Gateway's TLS settings for its ratelimit xDS server, in rustls: TLS 1.3 only, a
/// client certificate required and verified against `client_ca` alone, ALPN `h2`.
fn envoy_gateway_tls(tls: &ServerTls) -> Arc<rustls::ServerConfig> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for ca in CertificateDer::pem_slice_iter(&tls.client_ca) {
        roots.add(ca.expect("client CA PEM")).expect("client CA");
    }
    let verifier =
        rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
            .build()
            .expect("client verifier");
    let chain: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(&tls.cert).collect::<Result<_, _>>().expect("server certificate PEM");
    let key = PrivateKeyDer::from_pem_slice(&tls.key).expect("server key PEM");
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .expect("TLS 1.3")
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, key)
        .expect("server identity");
    config.alpn_protocols = vec![b"h2".to_vec()];
    Arc::new(config)
}

/// The accepted connections of `listener` after the handshake of [`envoy_gateway_tls`],
/// each handshake recorded in `log`; the listener closes when `kill` flips.
fn envoy_gateway_incoming(
    listener: tokio::net::TcpListener,
    tls: &ServerTls,
    log: Arc<Mutex<Log>>,
    mut kill: watch::Receiver<bool>,
) -> impl Stream<Item = Result<TlsStream<TcpStream>, std::io::Error>> {
    let acceptor = tokio_rustls::TlsAcceptor::from(envoy_gateway_tls(tls));
    let (tx, rx) = mpsc::channel::<Result<TlsStream<TcpStream>, std::io::Error>>(16);
    tokio::spawn(async move {
        loop {
            let tcp = tokio::select! {
                _ = killed(&mut kill) => return,
                accepted = listener.accept() => match accepted {
                    Ok((tcp, _)) => tcp,
                    Err(_) => continue,
                },
            };
            let (acceptor, tx, log) = (acceptor.clone(), tx.clone(), log.clone());
            tokio::spawn(async move {
                match acceptor.accept(tcp).await {
                    Ok(stream) => {
                        let session = stream.get_ref().1;
                        let version = session.protocol_version().map_or("none".into(), |v| format!("{v:?}"));
                        let client_cert = session.peer_certificates().is_some_and(|c| !c.is_empty());
                        log.lock().unwrap().handshakes.push((version, client_cert));
                        let _ = tx.send(Ok(stream)).await;
                    }
                    Err(e) => log.lock().unwrap().refused_handshakes.push(e.to_string()),
                }
            });
        }
    });
    futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|r| (r, rx)) })
}

/// PEM files of the server's identity and the CA its clients must chain to.
#[derive(Clone)]
pub struct ServerTls {
    pub cert: Vec<u8>,
    pub key: Vec<u8>,
    pub client_ca: Vec<u8>,
}

/// The management server; `stop` and `start` simulate a restart on the same port.
pub struct ManagementServer {
    pub addr: SocketAddr,
    snapshot: watch::Sender<Option<Snapshot>>,
    pub log: Arc<Mutex<Log>>,
    tls: ServerTls,
    /// TLS as Envoy Gateway's server (`start_as_envoy_gateway`), not tonic's defaults.
    envoy_gateway_tls: bool,
    running: Option<(watch::Sender<bool>, JoinHandle<()>)>,
}

impl ManagementServer {
    /// Starts on a free loopback port.
    pub async fn start(tls: ServerTls) -> ManagementServer {
        ManagementServer::start_with(tls, false).await
    }

    /// Starts on a free loopback port with the TLS of Envoy Gateway's ratelimit xDS server
    /// (`internal/crypto/cert_load.go`): TLS 1.3 only, `RequireAndVerifyClientCert` against
    /// `client_ca` alone, ALPN `h2`. Every handshake is recorded in the log.
    pub async fn start_as_envoy_gateway(tls: ServerTls) -> ManagementServer {
        ManagementServer::start_with(tls, true).await
    }

    async fn start_with(tls: ServerTls, envoy_gateway_tls: bool) -> ManagementServer {
        let (snapshot, _) = watch::channel(None);
        let mut server = ManagementServer {
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            snapshot,
            log: Arc::default(),
            tls,
            envoy_gateway_tls,
            running: None,
        };
        server.listen().await;
        server
    }

    async fn listen(&mut self) {
        let listener = tokio::net::TcpListener::bind(self.addr).await.expect("bind the ADS port");
        self.addr = listener.local_addr().expect("local addr");
        let (kill, killed) = watch::channel(false);
        let ads = Ads { snapshot: self.snapshot.clone(), log: self.log.clone(), kill: killed.clone() };
        let stopped = {
            let mut killed = killed.clone();
            async move {
                let _ = killed.wait_for(|k| *k).await;
            }
        };
        let task = if self.envoy_gateway_tls {
            let incoming = envoy_gateway_incoming(listener, &self.tls, self.log.clone(), killed);
            let server = tonic::transport::Server::builder()
                .add_service(AggregatedDiscoveryServiceServer::new(ads))
                .serve_with_incoming_shutdown(incoming, stopped);
            tokio::spawn(async move {
                let _ = server.await;
            })
        } else {
            let tls = ServerTlsConfig::new()
                .identity(Identity::from_pem(&self.tls.cert, &self.tls.key))
                .client_ca_root(Certificate::from_pem(&self.tls.client_ca));
            let server = tonic::transport::Server::builder()
                .tls_config(tls)
                .expect("server TLS")
                .add_service(AggregatedDiscoveryServiceServer::new(ads))
                .serve_with_incoming_shutdown(TcpIncoming::from(listener), stopped);
            tokio::spawn(async move {
                let _ = server.await;
            })
        };
        self.running = Some((kill, task));
    }

    /// Sets the snapshot (go-control-plane's `SetSnapshot`): parked watches are answered.
    pub fn set(&self, version: &str, resources: Vec<Any>) {
        self.snapshot.send_replace(Some((version.to_owned(), resources)));
    }

    /// Breaks every stream and closes the port.
    pub async fn stop(&mut self) {
        if let Some((kill, task)) = self.running.take() {
            let _ = kill.send(true);
            let _ = tokio::time::timeout(Duration::from_secs(5), task).await;
        }
    }

    /// Listens again on the same port (a new process: nonces start over).
    pub async fn restart(&mut self) {
        self.listen().await;
    }

    /// The responses sent so far.
    pub fn responses(&self) -> Vec<(String, String)> {
        self.log.lock().unwrap().responses.clone()
    }

    /// The requests received so far.
    pub fn requests(&self) -> Vec<DiscoveryRequest> {
        self.log.lock().unwrap().requests.clone()
    }

    /// The handshakes accepted so far (`start_as_envoy_gateway`): version, client certificate.
    pub fn handshakes(&self) -> Vec<(String, bool)> {
        self.log.lock().unwrap().handshakes.clone()
    }
}
