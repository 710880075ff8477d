//! `null_rls`: an Envoy RLS v3 server that answers OK to everything, touching no store.
//!
//! The same tonic server shape as `tollgate serve` (`src/app.rs`): its allocator (mimalloc),
//! TCP_NODELAY on accepted sockets, a jittered one-hour maximum connection age, the gRPC
//! health service beside the rate-limit service, one `DescriptorStatus` per descriptor in
//! the answer. Its throughput
//! is the ceiling of the gRPC layer on a machine, the denominator of every ratio in
//! `docs/performance.md`. By default each status carries a limit, remaining and reset, as
//! a real answer does, so the client's decoding costs the same. The tuning flags exist to
//! try server settings here first.
//!
//! ```sh
//! cargo run --release --example null_rls -- --addr 127.0.0.1:8091 [--worker-threads 2]
//! ```

use std::net::SocketAddr;

use clap::Parser;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus, RateLimit,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::Duration;
use tokio::net::TcpListener;
use tonic::transport::server::TcpIncoming;
use tonic::{Request, Response, Status};

/// The allocator of `tollgate serve`, so the two servers differ only in the work done.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Debug, Parser)]
#[command(about = "Envoy RLS v3 server answering OK without any store (gRPC ceiling)")]
struct Args {
    #[arg(long, default_value = "127.0.0.1:8091")]
    addr: SocketAddr,
    /// Tokio worker threads (default: one per core, as `tollgate serve`).
    #[arg(long)]
    worker_threads: Option<usize>,
    /// Use a current-thread runtime (one thread for everything).
    #[arg(long)]
    current_thread: bool,
    /// Disable TCP_NODELAY on accepted sockets (tollgate sets it).
    #[arg(long)]
    no_nodelay: bool,
    /// HTTP/2 adaptive flow-control window (BDP estimation).
    #[arg(long)]
    adaptive_window: bool,
    /// HTTP/2 initial stream window, bytes (h2 default 65535).
    #[arg(long)]
    stream_window: Option<u32>,
    /// HTTP/2 initial connection window, bytes (h2 default 65535).
    #[arg(long)]
    connection_window: Option<u32>,
    /// HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS.
    #[arg(long)]
    max_concurrent_streams: Option<u32>,
    /// What each descriptor's status holds: `full` (default) the fields a real limiter
    /// fills (limit, remaining, reset) so the client decodes as much as from Tollgate;
    /// `bare` only the code; `empty` no statuses at all.
    #[arg(long, value_enum, default_value = "full")]
    shape: Shape,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Shape {
    Full,
    Bare,
    Empty,
}

/// Answers OK to every descriptor, with constant numbers.
#[derive(Debug, Clone, Copy)]
struct NullRls {
    shape: Shape,
}

#[tonic::async_trait]
impl RateLimitService for NullRls {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let n = request.get_ref().descriptors.len();
        let status = match self.shape {
            Shape::Full => DescriptorStatus {
                code: Code::Ok as i32,
                current_limit: Some(RateLimit {
                    name: String::new(),
                    requests_per_unit: 1,
                    unit: Unit::Hour as i32,
                }),
                limit_remaining: 99_999,
                duration_until_reset: Some(Duration { seconds: 3_600, nanos: 0 }),
                quota: None,
            },
            Shape::Bare | Shape::Empty => DescriptorStatus { code: Code::Ok as i32, ..Default::default() },
        };
        let n = if self.shape == Shape::Empty { 0 } else { n };
        Ok(Response::new(RateLimitResponse {
            overall_code: Code::Ok as i32,
            statuses: vec![status; n],
            ..Default::default()
        }))
    }
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let mut runtime = if args.current_thread {
        tokio::runtime::Builder::new_current_thread()
    } else {
        tokio::runtime::Builder::new_multi_thread()
    };
    if let Some(n) = args.worker_threads {
        runtime.worker_threads(n);
    }
    runtime.enable_all().build()?.block_on(serve(args))
}

async fn serve(args: Args) -> anyhow::Result<()> {
    let listener = TcpListener::bind(args.addr).await?;
    let (_health, health_service) = tonic_health::server::health_reporter();
    let age = std::time::Duration::from_secs(3600).mul_f64(rand::random_range(0.9..=1.1));
    let mut builder = tonic::transport::Server::builder()
        .max_connection_age(age)
        .initial_stream_window_size(args.stream_window)
        .initial_connection_window_size(args.connection_window)
        .max_concurrent_streams(args.max_concurrent_streams);
    if args.adaptive_window {
        builder = builder.http2_adaptive_window(Some(true));
    }
    eprintln!("null_rls listening on {} ({args:?})", listener.local_addr()?);
    builder
        .add_service(health_service)
        .add_service(RateLimitServiceServer::new(NullRls { shape: args.shape }))
        .serve_with_incoming_shutdown(
            TcpIncoming::from(listener).with_nodelay(Some(!args.no_nodelay)),
            async {
                let _ = tokio::signal::ctrl_c().await;
            },
        )
        .await?;
    Ok(())
}
