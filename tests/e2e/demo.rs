//! `make demo` (`deploy/demo/run.sh`): the script brings up redis-server, Tollgate, an
//! upstream and Envoy on free loopback ports; a request through Envoy reaches the upstream
//! and the sixth within a minute for one API key is limited; SIGINT (Ctrl-C) stops every
//! part: the script exits 0, its processes are gone and their ports closed.

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::harness::{envoy, free_loopback, http, tollgate};

/// The running script, its output lines arriving on `lines`.
struct Demo {
    child: Child,
    lines: mpsc::Receiver<String>,
    output: Vec<String>,
}

impl Demo {
    fn start(ports: &[(&str, SocketAddr)]) -> Demo {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/demo/run.sh");
        // SIGINT as a terminal delivers it: a test run from a background job inherits it
        // ignored, and a non-interactive bash cannot trap a signal ignored on entry (the
        // demo would then not stop on the test's Ctrl-C). GNU env restores the default.
        let mut command = Command::new("env");
        command
            .args(["--default-signal=INT", "bash", script])
            .env("TOLLGATE_BIN", tollgate::binary())
            .env("ENVOY_BIN", envoy::binary())
            // A loaded CI machine must not turn a decision into a failure-policy answer
            // (as in `harness::topology`).
            .env("DEMO_FILTER_TIMEOUT", "1s")
            .env("TOLLGATE_STORE_TIMEOUT_MS", "500")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (name, addr) in ports {
            command.env(name, addr.port().to_string());
        }
        let mut child = command.spawn().expect("run deploy/demo/run.sh");
        let (tx, lines) = mpsc::channel();
        for stream in [
            Box::new(child.stdout.take().expect("stdout")) as Box<dyn std::io::Read + Send>,
            Box::new(child.stderr.take().expect("stderr")),
        ] {
            let tx = tx.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stream).lines().map_while(Result::ok) {
                    let _ = tx.send(line);
                }
            });
        }
        Demo { child, lines, output: Vec::new() }
    }

    /// Reads output until a line starts with `prefix`; that line, or a panic with the output.
    fn wait_for_line(&mut self, prefix: &str, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.output.push(line.clone());
                    if line.starts_with(prefix) {
                        return line;
                    }
                }
                Err(_) => break,
            }
        }
        let _ = self.child.kill();
        panic!("no line {prefix:?} within {timeout:?}; output:\n{}", self.output.join("\n"));
    }

    /// Waits for the script to exit, killing it after `timeout` (`pids`: its parts).
    fn wait_exit(&mut self, timeout: Duration, pids: &[String]) -> ExitStatus {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status;
            }
            if Instant::now() > deadline {
                // What it printed since, and which of its parts still run, before it goes.
                while let Ok(line) = self.lines.try_recv() {
                    self.output.push(line);
                }
                let running: Vec<&String> = pids.iter().filter(|pid| alive(pid)).collect();
                let _ = self.child.kill();
                panic!(
                    "demo still running {timeout:?} after SIGINT, parts still running: {running:?}:\n{}",
                    self.output.join("\n")
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Demo {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
            let _ = self.child.wait();
        }
    }
}

fn alive(pid: &str) -> bool {
    // A zombie (exited, not yet reaped by whoever inherited it) runs nothing.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|stat| stat.rsplit_once(')').is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z')))
}

#[test]
fn make_demo_serves_through_envoy_and_stops_everything_on_ctrl_c() {
    let ports = [
        ("DEMO_LISTEN_PORT", free_loopback()),
        ("DEMO_ENVOY_ADMIN_PORT", free_loopback()),
        ("DEMO_GRPC_PORT", free_loopback()),
        ("DEMO_ADMIN_PORT", free_loopback()),
        ("DEMO_REDIS_PORT", free_loopback()),
        ("DEMO_UPSTREAM_PORT", free_loopback()),
    ];
    let mut demo = Demo::start(&ports);
    let pids_line = demo.wait_for_line("demo: pids: ", Duration::from_secs(90));
    let pids: Vec<String> =
        pids_line.trim_start_matches("demo: pids: ").split_whitespace().map(str::to_string).collect();
    assert_eq!(pids.len(), 4, "{pids_line}");
    demo.wait_for_line("demo: ready", Duration::from_secs(10));
    assert!(
        demo.output.iter().any(|l| l.contains("curl") && l.contains("x-api-key: demo")),
        "curl lines printed"
    );

    // Through Envoy: the upstream answers; per-api-key allows 5 a minute (config/edge.yaml).
    let listener = ports[0].1;
    let statuses: Vec<u16> = (0..6)
        .map(|_| {
            let response = http::get(listener, "/", &[("x-api-key", "demo-test")]);
            if response.status == 200 {
                assert_eq!(response.body, "hello from upstream\n");
            }
            response.status
        })
        .collect();
    assert_eq!(statuses, [200, 200, 200, 200, 200, 429], "{}", demo.output.join("\n"));

    let sent = Command::new("kill").args(["-INT", &demo.child.id().to_string()]).status().expect("kill");
    assert!(sent.success());
    let status = demo.wait_exit(Duration::from_secs(30), &pids);
    // Collect what it printed while stopping.
    while let Ok(line) = demo.lines.recv_timeout(Duration::from_millis(500)) {
        demo.output.push(line);
    }
    assert!(status.success(), "exit {status}:\n{}", demo.output.join("\n"));
    assert!(demo.output.iter().any(|l| l == "demo: stopped"), "{}", demo.output.join("\n"));
    for pid in &pids {
        assert!(!alive(pid), "process {pid} still runs after the demo stopped");
    }
    for (name, addr) in ports {
        assert!(
            TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_err(),
            "{name} {addr} still open"
        );
    }
}
