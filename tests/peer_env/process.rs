//! The `tollgate` binary run as `ratelimit`, in a process of its own.

use std::io::Read;
use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::http;
use crate::PATIENCE;

/// The sorted file names in `dir`.
pub fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("read dir")
        .map(|entry| entry.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// The process, killed on drop if still running. Its working directory is an empty
/// directory without write permission (root, which CI may be, ignores that: the test
/// checks it stays empty); stderr is drained into memory, so no file is open for it.
pub struct Peer {
    pub child: Child,
    stderr: Arc<Mutex<String>>,
    pub cwd: tempfile::TempDir,
    _bin: tempfile::TempDir,
}

impl Peer {
    /// Starts `<tmp>/ratelimit` (a link to the tollgate binary) with no arguments and
    /// exactly `env`.
    pub fn start(env: &[(String, String)]) -> Peer {
        let bin = tempfile::tempdir().expect("bin dir");
        let link = bin.path().join("ratelimit");
        std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_tollgate"), &link).expect("ratelimit link");
        let cwd = tempfile::tempdir().expect("working dir");
        std::fs::set_permissions(cwd.path(), std::fs::Permissions::from_mode(0o555)).expect("chmod");
        let mut child = Command::new(&link)
            .env_clear()
            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .current_dir(cwd.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn ratelimit");
        let stderr = Arc::new(Mutex::new(String::new()));
        let (mut pipe, sink) = (child.stderr.take().expect("stderr"), stderr.clone());
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = pipe.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock().unwrap().push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        Peer { child, stderr, cwd, _bin: bin }
    }

    pub fn log(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Waits until `/healthcheck` at `at` answers 200 `OK`; fails at once if the process exits.
    pub async fn until_healthy(&mut self, at: SocketAddr) {
        let deadline = tokio::time::Instant::now() + PATIENCE;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("exited ({status}) before /healthcheck answered:\n{}", self.log());
            }
            if http(at, "GET", "/healthcheck").await.is_ok_and(|r| r.status == 200 && r.body == "OK") {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "/healthcheck never answered 200:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The files on disk the process holds open (its `/proc/<pid>/fd` links that name a
    /// path outside `/dev`): sockets, pipes, epoll and eventfd are not files.
    pub fn open_files(&self) -> Vec<PathBuf> {
        let fds = std::fs::read_dir(format!("/proc/{}/fd", self.child.id())).expect("/proc/<pid>/fd");
        fds.filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
            .filter(|target| target.is_absolute() && !target.starts_with("/dev"))
            .collect()
    }

    pub fn terminate(&self) {
        let term = Command::new("kill").arg("-TERM").arg(self.child.id().to_string()).status();
        assert!(term.is_ok_and(|s| s.success()), "kill -TERM");
    }

    /// Waits for the process to exit and returns whether it exited with success.
    pub async fn exited_cleanly(&mut self) -> bool {
        let deadline = tokio::time::Instant::now() + PATIENCE;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status.success();
            }
            assert!(tokio::time::Instant::now() < deadline, "did not exit:\n{}", self.log());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::set_permissions(self.cwd.path(), std::fs::Permissions::from_mode(0o755));
    }
}
