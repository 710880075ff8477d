//! The Redis Cluster store: each charge is one `EVALSHA` on the master that owns its key,
//! routed here — no client-side re-send that could charge twice.
//!
//! A bucket is one key, so every script call touches one slot. The slot map comes from
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

use std::collections::HashMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use arc_swap::ArcSwap;
use futures_util::future::join_all;
use rand::seq::SliceRandom;
use redis::{ConnectionInfo, Pipeline, Value};
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::algorithm::Decision;

use super::super::scripts::{parse, Call, Scripts};
use super::super::{Charge, StoreError};
use super::link::{Link, LinkSettings, Replaced, SendError};
use super::slots::{Node, Redirect, SlotMap};
use super::{address, connect_to, connection_info, host_port, node_url, redact_url, with_address, Health};

pub use super::slots::{hash_tag, key_slot, SLOTS};

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

struct Shared {
    seeds: Vec<ConnectionInfo>,
    settings: LinkSettings,
    /// One lifecycle per master, by `host:port`.
    links: Mutex<HashMap<Node, Arc<Link>>>,
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
        let links: Vec<Arc<Link>> = self.shared.links().values().cloned().collect();
        links.iter().map(|l| l.replaced()).fold(Replaced::default(), |a, b| Replaced {
            closed: a.closed + b.closed,
            failed: a.failed + b.failed,
            readonly: a.readonly + b.readonly,
            no_reply: a.no_reply + b.no_reply,
            renewed: a.renewed + b.renewed,
        })
    }

    /// Charges the batch: the charges of one master as one pipeline, every master's at
    /// once, each by `deadline`. Results are in batch order.
    pub async fn charge(&self, batch: &[Charge], deadline: Instant) -> Vec<Result<Decision, StoreError>> {
        let shared = &self.shared;
        let map = shared.map.load_full();
        let mut groups: Vec<(Node, Vec<usize>)> = Vec::new();
        let mut unrouted = Vec::new();
        for (i, charge) in batch.iter().enumerate() {
            match map.owner(key_slot(charge.key.as_bytes())) {
                Some(node) => match groups.iter_mut().find(|(n, _)| n == node) {
                    Some((_, members)) => members.push(i),
                    None => groups.push((node.clone(), vec![i])),
                },
                None => unrouted.push(i),
            }
        }
        let mut results: Vec<Result<Decision, StoreError>> = vec![Err(StoreError::Timeout); batch.len()];
        let routed = groups.iter().map(|(node, members)| shared.charge_on(node, batch, members, deadline));
        let alone = unrouted
            .iter()
            .map(|&i| async move { vec![(i, shared.charge_one(&batch[i], None, deadline).await)] });
        let (routed, alone) = futures_util::future::join(join_all(routed), join_all(alone)).await;
        for (i, result) in routed.into_iter().chain(alone).flatten() {
            results[i] = result;
        }
        shared.health.record(&results);
        results
    }
}

impl Shared {
    fn links(&self) -> MutexGuard<'_, HashMap<Node, Arc<Link>>> {
        self.links.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The lifecycle of `node`, made on first use (with the first seed's credentials and TLS).
    fn link(&self, node: &Node) -> Arc<Link> {
        let mut links = self.links();
        if let Some(link) = links.get(node) {
            return link.clone();
        }
        let info = with_address(&self.seeds[0], &node.0, node.1);
        let link = Arc::new(Link::new(self.settings, address(&info), connect_to(info)));
        links.insert(node.clone(), link.clone());
        link
    }

    /// The charges `members` of `batch`, owned by `node`, as one pipeline; a redirected
    /// entry (it did not run) then follows its redirect alone.
    async fn charge_on(
        self: &Arc<Self>,
        node: &Node,
        batch: &[Charge],
        members: &[usize],
        deadline: Instant,
    ) -> Vec<(usize, Result<Decision, StoreError>)> {
        let mut pipe = Pipeline::with_capacity(members.len());
        for &i in members {
            pipe.add_command(self.scripts.command(&batch[i], Call::Sha));
        }
        let values = match self.link(node).send(pipe, members.len(), deadline).await {
            Ok(values) => values,
            Err(e) => {
                self.failed(&e);
                let e = StoreError::from(e);
                return members.iter().map(|&i| (i, Err(e.clone()))).collect();
            }
        };
        let answers = members.iter().zip(values).map(|(&i, value)| async move {
            let result = match Redirect::of(&value, &node.0) {
                None => parse(value),
                Some(_) => self.charge_one(&batch[i], Some((node.clone(), value)), deadline).await,
            };
            (i, result)
        });
        join_all(answers).await
    }

    /// One charge, routed by its slot — or, with `reply`, starting from a reply `node`
    /// already gave it — following redirects until a node runs it.
    async fn charge_one(
        self: &Arc<Self>,
        charge: &Charge,
        mut reply: Option<(Node, Value)>,
        deadline: Instant,
    ) -> Result<Decision, StoreError> {
        let slot = key_slot(charge.key.as_bytes());
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
                    pipe.add_command(self.scripts.command(charge, call));
                    let count = 1 + usize::from(asking);
                    match self.link(&node).send(pipe, count, deadline).await {
                        Ok(mut values) => values.pop().unwrap_or(Value::Nil),
                        Err(e) => {
                            self.failed(&e);
                            return Err(e.into());
                        }
                    }
                }
            };
            match Redirect::of(&value, &node.0) {
                None => return parse(value),
                Some(Redirect::Moved { slot, node: to }) => {
                    self.map.store(Arc::new(self.map.load().with_owner(slot, to.clone())));
                    self.start_refresh(false);
                    (node, asking) = (to, false);
                }
                Some(Redirect::Ask { node: to }) => (node, asking) = (to, true),
                Some(Redirect::TryAgain) => {
                    let pause = Instant::now() + TRYAGAIN_PAUSE;
                    if pause >= deadline {
                        return Err(StoreError::Timeout);
                    }
                    tokio::time::sleep_until(pause).await;
                }
                Some(Redirect::ReadOnly) => node = self.refreshed_owner(slot, deadline).await?,
                Some(Redirect::NoScript) if call == Call::Sha => call = Call::Source,
                Some(Redirect::NoScript) => return parse(value),
            }
        }
        Err(StoreError::Server(format!("more than {MAX_REDIRECTS} cluster redirects for slot {slot}")))
    }

    /// A call failed: the master may have failed over, so learn the map again soon.
    fn failed(self: &Arc<Self>, e: &SendError) {
        if matches!(e, SendError::NotSent(_) | SendError::MaybeRan(StoreError::Unavailable(_))) {
            self.start_refresh(false);
        }
    }

    /// The owner of `slot` after a map refresh (waited for until `deadline`).
    async fn refreshed_owner(self: &Arc<Self>, slot: u16, deadline: Instant) -> Result<Node, StoreError> {
        let refreshed = self.refreshed.notified();
        tokio::pin!(refreshed);
        refreshed.as_mut().enable();
        self.start_refresh(true);
        if tokio::time::timeout_at(deadline, refreshed).await.is_err() {
            return Err(StoreError::Timeout);
        }
        self.map
            .load()
            .owner(slot)
            .cloned()
            .ok_or_else(|| StoreError::Unavailable(format!("no redis cluster master known for slot {slot}")))
    }

    /// Starts a map refresh in a background task (never inside a request: a cancelled
    /// request must not leave a refresh half done), unless one runs; `urgent` skips the
    /// minimum gap between refreshes.
    fn start_refresh(self: &Arc<Self>, urgent: bool) {
        {
            let mut state = self.refresh.lock().unwrap_or_else(|e| e.into_inner());
            let recent = state.started.is_some_and(|t| t.elapsed() < REFRESH_GAP);
            if state.running || (recent && !urgent) {
                return;
            }
            state.running = true;
            state.started = Some(Instant::now());
        }
        tokio::spawn(self.clone().refresh());
    }

    /// Asks the known masters (in random order), then the seeds, for `CLUSTER SLOTS`; the
    /// first answer becomes the map, and lifecycles of nodes no longer masters are dropped.
    async fn refresh(self: Arc<Self>) {
        let mut candidates: Vec<Node> = self.map.load().nodes().to_vec();
        candidates.shuffle(&mut rand::rng());
        for seed in &self.seeds {
            if let Some(node) = host_port(seed) {
                candidates.push(node);
            }
        }
        for node in candidates {
            let mut pipe = Pipeline::with_capacity(1);
            pipe.add_command(redis::cmd("CLUSTER").arg("SLOTS").to_owned());
            let reply = self.link(&node).send(pipe, 1, Instant::now() + REFRESH_TIMEOUT).await;
            let Ok(mut values) = reply else { continue };
            let Some(map) = values.pop().and_then(|v| SlotMap::from_cluster_slots(&v, &node.0)) else {
                continue;
            };
            if map.is_empty() {
                continue;
            }
            if **self.map.load() != map {
                tracing::info!(masters = map.nodes().len(), "redis cluster slot map updated");
            }
            self.links().retain(|node, _| map.nodes().contains(node));
            self.map.store(Arc::new(map));
            break;
        }
        self.refresh.lock().unwrap_or_else(|e| e.into_inner()).running = false;
        self.refreshed.notify_waiters();
    }
}

fn redacted(nodes: &[String]) -> Vec<String> {
    nodes.iter().map(|n| redact_url(n)).collect()
}

impl super::super::Remote for ClusterStore {
    async fn charge(&self, batch: &[Charge], deadline: Instant) -> Vec<Result<Decision, StoreError>> {
        ClusterStore::charge(self, batch, deadline).await
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
