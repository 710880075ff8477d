//! An OTLP trace collector inside the tests: the OTLP/gRPC trace service (tonic, from
//! `opentelemetry-proto`) or OTLP/HTTP (`POST /v1/traces`, protobuf bodies), on a loopback
//! port, on a runtime of its own (so sync tests can use it too). It keeps every span it
//! receives, flattened with its resource. Also a collector that accepts connections and
//! never answers (`Stall`).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use prost::Message;

/// One span as received, with its resource's attributes.
#[derive(Debug, Clone)]
pub struct Received {
    pub name: String,
    pub trace_id: String,
    pub span_id: String,
    /// Empty for a root span.
    pub parent_span_id: String,
    /// OTLP's `SpanKind` (2 server, 3 client).
    pub kind: i32,
    /// OTLP's status code (2 error).
    pub status: i32,
    pub attributes: HashMap<String, String>,
    pub resource: HashMap<String, String>,
}

impl Received {
    /// An attribute as text (numbers and booleans printed).
    pub fn attr(&self, key: &str) -> Option<&str> {
        self.attributes.get(key).map(String::as_str)
    }
}

type Spans = Arc<Mutex<Vec<Received>>>;

/// A running collector.
pub struct Collector {
    pub addr: SocketAddr,
    spans: Spans,
    /// Export requests received (each a batch).
    requests: Arc<Mutex<usize>>,
    _stop: std::sync::mpsc::Sender<()>,
}

/// OTLP transport of a `Collector`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Grpc,
    Http,
}

impl Collector {
    /// Starts a collector on a free loopback port; ready when this returns.
    pub fn start(transport: Transport) -> Collector {
        let spans: Spans = Arc::default();
        let requests: Arc<Mutex<usize>> = Arc::default();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let store = Store { spans: spans.clone(), requests: requests.clone() };
        std::thread::spawn(move || {
            let runtime =
                tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind collector");
                ready_tx.send(listener.local_addr().expect("addr")).expect("ready");
                let serve = async move {
                    match transport {
                        Transport::Grpc => {
                            let incoming = tokio_stream_of(listener);
                            tonic::transport::Server::builder()
                                .add_service(TraceServiceServer::new(store))
                                .serve_with_incoming(incoming)
                                .await
                                .expect("collector serves");
                        }
                        Transport::Http => {
                            let router = axum::Router::new()
                                .route("/v1/traces", axum::routing::post(http_export))
                                .with_state(store);
                            axum::serve(listener, router).await.expect("collector serves");
                        }
                    }
                };
                let stop = tokio::task::spawn_blocking(move || {
                    let _ = stopped.recv();
                });
                tokio::select! {
                    () = serve => {}
                    _ = stop => {}
                }
            });
        });
        let addr = ready_rx.recv().expect("collector started");
        Collector { addr, spans, requests, _stop: stop }
    }

    /// The base URL (`http://127.0.0.1:port`).
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<Received> {
        self.spans.lock().expect("spans").clone()
    }

    /// Export requests received so far.
    pub fn requests(&self) -> usize {
        *self.requests.lock().expect("requests")
    }

    /// Polls (20 ms) until `done` holds of the spans received; panics after `timeout`.
    pub fn wait_for(
        &self,
        timeout: Duration,
        what: &str,
        done: impl Fn(&[Received]) -> bool,
    ) -> Vec<Received> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(spans) = self.check(deadline, timeout, what, &done) {
                return spans;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// [`Collector::wait_for`] without blocking the test's runtime.
    pub async fn wait_for_async(
        &self,
        timeout: Duration,
        what: &str,
        done: impl Fn(&[Received]) -> bool,
    ) -> Vec<Received> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(spans) = self.check(deadline, timeout, what, &done) {
                return spans;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The spans received, if `done` holds of them; panics once `deadline` has passed.
    fn check(
        &self,
        deadline: Instant,
        timeout: Duration,
        what: &str,
        done: &impl Fn(&[Received]) -> bool,
    ) -> Option<Vec<Received>> {
        let spans = self.spans();
        if done(&spans) {
            return Some(spans);
        }
        assert!(Instant::now() < deadline, "collector: not {what} after {timeout:?}; got {spans:#?}");
        None
    }
}

/// The spans of one trace, by trace id.
pub fn of_trace<'a>(spans: &'a [Received], trace_id: &str) -> Vec<&'a Received> {
    spans.iter().filter(|s| s.trace_id == trace_id).collect()
}

#[derive(Clone)]
struct Store {
    spans: Spans,
    requests: Arc<Mutex<usize>>,
}

impl Store {
    fn keep(&self, request: ExportTraceServiceRequest) {
        *self.requests.lock().expect("requests") += 1;
        let mut kept = self.spans.lock().expect("spans");
        for resource_spans in request.resource_spans {
            let resource = resource_spans.resource.map(|r| flatten(&r.attributes)).unwrap_or_default();
            for scope in resource_spans.scope_spans {
                for span in scope.spans {
                    kept.push(Received {
                        name: span.name,
                        trace_id: hex(&span.trace_id),
                        span_id: hex(&span.span_id),
                        parent_span_id: hex(&span.parent_span_id),
                        kind: span.kind,
                        status: span.status.map_or(0, |s| s.code),
                        attributes: flatten(&span.attributes),
                        resource: resource.clone(),
                    });
                }
            }
        }
    }
}

#[tonic::async_trait]
impl TraceService for Store {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        self.keep(request.into_inner());
        Ok(tonic::Response::new(ExportTraceServiceResponse { partial_success: None }))
    }
}

async fn http_export(
    axum::extract::State(store): axum::extract::State<Store>,
    headers: axum::http::HeaderMap,
    body: axum::body::Bytes,
) -> (axum::http::StatusCode, [(&'static str, &'static str); 1], Vec<u8>) {
    let protobuf = headers.get("content-type").is_some_and(|v| v == "application/x-protobuf");
    match ExportTraceServiceRequest::decode(body) {
        Ok(request) if protobuf => {
            store.keep(request);
            let answer = ExportTraceServiceResponse { partial_success: None }.encode_to_vec();
            (axum::http::StatusCode::OK, [("content-type", "application/x-protobuf")], answer)
        }
        _ => (
            axum::http::StatusCode::BAD_REQUEST,
            [("content-type", "text/plain")],
            b"not OTLP protobuf".to_vec(),
        ),
    }
}

fn tokio_stream_of(
    listener: tokio::net::TcpListener,
) -> impl futures_util::Stream<Item = std::io::Result<tokio::net::TcpStream>> {
    futures_util::stream::unfold(listener, |listener| async move {
        let accepted = listener.accept().await.map(|(stream, _)| stream);
        Some((accepted, listener))
    })
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn flatten(attributes: &[KeyValue]) -> HashMap<String, String> {
    attributes
        .iter()
        .map(|kv| {
            let value = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                Some(Value::StringValue(s)) => s.clone(),
                Some(Value::IntValue(i)) => i.to_string(),
                Some(Value::BoolValue(b)) => b.to_string(),
                Some(Value::DoubleValue(d)) => d.to_string(),
                other => format!("{other:?}"),
            };
            (kv.key.clone(), value)
        })
        .collect()
}

/// A collector that accepts connections and never answers (nor reads).
pub struct Stall {
    pub addr: SocketAddr,
    _listener: std::net::TcpListener,
    held: Arc<Mutex<Vec<std::net::TcpStream>>>,
}

impl Stall {
    pub fn start() -> Stall {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind stall");
        let addr = listener.local_addr().expect("addr");
        let held: Arc<Mutex<Vec<std::net::TcpStream>>> = Arc::default();
        let accepting = listener.try_clone().expect("clone listener");
        let keep = held.clone();
        std::thread::spawn(move || {
            for stream in accepting.incoming().flatten() {
                keep.lock().expect("held").push(stream);
            }
        });
        Stall { addr, _listener: listener, held }
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> usize {
        self.held.lock().expect("held").len()
    }
}

/// A loopback port nothing listens on (bound, then closed).
pub fn closed_port() -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("addr")
}
