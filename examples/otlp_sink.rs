//! An OTLP/gRPC trace collector that accepts every export and keeps nothing: the far end
//! of `benches/tracing.sh`, so that what is measured is Tollgate's side of tracing (spans
//! built, queued, encoded and sent), not a collector's.
//!
//!     cargo run --release --example otlp_sink -- 127.0.0.1:4317
//!
//! Prints `spans=N` for the spans received when it gets SIGTERM or Ctrl-C.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};

#[derive(Default)]
struct Sink {
    spans: Arc<AtomicU64>,
}

#[tonic::async_trait]
impl TraceService for Sink {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let n: usize = request
            .into_inner()
            .resource_spans
            .iter()
            .flat_map(|r| &r.scope_spans)
            .map(|s| s.spans.len())
            .sum();
        self.spans.fetch_add(n as u64, Ordering::Relaxed);
        Ok(tonic::Response::new(ExportTraceServiceResponse { partial_success: None }))
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let addr = std::env::args().nth(1).unwrap_or_else(|| "127.0.0.1:4317".to_string());
    let addr: std::net::SocketAddr = addr.parse().expect("address host:port");
    let spans = Arc::new(AtomicU64::new(0));
    let sink = Sink { spans: spans.clone() };
    let stop = async {
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("SIGTERM");
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    };
    tonic::transport::Server::builder()
        .add_service(TraceServiceServer::new(sink))
        .serve_with_shutdown(addr, stop)
        .await
        .expect("otlp sink serves");
    println!("spans={}", spans.load(Ordering::Relaxed));
}
