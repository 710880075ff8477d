//! A real Sentinel setup per test: a master, one replica and one sentinel (quorum 1), on
//! free loopback ports, killed on drop.
//!
//! `start` returns once the replica's link is up and the sentinel knows master and replica;
//! `failover` asks the sentinel for a failover and returns once the old replica is master
//! and the old master has become its replica. Readiness is polled, never slept for.
//! `start_tls` runs all three on TLS only, requiring client certificates.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::cluster_support::ClusterTls;

/// The master's name in the sentinel's configuration.
pub const MASTER_NAME: &str = "tollgate";

/// Master, replica and sentinel, owned by one test.
pub struct RedisSentinel {
    /// Data nodes' ports: `[0]` starts as master, `[1]` as its replica.
    data: [u16; 2],
    sentinel: u16,
    children: Vec<Child>,
    dir: tempfile::TempDir,
    tls: Option<ClusterTls>,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port").local_addr().expect("local addr").port()
}

fn redis_server(dir: &std::path::Path, args: &[String]) -> Child {
    Command::new("redis-server")
        .args(args)
        .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
        // Replicas sync at once (the default waits 5 s for more replicas to join).
        .args(["--repl-diskless-sync-delay", "0"])
        .arg("--dir")
        .arg(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("redis-server must be installed (make test installs it: apt-get install -y redis-server)")
}

impl RedisSentinel {
    pub fn start() -> RedisSentinel {
        Self::start_with(None)
    }

    /// Like `start`, master, replica and sentinel on TLS only, requiring client
    /// certificates (`tls`'s files; the sentinel and the replica present the nodes' own).
    pub fn start_tls(tls: ClusterTls) -> RedisSentinel {
        Self::start_with(Some(tls))
    }

    fn start_with(tls: Option<ClusterTls>) -> RedisSentinel {
        let dir = tempfile::Builder::new().prefix("tollgate-sentinel-").tempdir().expect("tempdir");
        let (master, replica, sentinel) = (free_port(), free_port(), free_port());
        let listen = |port: u16| match &tls {
            Some(tls) => tls.server_args(&port.to_string()),
            None => vec!["--port".to_string(), port.to_string()],
        };
        let tls_conf = match &tls {
            Some(tls) => format!(
                "port 0\ntls-port {sentinel}\ntls-replication yes\ntls-auth-clients yes\n\
                 tls-cert-file {}\ntls-key-file {}\ntls-ca-cert-file {}\n",
                tls.file("server.crt"),
                tls.file("server.key"),
                tls.file("ca.crt")
            ),
            None => format!("port {sentinel}\n"),
        };
        let master_args = listen(master);
        let mut replica_args = listen(replica);
        replica_args.extend(["--replicaof".to_string(), "127.0.0.1".to_string(), master.to_string()]);
        let mut setup = RedisSentinel { data: [master, replica], sentinel, children: vec![], dir, tls };
        setup.children.push(redis_server(setup.dir.path(), &master_args));
        setup.children.push(redis_server(setup.dir.path(), &replica_args));
        setup.wait("the replica's link is up", |s| {
            s.cli(replica, &["INFO", "replication"]).contains("master_link_status:up")
        });
        // A port chosen free can be taken by another test's server before the sentinel binds
        // it (tests start servers in parallel): a sentinel that exits is started again on
        // another port, at most three times.
        for attempt in 0..3 {
            if attempt > 0 {
                setup.sentinel = free_port();
            }
            let tls_conf = tls_conf.replace(&format!(" {sentinel}\n"), &format!(" {}\n", setup.sentinel));
            let conf = setup.dir.path().join(format!("sentinel-{attempt}.conf"));
            let text = format!(
                "{tls_conf}bind 127.0.0.1\ndir {}\n\
                 sentinel monitor {MASTER_NAME} 127.0.0.1 {master} 1\n\
                 sentinel down-after-milliseconds {MASTER_NAME} 1000\n\
                 sentinel failover-timeout {MASTER_NAME} 10000\n",
                setup.dir.path().display()
            );
            std::fs::write(&conf, text).expect("write sentinel.conf");
            let child = Command::new("redis-server")
                .arg(&conf)
                .arg("--sentinel")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("redis-server must be installed (it runs as a sentinel with --sentinel)");
            setup.children.push(child);
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                let port = setup.sentinel;
                if setup.sentinel_master() == Some(master)
                    && setup.cli(port, &["SENTINEL", "REPLICAS", MASTER_NAME]).contains(&replica.to_string())
                {
                    return setup;
                }
                let exited = setup.children.last_mut().is_some_and(|c| matches!(c.try_wait(), Ok(Some(_))));
                if exited {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "redis sentinel: timed out waiting until it knows master and replica"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        panic!("redis sentinel: exited three times at start (its ports taken?)");
    }

    /// `127.0.0.1:PORT` of the sentinel.
    pub fn sentinel_addr(&self) -> String {
        format!("127.0.0.1:{}", self.sentinel)
    }

    /// The data nodes' ports (`[0]` started as master).
    pub fn data_ports(&self) -> [u16; 2] {
        self.data
    }

    /// The master's port as the sentinel reports it.
    pub fn sentinel_master(&self) -> Option<u16> {
        let out = self.cli(self.sentinel, &["SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER_NAME]);
        out.lines().nth(1).and_then(|p| p.trim().parse().ok())
    }

    /// Waits until the replica has every write the master had when this was called.
    pub fn wait_replicated(&self) {
        let offset = |s: &RedisSentinel, port: u16, field: &str| -> u64 {
            let info = s.cli(port, &["INFO", "replication"]);
            info.lines().find_map(|l| l.strip_prefix(field)).and_then(|v| v.trim().parse().ok()).unwrap_or(0)
        };
        let [master, replica] = self.data;
        let target = offset(self, master, "master_repl_offset:");
        self.wait("the replica has caught up", |s| offset(s, replica, "slave_repl_offset:") >= target);
    }

    /// Forces a failover of the master `data_ports()[0]` and waits until the sentinel names
    /// the replica as master and the replica says so. The old master stays up, and a master,
    /// until the sentinel reconfigures it (about 10 s later).
    pub fn failover(&self) {
        let new = self.data[1];
        // NOGOODSLAVE until the sentinel has fresh INFO from the replica: ask again.
        self.wait("the sentinel accepts a failover", |s| {
            s.cli(s.sentinel, &["SENTINEL", "FAILOVER", MASTER_NAME]) == "OK"
        });
        self.wait("the failover completes", |s| {
            s.sentinel_master() == Some(new) && s.cli(new, &["ROLE"]).starts_with("master")
        });
    }

    /// `redis-cli -p port args…`; its trimmed stdout.
    pub fn cli(&self, port: u16, args: &[&str]) -> String {
        let mut command = Command::new("redis-cli");
        if let Some(tls) = &self.tls {
            command.args(tls.cli_args());
        }
        let out = command
            .args(["-p", &port.to_string()])
            .args(args)
            .output()
            .expect("redis-cli must be installed (it comes with redis-server)");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    fn wait(&self, what: &str, ready: impl Fn(&RedisSentinel) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !ready(self) {
            assert!(Instant::now() < deadline, "redis sentinel: timed out waiting until {what}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for RedisSentinel {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
