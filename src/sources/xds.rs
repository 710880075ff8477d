//! The xDS config source: an ADS state-of-the-world client for `RateLimitConfig`
//! resources, speaking the protocol envoyproxy/ratelimit's `GRPC_XDS_SOTW` source speaks.
//!
//! Layout: `settings` (what the client runs with, from the peer's `CONFIG_GRPC_XDS_*`
//! variables or Tollgate's flags), `channel` (dialling, TLS and mTLS), `backoff` (the
//! peer's jittered reconnect waits), `stream` (one ADS stream: requests, responses, ACK and
//! NACK). The task started by [`spawn`] owns the stream and its state; nothing depends on a
//! request future. Each response is decoded whole — one resource that does not decode
//! rejects it all, every last good version kept — then compiled per resource
//! (`config::xds`) and swapped in through `Live::apply_xds`.

use std::sync::Arc;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::sources::serving::Live;

mod backoff;
mod channel;
mod settings;
mod stream;

pub use channel::check_files;
pub use settings::{parse_headers, parse_node_metadata, BackoffSettings, XdsSettings, XdsTls};

/// Starts the client: it connects, applies every response and reconnects until `stop`
/// flips to true. The receiver turns true once the first response has been applied.
pub fn spawn(
    settings: XdsSettings,
    live: Arc<Live>,
    stop: watch::Receiver<bool>,
) -> (JoinHandle<()>, watch::Receiver<bool>) {
    let (received, first) = watch::channel(false);
    let task = tokio::spawn(stream::run(settings, live, received, stop));
    (task, first)
}
