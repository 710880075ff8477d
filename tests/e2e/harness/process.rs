//! A child process owned by the test: output to a log file, killed and reaped on drop.
//!
//! Envoy stops when the process that started it goes away only if that process owns it;
//! so every server here is a direct child of the test, never started through a shell.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running child whose stdout and stderr go to `log`.
pub struct Process {
    name: String,
    child: Option<Child>,
    log: PathBuf,
}

impl Process {
    /// Spawns `command` with its output in `<dir>/<name>.log`. Panics if it cannot start.
    pub fn spawn(name: &str, mut command: Command, dir: &Path) -> Process {
        let log = dir.join(format!("{name}.log"));
        let out = File::create(&log).expect("create log file");
        let err = out.try_clone().expect("clone log file");
        let child = command
            .stdin(Stdio::null())
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err))
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name} ({command:?}): {e}"));
        Process { name: name.to_string(), child: Some(child), log }
    }

    /// Whether the child has exited (and so will never become ready).
    pub fn exited(&mut self) -> bool {
        match self.child.as_mut() {
            Some(child) => !matches!(child.try_wait(), Ok(None)),
            None => true,
        }
    }

    /// The child's whole output so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The last lines of the child's output, for failure messages.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let start = lines.len().saturating_sub(30);
        format!("--- last lines of {} ---\n{}", self.log.display(), lines[start..].join("\n"))
    }

    /// Polls `ready` every 20 ms until it holds; panics with the log after `timeout` or
    /// when the child exits first.
    pub fn wait_until(&mut self, what: &str, timeout: Duration, mut ready: impl FnMut() -> bool) {
        let deadline = Instant::now() + timeout;
        loop {
            if ready() {
                return;
            }
            if self.exited() {
                panic!("{} exited before {what}\n{}", self.name, self.log_tail());
            }
            if Instant::now() > deadline {
                panic!("{} not {what} after {timeout:?}\n{}", self.name, self.log_tail());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Kills the child (SIGKILL) and reaps it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill();
    }
}
