//! The single-node Redis store: every charge of one request in one script call — with the
//! charges of other requests queued behind calls in flight (`batch`), or, with
//! `--no-batch`, one pipeline of `EVALSHA` per request — on one of a few shared connections
//! (`link`) to a fixed address: a server, a proxy, or a cloud "primary endpoint" whose
//! address stays while the node behind it changes.
//!
//! Scripts are called by SHA (`scripts`); `NOSCRIPT` entries are sent again once with
//! `EVAL`. A joint group (`Groups`) is decided by one script call, all of its buckets or
//! none, atomically (a script runs alone on the server).
//! Nothing else is re-sent: after a timeout or a failed connection the script may have run, and a second send would charge the bucket twice. A connection the server
//! closed is replaced before a request uses it (the lifecycle watches disconnects), so a
//! Redis restart costs no request.

use std::fmt;
use std::time::Duration;

use tokio::time::Instant;

use super::super::charge::{Charge, Groups, Reservation, Reserved, StoreError};
use super::super::remote::{Charged, Remote, Reset};
use super::connect::{address, connect_to, connection_info, redact_url};
use super::link::{Link, Replaced};
use super::server::Server;
use super::settings::RedisSettings;

pub struct RedisStore {
    server: Server,
    url: String,
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore").field("url", &redact_url(&self.url)).finish_non_exhaustive()
    }
}

impl RedisStore {
    /// Builds the store; requests run with `store_timeout`. Connects in the background
    /// once a runtime runs: Redis being down at startup is not an error.
    pub fn new(settings: &RedisSettings, store_timeout: Duration) -> Result<RedisStore, StoreError> {
        let info = connection_info(&settings.url, &settings.tls)?;
        let name = address(&info);
        let shown = redact_url(&settings.url);
        let mut server = Server::new(
            settings.link(store_timeout),
            name,
            shown,
            connect_to(info.clone(), settings.tls.clone()),
            connect_to(info, settings.tls.clone()),
            settings.batch,
        );
        server.set_windows(settings.windows);
        Ok(RedisStore { server, url: settings.url.clone() })
    }

    /// The Redis URL without its password.
    pub fn redacted_url(&self) -> String {
        redact_url(&self.url)
    }

    /// Which path decides window consumes (`--redis-windows`).
    pub fn windows(&self) -> super::plain::Windows {
        self.server.windows()
    }

    /// Whether the last call reached Redis.
    pub fn is_healthy(&self) -> bool {
        self.server.is_healthy()
    }

    /// Connections replaced since the start, by reason.
    pub fn replaced(&self) -> Replaced {
        self.server.replaced()
    }

    /// Charges queued for a lane now (0 with `--no-batch`; for tests).
    pub fn queued(&self) -> usize {
        self.server.queued()
    }

    /// Lanes carrying a call now (0 with `--no-batch`; for tests).
    pub fn lanes_in_use(&self) -> usize {
        self.server.lanes_in_use()
    }

    /// The connections charges ride (approximate mode's first reads of a bucket).
    pub(crate) fn link(&self) -> &Link {
        self.server.link()
    }

    /// Approximate mode's own connection (see `redis::server`).
    pub(crate) fn sync_link(&self) -> &Link {
        self.server.sync_link()
    }
}

impl Remote for RedisStore {
    async fn charge(&self, batch: &[Charge], groups: &Groups, deadline: Instant) -> Charged {
        self.server.charge_groups(batch, groups, deadline).await
    }

    fn renew(&self) {
        self.server.renew();
    }

    async fn reserve(
        &self,
        group: &[Charge],
        reservation: &Reservation,
        deadline: Instant,
    ) -> Result<Reserved, StoreError> {
        self.server.reserve(group, reservation, deadline).await
    }
}

impl Reset for RedisStore {
    async fn reset(&self, keys: &[String], deadline: Instant) -> Result<(), StoreError> {
        self.server.delete(keys, deadline).await
    }

    async fn command(
        &self,
        _key: &str,
        command: redis::Cmd,
        deadline: Instant,
    ) -> Result<redis::Value, StoreError> {
        self.server.command(command, deadline).await
    }
}
