//! The Redis side of a soak run: real `redis-server` processes in one of three topologies,
//! TCP fronts where the network misbehaves, and the faults applied to them. Everything here
//! blocks (processes, `redis-cli`): the run calls it from blocking threads.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::front_support::Front;
use crate::plan::{Fault, Topology};
use crate::redis_support::{free_port, RedisServer};

const MASTER_NAME: &str = "soakmaster";

/// Running Redis processes of one topology.
pub enum Stores {
    /// Each instance reaches Redis through a front of its own (`fronts[i]`), so one instance
    /// can be cut from Redis while the others are not; a network fault hits every front.
    Single {
        redis: RedisServer,
        fronts: Vec<std::sync::Arc<Front>>,
    },
    Sentinel {
        data: [RedisServer; 2],
        sentinel: Child,
        sentinel_port: u16,
        _dir: tempfile::TempDir,
    },
    Cluster {
        nodes: Vec<Node>,
        dir: tempfile::TempDir,
    },
}

/// A cluster node behind its own front, which it announces.
pub struct Node {
    port: u16,
    child: Option<Child>,
    front: Front,
}

/// What applying a fault did, for the verdicts: when it started and healed, and whether
/// Redis may have lost counts (a restart without persistence, a failover's unreplicated
/// writes), which widens invariant 1's slack for the windows it touches.
#[derive(Clone, Debug)]
pub struct Applied {
    pub data_loss: bool,
    pub note: String,
}

impl Stores {
    pub fn start(topology: Topology, instances: usize) -> Stores {
        match topology {
            Topology::Single => {
                let redis = RedisServer::start();
                let fronts =
                    (0..instances).map(|_| std::sync::Arc::new(Front::to_port(redis.port()))).collect();
                Stores::Single { redis, fronts }
            }
            Topology::Sentinel => start_sentinel(),
            Topology::Cluster => start_cluster(),
        }
    }

    /// The `tollgate serve` arguments by which instance `instance` reaches this store.
    pub fn tollgate_args(&self, instance: usize) -> Vec<String> {
        match self {
            Stores::Single { fronts, .. } => {
                let front = &fronts[instance % fronts.len()];
                vec!["--store".into(), "redis".into(), "--redis-url".into(), front.url()]
            }
            Stores::Sentinel { sentinel_port, .. } => vec![
                "--store".into(),
                "redis".into(),
                "--redis-sentinel".into(),
                format!("{MASTER_NAME},127.0.0.1:{sentinel_port}"),
            ],
            Stores::Cluster { nodes, .. } => {
                let fronts: Vec<String> =
                    nodes.iter().map(|n| format!("127.0.0.1:{}", n.front.port())).collect();
                vec!["--store".into(), "redis".into(), "--redis-cluster-nodes".into(), fronts.join(",")]
            }
        }
    }

    /// Real ports of the masters now, in a stable order (by the lowest slot they serve on a
    /// cluster).
    pub fn masters(&self) -> Vec<u16> {
        self.view().ports()
    }

    /// Where the masters are, for another thread (the count reader).
    pub fn view(&self) -> Masters {
        match self {
            Stores::Single { redis, .. } => Masters::Single(redis.port()),
            Stores::Sentinel { data, sentinel_port, .. } => {
                Masters::Sentinel { sentinel: *sentinel_port, data: [data[0].port(), data[1].port()] }
            }
            Stores::Cluster { nodes, .. } => {
                Masters::Cluster(nodes.iter().map(|n| (n.port, n.front.port())).collect())
            }
        }
    }

    /// Applies `fault` (holding it `hold`), blocking until it has healed. Instance faults
    /// and reloads are the run's, not the store's.
    pub fn apply(&mut self, fault: Fault, hold: Duration) -> Applied {
        let masters = self.masters();
        let pick = |i: usize| masters[i % masters.len().max(1)];
        match fault {
            Fault::Freeze { master } => {
                let port = pick(master);
                let pid = self.pid_of(port);
                signal(pid, "STOP");
                std::thread::sleep(hold);
                signal(pid, "CONT");
                // A cluster replica promotes itself after the node timeout (2 s), a sentinel
                // fails over after 1 s down: writes not yet replicated are lost.
                let data_loss = match self {
                    Stores::Cluster { .. } => hold >= Duration::from_millis(1_500),
                    Stores::Sentinel { .. } => hold >= Duration::from_millis(900),
                    Stores::Single { .. } => false,
                };
                Applied { data_loss, note: format!("master :{port} frozen {} ms", hold.as_millis()) }
            }
            Fault::KillRedis => {
                let port = pick(0);
                let server = match self {
                    Stores::Single { redis, .. } => redis,
                    Stores::Sentinel { data, .. } => {
                        data.iter_mut().find(|r| r.port() == port).expect("the master")
                    }
                    Stores::Cluster { nodes, dir } => {
                        // Its replica is promoted after the node timeout (2 s) if the master
                        // is still down; restarted, the old master rejoins (as a replica then).
                        let node = nodes.iter_mut().find(|n| n.port == port).expect("the master");
                        if let Some(mut child) = node.child.take() {
                            let _ = child.kill();
                            let _ = child.wait();
                        }
                        std::thread::sleep(hold);
                        node.child = Some(spawn_node(port, node.front.port(), dir.path()));
                        let back = wait_for(Duration::from_secs(10), || cli(port, &["PING"]) == "PONG");
                        let note = format!(
                            "master :{port} killed, restarted after {} ms (up: {back})",
                            hold.as_millis()
                        );
                        return Applied { data_loss: true, note };
                    }
                };
                server.stop();
                std::thread::sleep(hold);
                server.restart();
                Applied {
                    data_loss: true,
                    note: format!("master :{port} killed, restarted after {} ms", hold.as_millis()),
                }
            }
            Fault::Latency { master, millis } => {
                let fronts = self.fronts_of(pick(master));
                fronts.iter().for_each(|f| f.add_latency(Duration::from_millis(millis)));
                std::thread::sleep(hold);
                fronts.iter().for_each(|f| f.add_latency(Duration::ZERO));
                Applied {
                    data_loss: false,
                    note: format!("+{millis} ms per reply for {} ms", hold.as_millis()),
                }
            }
            Fault::Silence { master } => {
                self.fronts_of(pick(master)).iter().for_each(|f| f.silence_existing());
                std::thread::sleep(hold);
                Applied { data_loss: false, note: "open connections silenced".into() }
            }
            Fault::ClientKill => {
                let killed: Vec<String> =
                    masters.iter().map(|&p| cli(p, &["CLIENT", "KILL", "TYPE", "normal"])).collect();
                Applied { data_loss: false, note: format!("CLIENT KILL: {}", killed.join(",")) }
            }
            Fault::Failover { master } => self.failover(master),
            Fault::SlotMigration { key } => self.migrate(key),
            Fault::KillInstance { .. }
            | Fault::DrainInstance { .. }
            | Fault::Reload(_)
            | Fault::CutInstance { .. } => {
                unreachable!("applied by the run")
            }
        }
    }

    /// The pid of the redis-server on `port`.
    pub fn pid_of(&self, port: u16) -> u32 {
        match self {
            Stores::Single { redis, .. } => redis.pid(),
            Stores::Sentinel { data, .. } => {
                data.iter().find(|r| r.port() == port).and_then(RedisServer::pid)
            }
            Stores::Cluster { nodes, .. } => {
                nodes.iter().find(|n| n.port == port).and_then(|n| n.child.as_ref().map(Child::id))
            }
        }
        .expect("a running redis-server")
    }

    /// Each instance's own front to Redis, for cutting one instance from Redis (every reply
    /// dropped and its connection closed: `Front::cut_replies`); empty where the instances
    /// share their path (only `single` has a front per instance).
    pub fn instance_fronts(&self) -> Vec<std::sync::Arc<Front>> {
        match self {
            Stores::Single { fronts, .. } => fronts.clone(),
            _ => Vec::new(),
        }
    }

    fn fronts_of(&self, port: u16) -> Vec<&Front> {
        match self {
            Stores::Single { fronts, .. } => fronts.iter().map(|f| &**f).collect(),
            Stores::Cluster { nodes, .. } => {
                vec![&nodes.iter().find(|n| n.port == port).expect("a node").front]
            }
            Stores::Sentinel { .. } => unreachable!("no front on the sentinel topology"),
        }
    }

    fn failover(&mut self, master: usize) -> Applied {
        match self {
            Stores::Sentinel { data, sentinel_port, .. } => {
                let before = sentinel_master(*sentinel_port);
                let asked = wait_for(Duration::from_secs(10), || {
                    cli(*sentinel_port, &["SENTINEL", "FAILOVER", MASTER_NAME]) == "OK"
                });
                let switched = asked
                    && wait_for(Duration::from_secs(10), || {
                        let now = sentinel_master(*sentinel_port);
                        now.is_some() && now != before && now.is_some_and(|p| role(p).starts_with("master"))
                    });
                let _ = data;
                Applied {
                    data_loss: true,
                    note: format!("sentinel failover from {before:?}: switched {switched}"),
                }
            }
            Stores::Cluster { nodes, .. } => {
                let masters = cluster_masters(nodes);
                let (port, id, _) = masters[master % masters.len()].clone();
                let replica = replica_of(nodes, &id);
                let Some(replica) = replica else {
                    return Applied { data_loss: false, note: format!("master :{port} has no replica now") };
                };
                let out = cli(replica, &["CLUSTER", "FAILOVER"]);
                let promoted = wait_for(Duration::from_secs(10), || role(replica).starts_with("master"));
                // A manual failover waits for the replica to catch up: no write is lost.
                Applied {
                    data_loss: !promoted,
                    note: format!("replica :{replica} of :{port} promoted: {out} {promoted}"),
                }
            }
            Stores::Single { .. } => unreachable!("no failover on a single node"),
        }
    }

    fn migrate(&mut self, pick: usize) -> Applied {
        let Stores::Cluster { nodes, .. } = self else { unreachable!("slot migration is a cluster's") };
        let masters = cluster_masters(nodes);
        let (source, source_id, _) = masters[pick % masters.len()].clone();
        let (target, target_id, _) = masters[(pick + 1) % masters.len()].clone();
        let keys = cli(source, &["--scan", "--pattern", "*soak_gcra*"]);
        let Some(key) = keys.lines().nth(pick).or(keys.lines().next()) else {
            return Applied { data_loss: false, note: format!("no key on :{source} to move") };
        };
        let slot = cli(source, &["CLUSTER", "KEYSLOT", key]);
        cli(target, &["CLUSTER", "SETSLOT", &slot, "IMPORTING", &source_id]);
        cli(source, &["CLUSTER", "SETSLOT", &slot, "MIGRATING", &target_id]);
        let mut moved = 0;
        loop {
            let batch = cli(source, &["CLUSTER", "GETKEYSINSLOT", &slot, "100"]);
            let batch: Vec<&str> = batch.lines().filter(|k| !k.is_empty()).collect();
            if batch.is_empty() {
                break;
            }
            let mut args = vec!["MIGRATE", "127.0.0.1"];
            let target_port = target.to_string();
            args.extend([target_port.as_str(), "", "0", "5000", "KEYS"]);
            args.extend(batch.iter().copied());
            cli(source, &args);
            moved += batch.len();
            std::thread::sleep(Duration::from_millis(20));
        }
        for (port, _, _) in &masters {
            cli(*port, &["CLUSTER", "SETSLOT", &slot, "NODE", &target_id]);
        }
        Applied { data_loss: false, note: format!("slot {slot} moved :{source} → :{target}, {moved} keys") }
    }
}

/// The masters of a topology, found afresh at each call: the sentinels' master, a
/// cluster's slot owners.
#[derive(Clone, Debug)]
pub enum Masters {
    Single(u16),
    Sentinel {
        sentinel: u16,
        data: [u16; 2],
    },
    /// `(real port, announced front port)` of every node.
    Cluster(Vec<(u16, u16)>),
}

impl Masters {
    /// Real ports of the masters now (by lowest slot on a cluster).
    pub fn ports(&self) -> Vec<u16> {
        match self {
            Masters::Single(port) => vec![*port],
            // The sentinels' master: after a failover the old one may still call itself
            // master (it resumed before the sentinels demoted it); clients follow the
            // sentinels, so counts are read, and faults aimed, there.
            Masters::Sentinel { sentinel, data } => match sentinel_master(*sentinel) {
                Some(port) => vec![port],
                None => data.iter().copied().filter(|&p| role(p).starts_with("master")).collect(),
            },
            Masters::Cluster(nodes) => {
                cluster_masters_of(nodes).into_iter().map(|(port, _, _)| port).collect()
            }
        }
    }

    /// `(key, count)` of every fixed-window bucket whose key holds `marker`: the counts
    /// invariant 5 compares with what clients saw.
    pub fn counts(&self, marker: &str) -> Vec<(String, u64)> {
        const SCRIPT: &str = "local out = {} for _, k in ipairs(redis.call('KEYS', ARGV[1])) do \
                              out[#out + 1] = k out[#out + 1] = redis.call('HGET', k, 'c') or '0' end return out";
        // Every node, replicas included, and the largest count per key: a count only grows
        // within its hour, a replica holds at most its master's, and during a failover the
        // nodes' roles may read as neither (found by the soak: a read in the middle of a
        // `CLUSTER FAILOVER` missed a master's keys).
        let mut all: std::collections::HashMap<String, u64> = std::collections::HashMap::new();
        for port in self.nodes() {
            let out = cli(port, &["EVAL_RO", SCRIPT, "0", &format!("*{marker}*")]);
            let lines: Vec<&str> = out.lines().collect();
            for pair in lines.chunks(2) {
                if let [key, count] = pair {
                    let count = count.trim().parse().unwrap_or(0);
                    let held = all.entry(key.to_string()).or_default();
                    *held = (*held).max(count);
                }
            }
        }
        all.into_iter().collect()
    }

    /// Every data node's real port.
    fn nodes(&self) -> Vec<u16> {
        match self {
            Masters::Single(port) => vec![*port],
            Masters::Sentinel { data, .. } => data.to_vec(),
            Masters::Cluster(nodes) => nodes.iter().map(|n| n.0).collect(),
        }
    }
}

impl Drop for Stores {
    fn drop(&mut self) {
        match self {
            Stores::Sentinel { sentinel, .. } => {
                let _ = sentinel.kill();
                let _ = sentinel.wait();
            }
            Stores::Cluster { nodes, .. } => {
                for node in nodes {
                    if let Some(mut child) = node.child.take() {
                        let _ = child.kill();
                        let _ = child.wait();
                    }
                }
            }
            Stores::Single { .. } => {}
        }
    }
}

/// `kill -SIG pid`.
pub fn signal(pid: u32, sig: &str) {
    let _ = Command::new("kill").arg(format!("-{sig}")).arg(pid.to_string()).status();
}

/// `redis-cli -p port args…`: its trimmed stdout.
pub fn cli(port: u16, args: &[&str]) -> String {
    let out =
        Command::new("redis-cli").args(["-p", &port.to_string()]).args(args).stderr(Stdio::null()).output();
    out.map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string()).unwrap_or_default()
}

fn role(port: u16) -> String {
    cli(port, &["ROLE"])
}

/// Polls `ready` every 20 ms for up to `timeout`.
pub fn wait_for(timeout: Duration, mut ready: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if ready() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn sentinel_master(sentinel: u16) -> Option<u16> {
    let out = cli(sentinel, &["SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER_NAME]);
    out.lines().nth(1).and_then(|p| p.trim().parse().ok())
}

fn start_sentinel() -> Stores {
    let dir = tempfile::Builder::new().prefix("tollgate-soak-sentinel-").tempdir().expect("tempdir");
    let master = RedisServer::start();
    let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &master.port().to_string()]);
    let sentinel_port = free_port();
    let conf: PathBuf = dir.path().join("sentinel.conf");
    let text = format!(
        "port {sentinel_port}\nbind 127.0.0.1\ndir {}\n\
         sentinel monitor {MASTER_NAME} 127.0.0.1 {} 1\n\
         sentinel down-after-milliseconds {MASTER_NAME} 1000\n\
         sentinel failover-timeout {MASTER_NAME} 4000\n",
        dir.path().display(),
        master.port()
    );
    std::fs::write(&conf, text).expect("write sentinel.conf");
    let sentinel = Command::new("redis-server")
        .arg(&conf)
        .arg("--sentinel")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("redis-server runs as a sentinel with --sentinel");
    let replica_port = replica.port().to_string();
    let known = wait_for(Duration::from_secs(30), || {
        cli(sentinel_port, &["SENTINEL", "REPLICAS", MASTER_NAME]).contains(&replica_port)
            && cli(replica.port(), &["INFO", "replication"]).contains("master_link_status:up")
    });
    assert!(known, "the sentinel did not learn master and replica");
    Stores::Sentinel { data: [master, replica], sentinel, sentinel_port, _dir: dir }
}

/// Three masters and three replicas; each node announces its front's port.
fn start_cluster() -> Stores {
    let dir = tempfile::Builder::new().prefix("tollgate-soak-cluster-").tempdir().expect("tempdir");
    let mut nodes = Vec::new();
    let mut taken = std::collections::HashSet::new();
    for _ in 0..6 {
        let port = loop {
            let port = free_port();
            if port <= 55535
                && !taken.contains(&port)
                && std::net::TcpListener::bind(("127.0.0.1", port + 10000)).is_ok()
            {
                break port;
            }
        };
        taken.extend([port, port + 10000]);
        let front = Front::to_port(port);
        let child = spawn_node(port, front.port(), dir.path());
        assert!(wait_for(Duration::from_secs(10), || cli(port, &["PING"]) == "PONG"), "node :{port} up");
        nodes.push(Node { port, child: Some(child), front });
    }
    let addrs: Vec<String> = nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)).collect();
    let out = Command::new("redis-cli")
        .args(["--cluster", "create"])
        .args(&addrs)
        .args(["--cluster-replicas", "1", "--cluster-yes"])
        .output()
        .expect("redis-cli");
    assert!(out.status.success(), "cluster create: {}", String::from_utf8_lossy(&out.stdout));
    let ready = wait_for(Duration::from_secs(30), || {
        nodes.iter().all(|n| {
            let info = cli(n.port, &["CLUSTER", "INFO"]);
            info.contains("cluster_state:ok") && info.contains("cluster_known_nodes:6")
        }) && cluster_masters(&nodes).len() == 3
            && nodes
                .iter()
                .filter(|n| role(n.port).starts_with("slave"))
                .all(|n| cli(n.port, &["INFO", "replication"]).contains("master_link_status:up"))
    });
    assert!(ready, "the cluster did not come up");
    Stores::Cluster { nodes, dir }
}

/// A cluster node on `port` announcing `front` (its cluster config file in `dir` survives
/// a restart: the node rejoins).
fn spawn_node(port: u16, front: u16, dir: &std::path::Path) -> Child {
    Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--cluster-enabled", "yes", "--cluster-config-file", &format!("nodes-{port}.conf")])
        .args(["--cluster-require-full-coverage", "no", "--cluster-node-timeout", "2000"])
        .args(["--cluster-announce-ip", "127.0.0.1", "--cluster-announce-port", &front.to_string()])
        .args(["--cluster-announce-bus-port", &(port + 10000).to_string()])
        .args(["--save", "", "--appendonly", "no"])
        .arg("--dir")
        .arg(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("redis-server must be installed (make deps)")
}

/// `(real port, node id, lowest slot)` of every master that serves slots, by lowest slot.
fn cluster_masters(nodes: &[Node]) -> Vec<(u16, String, u32)> {
    cluster_masters_of(&nodes.iter().map(|n| (n.port, n.front.port())).collect::<Vec<_>>())
}

/// [`cluster_masters`] over `(real port, front port)` pairs.
fn cluster_masters_of(nodes: &[(u16, u16)]) -> Vec<(u16, String, u32)> {
    let Some(view) = nodes.iter().map(|n| cli(n.0, &["CLUSTER", "NODES"])).find(|v| !v.is_empty()) else {
        return vec![];
    };
    let mut masters = Vec::new();
    for line in view.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() < 9 || !fields[2].contains("master") || fields[2].contains("fail") {
            continue;
        }
        let announced: Option<u16> = fields[1].split(['@', ':']).nth(1).and_then(|p| p.parse().ok());
        let Some(node) = nodes.iter().find(|n| Some(n.1) == announced) else { continue };
        let lowest = fields[8..]
            .iter()
            .filter_map(|r| r.split('-').next()?.parse::<u32>().ok())
            .min()
            .unwrap_or(u32::MAX);
        masters.push((node.0, fields[0].to_string(), lowest));
    }
    masters.sort_by_key(|m| m.2);
    masters
}

/// The real port of a replica of the master `id`, if one is up.
fn replica_of(nodes: &[Node], id: &str) -> Option<u16> {
    let view = nodes.iter().map(|n| cli(n.port, &["CLUSTER", "NODES"])).find(|v| !v.is_empty())?;
    view.lines().find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() < 8 || fields[3] != id || !fields[2].contains("slave") || fields[2].contains("fail") {
            return None;
        }
        let announced: Option<u16> = fields[1].split(['@', ':']).nth(1).and_then(|p| p.parse().ok());
        nodes.iter().find(|n| Some(n.front.port()) == announced).map(|n| n.port)
    })
}
