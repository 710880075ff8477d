//! The Redis Cluster store: each charge is one `EVALSHA` on the master that owns its key,
//! routed here — no client-side re-send that could charge twice.
//!
//! A bucket is one key, so every script call touches one slot (a joint call, several keys
//! of one slot). The slot map comes from
//! `CLUSTER SLOTS` (asked of a known master or a seed, in a background task); each master
//! is reached through its own connection lifecycle (`link`), so a silent or dead master
//! costs only its own charges while the others are answered by their masters.
//!
//! Re-sending is allowed only when the command provably did not run: a `MOVED` (the map is
//! updated and the command goes to the new owner), an `ASK` (sent once more to the
//! migration target, after `ASKING`), a `TRYAGAIN` (sent again after a short pause) or a
//! `READONLY` (the map is refreshed, then sent to the new master); a `NOSCRIPT` is sent
//! again with `EVAL`. A timeout or a failed connection is never re-sent: the script may have
//! run. Redis Cluster's own client (redis-rs) keeps one retry counter for redirects and
//! transport errors alike, which is why this store routes by itself.
//!
//! One request's charges for one master go as one pipeline (one round trip per master, all
//! masters in parallel). Each entry of a pipeline is its own script call: an entry that is
//! redirected did not run and follows its redirect alone; the others are answered. (A
//! whole-pipeline re-send, as redis-rs's cluster client does on a redirect, would charge
//! the other entries twice.)
//!
//! Joint groups (`Groups`, `groups`): the charges of a group on one slot are one entry —
//! one `joint.lua` call, atomic, redirected like any entry. A group whose keys span slots
//! goes as one call per slot (in parallel); when a part is denied, the consumes of the
//! parts that were applied are refunded. A part holding a refund or an overdraw (which no
//! refund undoes) goes only once the group's other parts have passed (`groups`). Between a part's charge and its refund (one round
//! trip) other requests may see those tokens taken — under-admission by at most the
//! group's hits, for one round trip — and a refund that fails leaves them taken until the
//! bucket refills: never over-admission. `groups` says why this beats checking first.
//!
//! The files, from the bottom up: `shared` (the settings, the store and the state its
//! calls share: a link per master, the slot map), `refresh` (the slot map kept fresh),
//! `redirect` (one command sent alone, following redirects), `route` (a batch routed by
//! slot, a pipeline per master), `groups` (a batch cut into parts; refunds of denied
//! groups), `approx` and `reset` (approximate mode's calls, `DEL`), then this file: the
//! store's constructor and its charges.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::algorithm::Decision;

use super::super::charge::{Charge, Groups, Reservation, Reserved, StoreError};
use super::super::remote::{Charged, Remote};
use super::connect::{connection_info, node_url};
use super::health::Health;
use super::link::{Link, Replaced};
use super::plain::{split, Windows};
use super::scripts::{parse_reserve, Scripts};
use super::slots::SlotMap;

use self::groups::{Parts, REFUND_TIMEOUT};
use self::shared::{redacted, RefreshState, Shared};

pub use self::shared::{ClusterSettings, ClusterStore, Lane};
pub use super::slots::{hash_tag, key_slot, SLOTS};

mod approx;
mod groups;
mod plain;
mod prepare;
mod redirect;
mod refresh;
mod reset;
mod route;
mod shared;

impl ClusterStore {
    /// Builds the store. Connects lazily: the cluster being down at startup is not an error.
    pub fn new(settings: &ClusterSettings) -> Result<ClusterStore, StoreError> {
        if settings.nodes.is_empty() {
            return Err(StoreError::Unavailable("no redis cluster nodes given".into()));
        }
        let urls: Vec<String> = settings.nodes.iter().map(|n| node_url(n)).collect();
        let seeds =
            urls.iter().map(|url| connection_info(url, &settings.tls)).collect::<Result<Vec<_>, _>>()?;
        Ok(ClusterStore {
            shared: Arc::new(Shared {
                seeds,
                tls: settings.tls.clone(),
                settings: settings.link,
                links: Mutex::new(HashMap::new()),
                sync_links: Mutex::new(HashMap::new()),
                map: ArcSwap::from_pointee(SlotMap::default()),
                refresh: Mutex::new(RefreshState::default()),
                refreshed: Notify::new(),
                scripts: Scripts::new(),
                health: Health::new(format!("cluster {} (some masters or all)", redacted(&urls).join(","))),
                shown: redacted(&urls),
            }),
            windows: Windows::Lua,
        })
    }

    /// Decides window consumes by `windows` (`--redis-windows`; `lua` unless called).
    pub fn with_windows(mut self, windows: Windows) -> ClusterStore {
        self.windows = windows;
        self.shared.scripts.read_window_keys(windows.reads_window_keys());
        self
    }

    /// Which path decides window consumes (`--redis-windows`).
    pub fn windows(&self) -> Windows {
        self.windows
    }

    /// The seed nodes, without passwords.
    pub fn redacted_nodes(&self) -> String {
        self.shared.shown.join(",")
    }

    /// Whether every charge of the last call reached its master.
    pub fn is_healthy(&self) -> bool {
        self.shared.health.is_up()
    }

    /// Connections replaced since the start, over the masters known now.
    pub fn replaced(&self) -> Replaced {
        let mut links: Vec<Arc<Link>> = self.shared.links().values().cloned().collect();
        links.extend(self.shared.sync_links.lock().unwrap_or_else(|e| e.into_inner()).values().cloned());
        links.iter().map(|l| l.replaced()).fold(Replaced::default(), |a, b| a + b)
    }

    /// Charges the batch: the charges of one master as one pipeline, every master's at
    /// once, each by `deadline`. Results are in batch order.
    pub async fn charge(&self, batch: &[Charge], deadline: Instant) -> Vec<Result<Decision, StoreError>> {
        self.charge_groups(batch, &Groups::each(), deadline).await.results
    }

    /// Charges a batch whose `groups` stand or fall together (see the module doc): each
    /// group's part on one slot is one script call; a group denied by one part has its
    /// other parts refunded (listed in [`Charged::refunds`]). Results are in batch order.
    /// With `--redis-windows plain`, the window consumes go as plain commands (`plain`)
    /// beside the rest, both at once.
    pub async fn charge_groups(&self, batch: &[Charge], groups: &Groups, deadline: Instant) -> Charged {
        let split = (self.windows == Windows::Plain).then(|| split(batch, groups)).flatten();
        let Some(split) = split else { return self.charge_scripts(batch, groups, deadline).await };
        let rest = split.rest_charges(batch);
        let plain = self.shared.charge_plain(batch, &split.plain, deadline);
        let scripts = async {
            match rest.is_empty() {
                true => Charged::default(),
                false => self.charge_scripts(&rest, &split.rest_groups, deadline).await,
            }
        };
        let (plain, scripts) = tokio::join!(plain, scripts);
        self.shared.health.record(&plain);
        let results = split.merge(batch.len(), plain, scripts.results);
        Charged { results, refunds: scripts.refunds, shared: false }
    }

    /// Charges by scripts (see [`charge_groups`](Self::charge_groups)).
    async fn charge_scripts(&self, batch: &[Charge], groups: &Groups, deadline: Instant) -> Charged {
        let parts = Parts::of(batch, groups);
        if !parts.spans() {
            let results = self.shared.charge_phased(batch, &parts, (deadline, deadline)).await;
            self.shared.health.record(&results);
            return Charged { results, refunds: Vec::new(), shared: false };
        }
        // A group cut into parts is charged, and undone when a part was denied, in a task of
        // its own that waits for the parts' replies past the request's deadline: a request
        // that gives up (its deadline, or its client gone) never leaves a denied group's
        // applied parts charged.
        let (shared, owned, groups) = (self.shared.clone(), batch.to_vec(), groups.clone());
        let task = tokio::spawn(async move {
            let parts = Parts::of(&owned, &groups);
            let replies_by = deadline + REFUND_TIMEOUT;
            let mut results = shared.charge_phased(&owned, &parts, (deadline, replies_by)).await;
            let refunds = shared.undo_denied(&owned, &parts, &mut results, deadline).await;
            (results, refunds)
        });
        let (results, refunds) = match tokio::time::timeout_at(deadline, task).await {
            Ok(Ok(done)) => done,
            Ok(Err(join)) => (
                vec![Err(StoreError::Unavailable(format!("cluster group: {join}"))); batch.len()],
                Vec::new(),
            ),
            Err(_) => (vec![Err(StoreError::Timeout); batch.len()], Vec::new()),
        };
        self.shared.health.record(&results);
        Charged { results, refunds, shared: false }
    }
}

impl Remote for ClusterStore {
    async fn charge(&self, batch: &[Charge], groups: &Groups, deadline: Instant) -> Charged {
        ClusterStore::charge_groups(self, batch, groups, deadline).await
    }

    /// On the master of the first bucket's slot (every key of the call shares it: one
    /// descriptor's limits share a hash tag, the records take the first bucket's).
    async fn reserve(
        &self,
        group: &[Charge],
        reservation: &Reservation,
        deadline: Instant,
    ) -> Result<Reserved, StoreError> {
        let slot = key_slot(group.first().map_or("", |c| c.key.as_str()).as_bytes());
        let build = |pipe: &mut redis::Pipeline, call| {
            pipe.add_command(self.shared.scripts.reserve(group, reservation, call));
        };
        let reply = self.shared.send_alone(slot, None, Lane::Charges, 1, deadline, build).await;
        parse_reserve(reply, group.len())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn node_addresses_become_urls_and_passwords_never_print() {
        assert_eq!(node_url(" 10.0.0.1:7000"), "redis://10.0.0.1:7000");
        assert_eq!(node_url("rediss://:pw@h:7000"), "rediss://:pw@h:7000");
        let s = ClusterSettings {
            nodes: vec!["redis://:s3cret@h:7000".into(), "h2:7001".into()],
            tls: crate::store::redis::Tls::default(),
            link: crate::store::redis::RedisSettings::new("redis://h").link(Duration::from_millis(10)),
        };
        let shown = format!("{s:?}");
        assert!(!shown.contains("s3cret") && shown.contains("h2:7001"), "{shown}");
    }
}
