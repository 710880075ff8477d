//! What a stream's task waits on besides its reports: the shutdown signal and an instant
//! that may not be set.

use tokio::sync::watch;
use tokio::time::Instant;

/// Resolves once the shutdown signal is set (never while it is not).
pub(super) async fn stopped(shutdown: &mut watch::Receiver<bool>) {
    if shutdown.wait_for(|stop| *stop).await.is_err() {
        std::future::pending::<()>().await;
    }
}

pub(super) async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
