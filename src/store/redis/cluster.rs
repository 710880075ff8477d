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
//! parts that were applied are refunded. Between a part's charge and its refund (one round
//! trip) other requests may see those tokens taken — under-admission by at most the
//! group's hits, for one round trip — and a refund that fails leaves them taken until the
//! bucket refills: never over-admission. `groups` says why this beats checking first.

use std::collections::HashMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use arc_swap::ArcSwap;
use futures_util::future::join_all;
use redis::{ConnectionInfo, Pipeline, Value};
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::algorithm::Decision;

use super::super::charge::{Charge, Groups, StoreError};
use super::super::remote::{Charged, Remote};
use super::connect::{address, connect_to, connection_info, node_url, redact_url, with_address};
use super::health::Health;
use super::link::{Link, LinkSettings, Replaced};
use super::scripts::{parse_part, Call, Scripts};
use super::slots::{Node, Redirect, SlotMap};

use self::groups::Parts;

pub use super::slots::{hash_tag, key_slot, SLOTS};

mod approx;
mod groups;
mod refresh;
mod reset;

/// Redirects one charge may follow before it is a store error.
const MAX_REDIRECTS: usize = 5;
/// Pause before sending a `TRYAGAIN` command again.
const TRYAGAIN_PAUSE: Duration = Duration::from_millis(5);
/// Longest one `CLUSTER SLOTS` question may take.
const REFRESH_TIMEOUT: Duration = Duration::from_secs(1);
/// Fewest time between two map refreshes started by failures (not by `MOVED`/`READONLY`).
const REFRESH_GAP: Duration = Duration::from_millis(200);

/// How to reach a Redis Cluster.
#[derive(Clone)]
pub struct ClusterSettings {
    /// Seed nodes: `host:port` or `redis://[user:password@]host:port` (`rediss://` for TLS).
    /// Any reachable node is enough: the others are discovered, and reached with the first
    /// seed's credentials and TLS mode.
    pub nodes: Vec<String>,
    /// PEM CA bundle for `rediss://` nodes.
    pub ca_file: Option<PathBuf>,
    /// How connections to each master are kept.
    pub link: LinkSettings,
}

impl fmt::Debug for ClusterSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClusterSettings")
            .field("nodes", &redacted(&self.nodes))
            .field("link", &self.link)
            .finish()
    }
}

/// Redis-Cluster-backed store.
pub struct ClusterStore {
    shared: Arc<Shared>,
}

/// Which connections of a master a command rides: the charges' shared ones, or
/// approximate mode's own (see `Shared::sync_links`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lane {
    Charges,
    Sync,
}

struct Shared {
    seeds: Vec<ConnectionInfo>,
    settings: LinkSettings,
    /// One lifecycle per master, by `host:port`.
    links: Mutex<HashMap<Node, Arc<Link>>>,
    /// Approximate mode's own connection per master (a sync of many buckets must not hold
    /// up the charges pipelined behind it).
    sync_links: Mutex<HashMap<Node, Arc<Link>>>,
    map: ArcSwap<SlotMap>,
    refresh: Mutex<RefreshState>,
    refreshed: Notify,
    scripts: Scripts,
    health: Health,
    shown: Vec<String>,
}

#[derive(Default)]
struct RefreshState {
    running: bool,
    started: Option<Instant>,
}

impl fmt::Debug for ClusterStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClusterStore").field("nodes", &self.shared.shown).finish_non_exhaustive()
    }
}

impl ClusterStore {
    /// Builds the store. Connects lazily: the cluster being down at startup is not an error.
    pub fn new(settings: &ClusterSettings) -> Result<ClusterStore, StoreError> {
        if settings.nodes.is_empty() {
            return Err(StoreError::Unavailable("no redis cluster nodes given".into()));
        }
        let urls: Vec<String> = settings.nodes.iter().map(|n| node_url(n)).collect();
        let seeds = urls
            .iter()
            .map(|url| connection_info(url, settings.ca_file.as_ref()))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(ClusterStore {
            shared: Arc::new(Shared {
                seeds,
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
        })
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
    pub async fn charge_groups(&self, batch: &[Charge], groups: &Groups, deadline: Instant) -> Charged {
        let parts = Parts::of(batch, groups);
        let results = self.shared.charge_parts(batch, &parts, deadline).await;
        let refunds = self.shared.undo_denied(batch, &parts, &results, deadline).await;
        self.shared.health.record(&results);
        Charged { results, refunds, shared: false }
    }
}

impl Shared {
    fn links(&self) -> MutexGuard<'_, HashMap<Node, Arc<Link>>> {
        self.links.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The lifecycle of `node`, made on first use (with the first seed's credentials and TLS).
    fn link(&self, node: &Node) -> Arc<Link> {
        self.link_in(&self.links, node, self.settings)
    }

    /// Approximate mode's own connection to `node` (see `sync_links`).
    fn sync_link(&self, node: &Node) -> Arc<Link> {
        self.link_in(&self.sync_links, node, self.settings.for_sync())
    }

    /// The link of `node` in `links`, made with `settings` if there is none yet.
    fn link_in(
        &self,
        links: &Mutex<HashMap<Node, Arc<Link>>>,
        node: &Node,
        settings: LinkSettings,
    ) -> Arc<Link> {
        let mut links = links.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(link) = links.get(node) {
            return link.clone();
        }
        let info = with_address(&self.seeds[0], &node.0, node.1);
        let link = Arc::new(Link::new(settings, address(&info), connect_to(info)));
        links.insert(node.clone(), link.clone());
        link
    }

    /// Charges every part (see `groups::Parts`): the parts owned by one master as one
    /// pipeline, every master's at once, by `deadline`. One result per charge of `batch`.
    async fn charge_parts(
        self: &Arc<Self>,
        batch: &[Charge],
        parts: &Parts,
        deadline: Instant,
    ) -> Vec<Result<Decision, StoreError>> {
        let map = self.map.load_full();
        let mut by_node: Vec<(Node, Vec<usize>)> = Vec::new();
        let mut unrouted = Vec::new();
        for p in 0..parts.len() {
            let first = parts.members(p).first().map_or(&[][..], |&i| batch[i].key.as_bytes());
            match map.owner(key_slot(first)) {
                Some(node) => match by_node.iter_mut().find(|(n, _)| n == node) {
                    Some((_, owned)) => owned.push(p),
                    None => by_node.push((node.clone(), vec![p])),
                },
                None => unrouted.push(p),
            }
        }
        let routed = by_node.iter().map(|(node, owned)| self.charge_on(node, batch, parts, owned, deadline));
        let alone = unrouted.iter().map(|&p| async move {
            let members = parts.members(p);
            let results = self.charge_part(batch, members, parts.coalesced, None, deadline).await;
            members.iter().copied().zip(results).collect::<Vec<_>>()
        });
        let (routed, alone) = futures_util::future::join(join_all(routed), join_all(alone)).await;
        let mut results: Vec<Result<Decision, StoreError>> = vec![Err(StoreError::Timeout); batch.len()];
        for (i, result) in routed.into_iter().flatten().chain(alone.into_iter().flatten()) {
            results[i] = result;
        }
        results
    }

    /// The parts `owned` (indices into `parts`), owned by `node`, as one pipeline; a
    /// redirected entry (it did not run) then follows its redirect alone.
    async fn charge_on(
        self: &Arc<Self>,
        node: &Node,
        batch: &[Charge],
        parts: &Parts,
        owned: &[usize],
        deadline: Instant,
    ) -> Vec<(usize, Result<Decision, StoreError>)> {
        let mut pipe = Pipeline::with_capacity(owned.len());
        for &p in owned {
            pipe.add_command(self.scripts.part(batch, parts.members(p), parts.coalesced, Call::Sha));
        }
        // A coalesced call weighs its charges against `--redis-max-inflight` (see `Link`).
        let weight =
            if parts.coalesced { owned.iter().map(|&p| parts.members(p).len()).sum() } else { owned.len() };
        let values = match self.link(node).send_weighted(pipe, owned.len(), weight, deadline).await {
            Ok(values) => values,
            Err(e) => {
                self.failed(&e);
                let e = StoreError::from(e);
                return owned.iter().flat_map(|&p| parts.members(p)).map(|&i| (i, Err(e.clone()))).collect();
            }
        };
        let answers = owned.iter().zip(values).map(|(&p, value)| async move {
            let members = parts.members(p);
            let results = match Redirect::of(&value, &node.0) {
                None => parse_part(Ok(value), members.len()),
                Some(_) => {
                    let first = Some((node.clone(), value));
                    self.charge_part(batch, members, parts.coalesced, first, deadline).await
                }
            };
            members.iter().copied().zip(results).collect::<Vec<_>>()
        });
        join_all(answers).await.into_iter().flatten().collect()
    }

    /// One script call of the charges `members` of `batch` (one slot), routed by that slot
    /// — or, with `reply`, starting from a reply `node` already gave it — following
    /// redirects until a node runs it. One result per member. `coalesced`: the members are
    /// a coalesced batch (see `Groups::coalesced`).
    async fn charge_part(
        self: &Arc<Self>,
        batch: &[Charge],
        members: &[usize],
        coalesced: bool,
        reply: Option<(Node, Value)>,
        deadline: Instant,
    ) -> Vec<Result<Decision, StoreError>> {
        let slot = members.first().map_or(0, |&i| key_slot(batch[i].key.as_bytes()));
        // A coalesced call weighs its charges against `--redis-max-inflight` (see `Link`).
        let weight = if coalesced { members.len() } else { 1 };
        let build = |pipe: &mut Pipeline, call: Call| {
            pipe.add_command(self.scripts.part(batch, members, coalesced, call));
        };
        let value = self.send_alone(slot, reply, Lane::Charges, weight, deadline, build).await;
        parse_part(value, members.len())
    }

    /// One command of `slot` (`build` appends it, by SHA or with its source) sent alone on
    /// `lane`, counted as `weight` commands in flight — or, with `reply`, starting from a
    /// reply `node` already gave it — following redirects until a node runs it; a
    /// `NOSCRIPT` goes once more with the source. What charges, `DEL` and approximate
    /// mode's sync share: a redirected command did not run, so sending it again is safe.
    pub(super) async fn send_alone(
        self: &Arc<Self>,
        slot: u16,
        mut reply: Option<(Node, Value)>,
        lane: Lane,
        weight: usize,
        deadline: Instant,
        build: impl Fn(&mut Pipeline, Call),
    ) -> Result<Value, StoreError> {
        let mut node = match &reply {
            Some((node, _)) => node.clone(),
            None => match self.map.load().owner(slot) {
                Some(node) => node.clone(),
                None => self.refreshed_owner(slot, deadline).await?,
            },
        };
        let (mut asking, mut call) = (false, Call::Sha);
        for _ in 0..=MAX_REDIRECTS {
            let value = match reply.take() {
                Some((_, value)) => value,
                None => {
                    let mut pipe = Pipeline::with_capacity(2);
                    if asking {
                        pipe.add_command(redis::cmd("ASKING"));
                    }
                    build(&mut pipe, call);
                    let count = 1 + usize::from(asking);
                    let link = match lane {
                        Lane::Charges => self.link(&node),
                        Lane::Sync => self.sync_link(&node),
                    };
                    match link.send_weighted(pipe, count, weight + usize::from(asking), deadline).await {
                        Ok(mut values) => values.pop().unwrap_or(Value::Nil),
                        Err(e) => {
                            self.failed(&e);
                            return Err(e.into());
                        }
                    }
                }
            };
            match Redirect::of(&value, &node.0) {
                None => return Ok(value),
                Some(Redirect::NoScript) if call == Call::Sha => call = Call::Source,
                Some(Redirect::NoScript) => return Ok(value),
                Some(redirect) => self.follow(redirect, slot, &mut node, &mut asking, deadline).await?,
            }
        }
        Err(StoreError::Server(format!("more than {MAX_REDIRECTS} cluster redirects for slot {slot}")))
    }

    /// Where a command of `slot` that got `redirect` goes next (`node`, and whether after
    /// `ASKING`): a `MOVED` updates the map, a `TRYAGAIN` pauses, a `READONLY` asks for the
    /// new master. Such a command did not run, so it may be sent again. (`NOSCRIPT` is the
    /// caller's: it changes the command, not the node.)
    async fn follow(
        self: &Arc<Self>,
        redirect: Redirect,
        slot: u16,
        node: &mut Node,
        asking: &mut bool,
        deadline: Instant,
    ) -> Result<(), StoreError> {
        match redirect {
            Redirect::Moved { slot, node: to } => {
                self.map.store(Arc::new(self.map.load().with_owner(slot, to.clone())));
                self.start_refresh(false);
                (*node, *asking) = (to, false);
            }
            Redirect::Ask { node: to } => (*node, *asking) = (to, true),
            Redirect::TryAgain => {
                let pause = Instant::now() + TRYAGAIN_PAUSE;
                if pause >= deadline {
                    return Err(StoreError::Timeout);
                }
                tokio::time::sleep_until(pause).await;
            }
            Redirect::ReadOnly => *node = self.refreshed_owner(slot, deadline).await?,
            Redirect::NoScript => {}
        }
        Ok(())
    }
}

fn redacted(nodes: &[String]) -> Vec<String> {
    nodes.iter().map(|n| redact_url(n)).collect()
}

impl Remote for ClusterStore {
    async fn charge(&self, batch: &[Charge], groups: &Groups, deadline: Instant) -> Charged {
        ClusterStore::charge_groups(self, batch, groups, deadline).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_addresses_become_urls_and_passwords_never_print() {
        assert_eq!(node_url(" 10.0.0.1:7000"), "redis://10.0.0.1:7000");
        assert_eq!(node_url("rediss://:pw@h:7000"), "rediss://:pw@h:7000");
        let s = ClusterSettings {
            nodes: vec!["redis://:s3cret@h:7000".into(), "h2:7001".into()],
            ca_file: None,
            link: crate::store::redis::RedisSettings::new("redis://h").link(Duration::from_millis(10)),
        };
        let shown = format!("{s:?}");
        assert!(!shown.contains("s3cret") && shown.contains("h2:7001"), "{shown}");
    }
}
