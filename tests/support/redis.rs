//! A real `redis-server` per test, on a free loopback port, killed on drop.
//!
//! A missing `redis-server` binary is a loud failure: `make test` installs it.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running redis-server owned by one test.
pub struct RedisServer {
    port: u16,
    dir: PathBuf,
    child: Option<Child>,
    extra: Vec<String>,
}

/// A port that was free a moment ago (bind port 0, read it, release it), and never handed
/// out before in this test process: tests run in parallel, and between the release and the
/// child process binding it, another test's `bind(0)` could be given the same port (two
/// topologies would then talk to each other's servers).
pub fn free_port() -> u16 {
    static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    // Ports already given stay bound here until a new one comes, so `bind(0)` moves on.
    let mut held = Vec::new();
    loop {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
        let port = listener.local_addr().expect("local addr").port();
        if !given.contains(&port) {
            given.push(port);
            return port;
        }
        held.push(listener);
    }
}

impl RedisServer {
    /// Starts redis-server with persistence off and waits until it answers PING.
    pub fn start() -> RedisServer {
        Self::start_with(&[])
    }

    /// Like `start`, with extra command-line arguments (e.g. `["--requirepass", "x"]`).
    pub fn start_with(extra: &[&str]) -> RedisServer {
        Self::start_on_with(free_port(), extra)
    }

    /// Starts redis-server on a chosen port (e.g. one a client was already pointed at).
    pub fn start_on(port: u16) -> RedisServer {
        Self::start_on_with(port, &[])
    }

    fn start_on_with(port: u16, extra: &[&str]) -> RedisServer {
        let dir = std::env::temp_dir().join(format!("tollgate-redis-{}-{}", std::process::id(), port));
        std::fs::create_dir_all(&dir).expect("create redis dir");
        let mut server =
            RedisServer { port, dir, child: None, extra: extra.iter().map(|s| s.to_string()).collect() };
        server.spawn();
        server
    }

    fn spawn(&mut self) {
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&self.dir)
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect(
                "redis-server must be installed (make test installs it: apt-get install -y redis-server)",
            );
        self.child = Some(child);
        self.wait_ready();
    }

    fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let ok = Command::new("redis-cli")
                .args(["-p", &self.port.to_string()])
                .args(self.auth_args())
                .arg("PING")
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).contains("PONG"))
                .unwrap_or(false);
            if ok {
                return;
            }
            assert!(Instant::now() < deadline, "redis-server on port {} did not become ready", self.port);
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn auth_args(&self) -> Vec<String> {
        match self.extra.iter().position(|a| a == "--requirepass") {
            Some(i) => vec!["-a".into(), self.extra[i + 1].clone(), "--no-auth-warning".into()],
            None => vec![],
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:PORT/`
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// A blocking redis-rs connection for assertions and setup.
    pub fn client(&self) -> redis::Connection {
        redis::Client::open(self.url()).expect("client").get_connection().expect("connect to test redis")
    }

    /// Runs `redis-cli` with the given arguments and returns its stdout.
    pub fn cli(&self, args: &[&str]) -> String {
        let out = Command::new("redis-cli")
            .args(["-p", &self.port.to_string()])
            .args(self.auth_args())
            .args(args)
            .output()
            .expect("run redis-cli");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// Kills the server (SIGKILL) and waits for it to exit.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port (empty: script cache and data gone).
    pub fn restart(&mut self) {
        self.stop();
        self.spawn();
    }

    /// The OS pid, for SIGSTOP/SIGCONT fault injection.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
