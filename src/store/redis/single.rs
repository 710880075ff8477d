//! The single-node Redis store: every charge of one request in one pipeline of `EVALSHA`
//! on one of a few shared connections (`link`) to a fixed address — a server, a proxy, or
//! a cloud "primary endpoint" whose address stays while the node behind it changes.
//!
//! Scripts are called by SHA (`scripts`); `NOSCRIPT` entries are sent again once with
//! `EVAL`. A joint group (`Groups`) is one entry of that pipeline: one `joint.lua` call that
//! charges all of its buckets or none, atomically (a script runs alone on the server). Nothing else is re-sent: after a timeout or a failed connection the script may
//! have run, and a second send would charge the bucket twice. A connection the server
//! closed is replaced before a request uses it (the lifecycle watches disconnects), so a
//! Redis restart costs no request.

use std::fmt;
use std::time::Duration;

use tokio::time::Instant;

use crate::algorithm::Decision;

use super::super::guarded::Charged;
use super::super::scripts::{charge_groups_pipelined, Scripts};
use super::super::{Charge, Groups, StoreError};
use super::link::{Link, Replaced};
use super::{address, connect_to, connection_info, redact_url, Health, RedisSettings};

/// Redis-backed store.
pub struct RedisStore {
    link: Link,
    /// One connection of its own for approximate mode's sync: a sync of many buckets must
    /// not hold up the requests pipelined behind it on a shared connection.
    sync_link: Link,
    scripts: Scripts,
    health: Health,
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
        let info = connection_info(&settings.url, settings.ca_file.as_ref())?;
        let name = address(&info);
        let link = settings.link(store_timeout);
        let sync = link.for_sync();
        Ok(RedisStore {
            sync_link: Link::new(sync, format!("{name} (sync)"), connect_to(info.clone())),
            link: Link::new(link, name, connect_to(info)),
            scripts: Scripts::new(),
            health: Health::new(redact_url(&settings.url)),
            url: settings.url.clone(),
        })
    }

    /// The Redis URL without its password.
    pub fn redacted_url(&self) -> String {
        redact_url(&self.url)
    }

    /// Whether the last call reached Redis.
    pub fn is_healthy(&self) -> bool {
        self.health.is_up()
    }

    /// Connections replaced since the start, by reason.
    pub fn replaced(&self) -> Replaced {
        self.link.replaced() + self.sync_link.replaced()
    }

    /// The connections (for commands other than charges: `reset`).
    pub(crate) fn link(&self) -> &Link {
        &self.link
    }

    /// Approximate mode's own connection (see the field).
    pub(crate) fn sync_link(&self) -> &Link {
        &self.sync_link
    }

    /// Charges the batch in one round trip (two if some scripts were missing), by `deadline`.
    pub async fn charge(&self, batch: &[Charge], deadline: Instant) -> Vec<Result<Decision, StoreError>> {
        self.charge_groups(batch, &Groups::each(), deadline).await
    }

    /// Charges a batch whose `groups` stand or fall together: one pipeline entry per group
    /// (a joint group is one `joint.lua` call), one round trip, by `deadline`.
    pub async fn charge_groups(
        &self,
        batch: &[Charge],
        groups: &Groups,
        deadline: Instant,
    ) -> Vec<Result<Decision, StoreError>> {
        let results = charge_groups_pipelined(&self.link, &self.scripts, batch, groups, deadline).await;
        self.health.record(&results);
        results
    }
}

impl super::super::Remote for RedisStore {
    async fn charge(&self, batch: &[Charge], groups: &Groups, deadline: Instant) -> Charged {
        RedisStore::charge_groups(self, batch, groups, deadline).await.into()
    }

    fn renew(&self) {
        self.link.renew();
    }
}
