//! The Tollgate instances of a soak run: real `tollgate serve` processes on fixed ports
//! (a restarted instance comes back where its clients look for it), default flags apart
//! from addresses, store and config, each with its stderr in a file.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::redis_support::free_port;
use crate::stores::{signal, wait_for};

/// Whether an instance is meant to be serving, read by clients and probes; `pid` is 0 while
/// it is down.
#[derive(Default)]
pub struct Liveness {
    pub up: AtomicBool,
    pub pid: AtomicU32,
}

/// How long into a drain probes still expect answers (the default drain is 5 s).
const DRAIN_PROBED: Duration = Duration::from_millis(4_500);

/// One instance.
pub struct Instance {
    pub grpc: SocketAddr,
    pub admin: SocketAddr,
    pub live: Arc<Liveness>,
    child: Option<Child>,
    args: Vec<String>,
    log: PathBuf,
}

impl Instance {
    /// An instance on fresh ports; not started.
    pub fn new(index: usize, store_args: &[String], config: &Path, logs: &Path) -> Instance {
        let grpc: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().expect("addr");
        let admin: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().expect("addr");
        let mut args: Vec<String> = vec!["serve".into(), "--grpc-addr".into(), grpc.to_string()];
        args.extend(["--admin-addr".into(), admin.to_string(), "--config".into()]);
        args.push(config.display().to_string());
        // The operators reset and override through the admin port (`ops.rs`).
        args.push("--admin-allow-unauthenticated-reset".into());
        args.extend(store_args.iter().cloned());
        let log = logs.join(format!("tollgate-{index}.log"));
        Instance { grpc, admin, live: Arc::new(Liveness::default()), child: None, args, log }
    }

    /// Starts the process and waits until `/readyz` answers 200 (at most 20 s).
    pub fn start(&mut self) -> bool {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(&self.log).expect("log file");
        let child = Command::new(env!("CARGO_BIN_EXE_tollgate"))
            .args(&self.args)
            .env_remove("TOLLGATE_STORE")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn tollgate");
        let pid = child.id();
        self.child = Some(child);
        let admin = self.admin;
        let ready = wait_for(Duration::from_secs(20), || readyz(admin));
        if ready {
            self.live.pid.store(pid, Ordering::SeqCst);
            self.live.up.store(true, Ordering::SeqCst);
        }
        ready
    }

    /// SIGKILL; returns once the process is gone.
    pub fn kill(&mut self) {
        self.mark_down();
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM: the instance drains (still serving, not ready) and exits; returns once it
    /// did, or kills it after `limit`. Whether it exited by itself, with status 0.
    pub fn drain(&mut self, limit: Duration) -> bool {
        let Some(mut child) = self.child.take() else { return false };
        signal(child.id(), "TERM");
        let started = Instant::now();
        let deadline = started + limit;
        loop {
            // It serves while it drains (`--drain-seconds`, default 5 s); probes stop
            // expecting answers just before the servers stop.
            if started.elapsed() >= DRAIN_PROBED {
                self.mark_down();
            }
            if let Ok(Some(status)) = child.try_wait() {
                self.mark_down();
                return status.success();
            }
            if Instant::now() >= deadline {
                self.mark_down();
                let _ = child.kill();
                let _ = child.wait();
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Marks the instance down before it goes, so probes stop expecting answers.
    fn mark_down(&self) {
        self.live.up.store(false, Ordering::SeqCst);
        self.live.pid.store(0, Ordering::SeqCst);
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        self.kill();
    }
}

/// `GET /readyz` answered 200 within 1 s.
fn readyz(admin: SocketAddr) -> bool {
    use std::io::{Read, Write};
    let Ok(mut stream) = std::net::TcpStream::connect_timeout(&admin, Duration::from_secs(1)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(1)));
    if stream.write_all(b"GET /readyz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n").is_err() {
        return false;
    }
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).is_ok() && head.ends_with(b"200")
}
