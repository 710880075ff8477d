//! One Redis server as a store talks to it: the connections charges ride (`link`), one
//! connection of approximate mode's sync of its own (a sync of many buckets must not hold
//! up the requests pipelined behind it on a shared connection), the scripts, and the
//! health seen from the calls. The single node (`single`) and the Sentinel master
//! (`sentinel`) are each one `Server`; they differ only in how a connect finds the address.

use std::sync::Arc;

use redis::{Pipeline, Value};
use tokio::time::Instant;

use super::super::charge::{Charge, Groups, Reservation, Reserved, StoreError};
use super::super::remote::Charged;
use super::batch::{Batcher, LANES_PER_CONNECTION};
use super::health::Health;
use super::link::{Connect, Link, LinkSettings, Replaced};
use super::plain::{self, Windows};
use super::reply::deleted;
use super::scripts::{charge_groups_pipelined, parse_reserve, send_entries, Scripts};

pub(super) struct Server {
    /// Shared with a watcher that renews it (Sentinel's), which holds it weakly.
    link: Arc<Link>,
    sync_link: Arc<Link>,
    scripts: Arc<Scripts>,
    health: Arc<Health>,
    /// `None`: `--no-batch`.
    batcher: Option<Arc<Batcher>>,
    /// Which path decides window consumes (`--redis-windows`).
    windows: Windows,
}

impl Server {
    /// A server whose connections are named `name` in logs, reached through `connect`
    /// (charges) and `sync_connect` (the sync's connection); its health is reported as
    /// `shown`. Neither may hold a password. Connects lazily. `batch`: requests queued for
    /// a lane go together (see `batch`); false: `--no-batch`.
    pub(super) fn new(
        settings: LinkSettings,
        name: String,
        shown: String,
        connect: Connect,
        sync_connect: Connect,
        batch: bool,
    ) -> Server {
        let link = Arc::new(Link::new(settings, name.clone(), connect));
        let scripts = Arc::new(Scripts::new());
        let health = Arc::new(Health::new(shown));
        let batcher = batch.then(|| {
            let lanes = settings.connections * LANES_PER_CONNECTION;
            Arc::new(Batcher::new(
                link.clone(),
                scripts.clone(),
                health.clone(),
                lanes,
                settings.max_inflight,
            ))
        });
        Server {
            sync_link: Arc::new(Link::new(settings.for_sync(), format!("{name} (sync)"), sync_connect)),
            link,
            scripts,
            health,
            batcher,
            windows: Windows::Lua,
        }
    }

    /// Which path decides window consumes.
    pub(super) fn windows(&self) -> Windows {
        self.windows
    }

    /// Decides window consumes by `windows` (`--redis-windows`; `Lua` when not called).
    pub(super) fn set_windows(&mut self, windows: Windows) {
        self.windows = windows;
        self.scripts.read_window_keys(windows.reads_window_keys());
        if let Some(batcher) = &self.batcher {
            batcher.set_windows(windows);
        }
    }

    /// The connections charges ride (and `reset`'s `DEL`, approximate mode's first reads).
    pub(super) fn link(&self) -> &Arc<Link> {
        &self.link
    }

    /// Approximate mode's own connection.
    pub(super) fn sync_link(&self) -> &Arc<Link> {
        &self.sync_link
    }

    /// Charges queued for a lane now (0 with `--no-batch`).
    pub(super) fn queued(&self) -> usize {
        self.batcher.as_ref().map_or(0, |b| b.queued())
    }

    /// Lanes carrying a call now (0 with `--no-batch`).
    pub(super) fn lanes_in_use(&self) -> usize {
        self.batcher.as_ref().map_or(0, |b| b.lanes_in_use())
    }

    /// Whether the last call reached the server.
    pub(super) fn is_healthy(&self) -> bool {
        self.health.is_up()
    }

    /// Connections replaced since the start, by reason, both links together.
    pub(super) fn replaced(&self) -> Replaced {
        self.link.replaced() + self.sync_link.replaced()
    }

    /// Charges a batch whose `groups` stand or fall together, by `deadline`: batched with
    /// other requests' (`batch`: one call; with `--redis-windows plain` the window consumes
    /// of every rider as one pipeline of plain commands beside one script call for the
    /// rest), or with `--no-batch` one pipeline entry per group (a joint group is one
    /// `joint.lua` call; window consumes with `plain` as plain commands beside, both at
    /// once). One round trip (two if some scripts were missing or a window was stale), or
    /// a wait for a lane first.
    pub(super) async fn charge_groups(
        &self,
        batch: &[Charge],
        groups: &Groups,
        deadline: Instant,
    ) -> Charged {
        if let Some(batcher) = &self.batcher {
            return batcher.charge(batch, groups, deadline).await;
        }
        let split = (self.windows == Windows::Plain).then(|| plain::split(batch, groups)).flatten();
        let Some(split) = split else { return self.charge_scripts(batch, groups, deadline).await };
        let rest = split.rest_charges(batch);
        let refs: Vec<&Charge> = split.plain.iter().map(|&i| &batch[i]).collect();
        let plain = plain::charge(&self.link, &self.scripts, &refs, deadline);
        let scripts = async {
            match rest.is_empty() {
                true => Charged::default(),
                false => self.charge_scripts(&rest, &split.rest_groups, deadline).await,
            }
        };
        let (plain, scripts) = tokio::join!(plain, scripts);
        self.health.record(&plain);
        let results = split.merge(batch.len(), plain, scripts.results);
        Charged { results, refunds: scripts.refunds, shared: false }
    }

    /// Charges by scripts: batched, or one pipeline entry per group.
    async fn charge_scripts(&self, batch: &[Charge], groups: &Groups, deadline: Instant) -> Charged {
        if let Some(batcher) = &self.batcher {
            return batcher.charge(batch, groups, deadline).await;
        }
        let results = charge_groups_pipelined(&self.link, &self.scripts, batch, groups, deadline).await;
        self.health.record(&results);
        results.into()
    }

    /// One `DEL` with every key (an operator's reset).
    pub(super) async fn delete(&self, keys: &[String], deadline: Instant) -> Result<(), StoreError> {
        let mut pipe = Pipeline::with_capacity(1);
        pipe.add_command(redis::cmd("DEL").arg(keys).to_owned());
        let mut values = self.link.send(pipe, 1, deadline).await?;
        deleted(values.pop().unwrap_or(Value::Nil))
    }

    /// One `reserve.lua` call (see `Remote::reserve`) on the charges' connections.
    pub(super) async fn reserve(
        &self,
        group: &[Charge],
        reservation: &Reservation,
        deadline: Instant,
    ) -> Result<Reserved, StoreError> {
        let add = |pipe: &mut Pipeline, _: usize, call| {
            pipe.add_command(self.scripts.reserve(group, reservation, call));
        };
        let reply = send_entries(&self.link, 1, 1, deadline, add).await.pop();
        parse_reserve(reply.unwrap_or_else(|| Err(StoreError::Server("no reply".into()))), group.len())
    }

    /// One command (an operator's, see `Reset::command`), its reply or the error it answered.
    pub(super) async fn command(&self, command: redis::Cmd, deadline: Instant) -> Result<Value, StoreError> {
        let mut pipe = Pipeline::with_capacity(1);
        pipe.add_command(command);
        match self.link.send_aside(pipe, 1, deadline).await?.pop() {
            Some(Value::ServerError(e)) => Err(StoreError::Server(format!("{e:?}"))),
            Some(value) => Ok(value),
            None => Err(StoreError::Server("no reply".into())),
        }
    }

    /// Replaces the charges' connections (see `Remote::renew`).
    pub(super) fn renew(&self) {
        self.link.renew();
    }
}
