//! A real 3-master Redis Cluster per test, on free loopback ports, killed on drop.
//!
//! Each node needs two free ports: its own and its cluster bus (port + 10000). The nodes
//! start with persistence off and `cluster-require-full-coverage no` (a dead master stops
//! only its own slots), `redis-cli --cluster create` assigns the slots, and `start` returns
//! once every node reports `cluster_state:ok` and knows every other node: readiness is
//! polled, never slept for. A missing `redis-server` or `redis-cli` is a loud failure.
//!
//! `start_behind_fronts` puts a TCP front (`front.rs`) before each master, and each master
//! announces its front (`cluster-announce-port`; the bus stays direct), so a client that
//! discovers nodes by `CLUSTER SLOTS` or follows `MOVED` connects through the fronts, and a
//! test can silence one master's connections. The cluster's own helpers (`cli`, …) always
//! talk to the real ports.
//!
//! `start_tls` runs every node on TLS only (client port and cluster bus), requiring client
//! certificates (`tls-auth-clients yes`); its helpers talk TLS with the test's client
//! certificate (`ClusterTls`).

use std::collections::HashSet;
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::front_support::Front;

/// Masters in a test cluster.
pub const MASTERS: usize = 3;

/// A running Redis Cluster owned by one test.
pub struct RedisCluster {
    nodes: Vec<Node>,
    dir: tempfile::TempDir,
    tls: Option<ClusterTls>,
}

/// The PEM files of a TLS cluster: `ca.crt`, the nodes' `server.crt` / `server.key` (for
/// 127.0.0.1, also their client identity on the bus) and a client's `client.crt` /
/// `client.key`, all in `dir`.
#[derive(Debug, Clone)]
pub struct ClusterTls {
    pub dir: std::path::PathBuf,
}

impl ClusterTls {
    pub fn file(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }

    /// The server side: TLS only, on the bus and replication too, client certificates
    /// required.
    pub fn server_args(&self, port: &str) -> Vec<String> {
        let args = [
            ("--port", "0".to_string()),
            ("--tls-port", port.to_string()),
            ("--tls-cluster", "yes".to_string()),
            ("--tls-replication", "yes".to_string()),
            ("--tls-cert-file", self.file("server.crt")),
            ("--tls-key-file", self.file("server.key")),
            ("--tls-ca-cert-file", self.file("ca.crt")),
            ("--tls-auth-clients", "yes".to_string()),
        ];
        args.into_iter().flat_map(|(flag, value)| [flag.to_string(), value]).collect()
    }

    /// `redis-cli`'s TLS arguments, with the client certificate.
    pub fn cli_args(&self) -> Vec<String> {
        vec![
            "--tls".into(),
            "--cert".into(),
            self.file("client.crt"),
            "--key".into(),
            self.file("client.key"),
            "--cacert".into(),
            self.file("ca.crt"),
        ]
    }
}

struct Node {
    port: u16,
    child: Option<Child>,
    /// The front this master announces, when the cluster runs behind fronts.
    front: Option<Front>,
}

/// A port that is free, and whose cluster bus port (+10000) is free too, and not in `taken`.
fn free_cluster_port(taken: &HashSet<u16>) -> u16 {
    for _ in 0..200 {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
        let port = listener.local_addr().expect("local addr").port();
        if port > 55535 || taken.contains(&port) || taken.contains(&(port + 10000)) {
            continue;
        }
        if TcpListener::bind(("127.0.0.1", port + 10000)).is_ok() {
            return port;
        }
    }
    panic!("no free port pair (port, port + 10000) found on 127.0.0.1");
}

impl RedisCluster {
    /// Starts three masters, creates the cluster and waits until it is ready.
    pub fn start() -> RedisCluster {
        Self::start_with(false, None)
    }

    /// Like `start`, each master behind a front of its own that it announces to clients.
    pub fn start_behind_fronts() -> RedisCluster {
        Self::start_with(true, None)
    }

    /// Like `start`, on TLS only and requiring client certificates (`tls`'s files).
    pub fn start_tls(tls: ClusterTls) -> RedisCluster {
        Self::start_with(false, Some(tls))
    }

    fn start_with(fronts: bool, tls: Option<ClusterTls>) -> RedisCluster {
        let dir = tempfile::Builder::new().prefix("tollgate-cluster-").tempdir().expect("tempdir");
        let mut taken = HashSet::new();
        let mut nodes = Vec::new();
        for _ in 0..MASTERS {
            let port = free_cluster_port(&taken);
            taken.extend([port, port + 10000]);
            let front = fronts.then(|| Front::to_port(port));
            nodes.push(Node { port, child: None, front });
        }
        let mut cluster = RedisCluster { nodes, dir, tls };
        for i in 0..MASTERS {
            cluster.spawn(i);
        }
        cluster.create();
        cluster
    }

    fn spawn(&mut self, i: usize) {
        let port = self.nodes[i].port.to_string();
        let announce = match &self.nodes[i].front {
            Some(front) => vec![
                "--cluster-announce-ip".to_string(),
                "127.0.0.1".to_string(),
                "--cluster-announce-port".to_string(),
                front.port().to_string(),
                "--cluster-announce-bus-port".to_string(),
                (self.nodes[i].port + 10000).to_string(),
            ],
            None => vec![],
        };
        let listen = match &self.tls {
            Some(tls) => tls.server_args(&port),
            None => vec!["--port".to_string(), port.clone()],
        };
        let child = Command::new("redis-server")
            .args(&listen)
            .args(["--bind", "127.0.0.1"])
            .args(["--cluster-enabled", "yes", "--cluster-config-file", &format!("nodes-{port}.conf")])
            .args(["--cluster-require-full-coverage", "no", "--cluster-node-timeout", "2000"])
            .args(&announce)
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(self.dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect(
                "redis-server must be installed (make test installs it: apt-get install -y redis-server)",
            );
        self.nodes[i].child = Some(child);
        self.wait(Duration::from_secs(10), &format!("node {port} answers PING"), |c| {
            c.cli(i, &["PING"]) == "PONG"
        });
    }

    fn create(&self) {
        let addrs: Vec<String> = self.nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)).collect();
        let out = self
            .redis_cli()
            .args(["--cluster", "create"])
            .args(&addrs)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .output()
            .expect("redis-cli must be installed (it comes with redis-server)");
        assert!(
            out.status.success(),
            "redis-cli --cluster create failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let known = format!("cluster_known_nodes:{MASTERS}");
        self.wait(Duration::from_secs(30), "every node sees cluster_state:ok", |c| {
            (0..MASTERS).all(|i| {
                let info = c.cli(i, &["CLUSTER", "INFO"]);
                info.contains("cluster_state:ok") && info.contains(&known)
            })
        });
    }

    /// `redis-cli`, with the client certificate on a TLS cluster.
    fn redis_cli(&self) -> Command {
        let mut command = Command::new("redis-cli");
        if let Some(tls) = &self.tls {
            command.args(tls.cli_args());
        }
        command
    }

    /// Polls `ready` every 20 ms; panics naming `what` after `timeout`.
    fn wait(&self, timeout: Duration, what: &str, ready: impl Fn(&RedisCluster) -> bool) {
        let deadline = Instant::now() + timeout;
        while !ready(self) {
            assert!(Instant::now() < deadline, "redis cluster: timed out waiting until {what}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `127.0.0.1:PORT` of every node as clients should reach it, for
    /// `--redis-cluster-nodes`: each master's front when the cluster runs behind fronts.
    pub fn nodes(&self) -> Vec<String> {
        (0..self.nodes.len()).map(|i| format!("127.0.0.1:{}", self.client_port(i))).collect()
    }

    /// The real port of node `i`.
    pub fn port(&self, i: usize) -> u16 {
        self.nodes[i].port
    }

    /// The port node `i` announces to clients: its front's, or its own.
    pub fn client_port(&self, i: usize) -> u16 {
        self.nodes[i].front.as_ref().map_or(self.nodes[i].port, Front::port)
    }

    /// The front of master `i` (only behind fronts).
    pub fn front(&self, i: usize) -> &Front {
        self.nodes[i].front.as_ref().expect("this cluster runs behind fronts (start_behind_fronts)")
    }

    /// `redis-cli -p PORT args…` on node `i` (no cluster redirects); its trimmed stdout.
    pub fn cli(&self, i: usize, args: &[&str]) -> String {
        let out = self
            .redis_cli()
            .args(["-p", &self.nodes[i].port.to_string()])
            .args(args)
            .output()
            .expect("redis-cli must be installed (it comes with redis-server)");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// Keys held by node `i`.
    pub fn dbsize(&self, i: usize) -> u64 {
        self.cli(i, &["DBSIZE"]).parse().unwrap_or_else(|_| panic!("DBSIZE of node {i}"))
    }

    /// Every key node `i` holds.
    pub fn keys(&self, i: usize) -> Vec<String> {
        self.cli(i, &["--scan"]).lines().map(str::to_string).filter(|k| !k.is_empty()).collect()
    }

    /// `CLUSTER KEYSLOT key`, asked of node 0.
    pub fn keyslot(&self, key: &str) -> u16 {
        self.cli(0, &["CLUSTER", "KEYSLOT", key]).parse().expect("CLUSTER KEYSLOT answers a number")
    }

    /// The node that serves `slot`, by a live node's `CLUSTER NODES`.
    pub fn owner_of(&self, slot: u16) -> usize {
        let alive = (0..MASTERS).find(|&i| self.is_alive(i)).expect("a live node");
        for line in self.cli(alive, &["CLUSTER", "NODES"]).lines() {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let owns = fields.iter().skip(8).any(|range| match range.split_once('-') {
                Some((a, b)) => {
                    a.parse::<u16>().is_ok_and(|a| a <= slot) && b.parse::<u16>().is_ok_and(|b| slot <= b)
                }
                None => range.parse::<u16>().is_ok_and(|s| s == slot),
            });
            if owns {
                let port = fields[1].split(['@', ':']).nth(1).and_then(|p| p.parse::<u16>().ok());
                if let Some(i) = (0..self.nodes.len())
                    .find(|&i| port == Some(self.nodes[i].port) || port == Some(self.client_port(i)))
                {
                    return i;
                }
            }
        }
        panic!("no node owns slot {slot}");
    }

    /// Whether node `i` still runs.
    pub fn is_alive(&self, i: usize) -> bool {
        self.nodes[i].child.is_some()
    }

    /// Freezes master `i` (SIGSTOP): connections stay open and nothing answers, as with a
    /// host cut off without a reset. `kill` or drop ends it.
    pub fn pause(&self, i: usize) {
        let pid = self.nodes[i].child.as_ref().expect("node is running").id();
        let status = Command::new("kill").args(["-STOP", &pid.to_string()]).status().expect("run kill");
        assert!(status.success(), "SIGSTOP node {i}");
    }

    /// Kills master `i` (SIGKILL) and waits for it to exit. Its slots have no replica: they
    /// stay down, the other masters keep serving theirs.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.nodes[i].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        for i in 0..self.nodes.len() {
            self.kill(i);
        }
    }
}
