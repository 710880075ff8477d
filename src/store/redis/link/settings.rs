//! What a link is built from and what it reports: its settings, how a connection is made
//! (`Connect`), why a call got no reply (`SendError`), the count of replaced connections,
//! and the socket options of every connection. No state: the slots are `slot`'s.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::io::tcp::{socket2, TcpSettings};
use redis::AsyncConnectionConfig;

use super::super::super::charge::StoreError;

/// Longest one background connect (TCP, TLS, AUTH, `HELLO`) may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// Makes one connection with the given config (which carries the lifecycle's push sender).
pub type Connect = Arc<dyn Fn(AsyncConnectionConfig) -> ConnectFuture + Send + Sync>;
/// What `Connect` returns.
pub type ConnectFuture = Pin<Box<dyn Future<Output = Result<MultiplexedConnection, StoreError>> + Send>>;

/// How connections are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkSettings {
    /// Connections kept open and shared by all requests.
    pub connections: usize,
    /// A connection with commands outstanding and no reply for this long is replaced.
    pub reply_timeout: Duration,
    /// Commands outstanding per connection past which a call fails at once.
    pub max_inflight: usize,
}

/// How long approximate mode's sync connection may have commands outstanding without any
/// reply before it is taken out (unless the store's reply timeout is longer): a sync call
/// is judged by its own deadline, not by the request path's silent-connection rule.
pub const SYNC_REPLY_TIMEOUT: Duration = Duration::from_secs(1);

impl LinkSettings {
    /// The settings of approximate mode's own connection: one connection, silent only
    /// after [`SYNC_REPLY_TIMEOUT`].
    pub fn for_sync(self) -> LinkSettings {
        LinkSettings { connections: 1, reply_timeout: self.reply_timeout.max(SYNC_REPLY_TIMEOUT), ..self }
    }
}

/// Why a call got no reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SendError {
    /// The commands were never written: sending them elsewhere cannot charge twice.
    NotSent(StoreError),
    /// The commands may have run (timed out, or the connection failed after writing).
    MaybeRan(StoreError),
}

impl From<SendError> for StoreError {
    fn from(e: SendError) -> StoreError {
        match e {
            SendError::NotSent(e) | SendError::MaybeRan(e) => e,
        }
    }
}

/// Why connections were replaced, since the start (for metrics and tests).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Replaced {
    pub closed: u64,
    pub failed: u64,
    pub readonly: u64,
    pub no_reply: u64,
    pub renewed: u64,
}

impl std::ops::Add for Replaced {
    type Output = Replaced;

    fn add(self, b: Replaced) -> Replaced {
        Replaced {
            closed: self.closed + b.closed,
            failed: self.failed + b.failed,
            readonly: self.readonly + b.readonly,
            no_reply: self.no_reply + b.no_reply,
            renewed: self.renewed + b.renewed,
        }
    }
}

/// `TCP_NODELAY`, keepalive probes after 10 s idle (every 5 s), and `TCP_USER_TIMEOUT` of
/// 10 s (unacknowledged data aborts the connection): the kernel's own dead-peer detection,
/// under the lifecycle's `reply_timeout`.
pub fn socket_settings() -> TcpSettings {
    let keepalive = socket2::TcpKeepalive::new()
        .with_time(Duration::from_secs(10))
        .with_interval(Duration::from_secs(5))
        .with_retries(3);
    let settings = TcpSettings::default().set_nodelay(true).set_keepalive(keepalive);
    #[cfg(target_os = "linux")]
    let settings = settings.set_user_timeout(Duration::from_secs(10));
    settings
}
