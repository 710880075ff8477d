//! The real `tollgate` binary (the one cargo built for this test run): `serve` as a child
//! process until its admin `/readyz` answers 200, and `check` on policy directories.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use super::http;
use super::process::Process;

/// Path of the binary under test.
pub fn binary() -> &'static str {
    env!("CARGO_BIN_EXE_tollgate")
}

/// A `tollgate serve` child.
pub struct Tollgate {
    process: Process,
    /// Its admin address.
    pub admin: SocketAddr,
}

impl Tollgate {
    /// Runs `tollgate <args>` with `env` added, and waits until `admin` `/readyz` is 200.
    pub fn serve(args: &[String], env: &[(String, String)], admin: SocketAddr, dir: &Path) -> Tollgate {
        let mut command = Command::new(binary());
        // RUST_LOG=info unless the test sets it.
        command.args(args).env("RUST_LOG", "info").envs(env.iter().map(|(k, v)| (k, v)));
        let mut process = Process::spawn("tollgate", command, dir);
        process.wait_until("ready on /readyz", Duration::from_secs(15), || {
            http::try_get(admin, "/readyz", &[]).is_ok_and(|r| r.status == 200)
        });
        Tollgate { process, admin }
    }

    /// Everything the server has logged so far.
    pub fn log(&self) -> String {
        self.process.log()
    }

    /// Kills the server: from now on Envoy cannot reach it.
    pub fn kill(&mut self) {
        self.process.kill();
    }
}

/// Runs `tollgate check <path>`; panics with its output unless it succeeds.
pub fn check(path: &Path) {
    let out = Command::new(binary()).arg("check").arg(path).output().expect("run tollgate check");
    assert!(
        out.status.success(),
        "tollgate check {} failed:\n{}{}",
        path.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
