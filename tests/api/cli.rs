//! The binary: `check` and a bad config at startup.

use std::process::Command;

fn tollgate() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tollgate"))
}

#[test]
fn check_accepts_the_shipped_examples() {
    let out = tollgate().args(["check", "config"]).output().expect("run tollgate");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("ok"));
}

#[test]
fn check_and_serve_reject_a_bad_config_naming_file_and_field() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("bad.yaml");
    std::fs::write(&file, "domain: web\ndescriptors:\n  - key: user\n    rate_limit:\n      unit: fortnight\n      requests_per_unit: 5\n")
        .expect("write");
    let out = tollgate().arg("check").arg(dir.path()).output().expect("run tollgate");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bad.yaml") && err.contains("unit") && err.contains("fortnight"), "{err}");

    let out = tollgate()
        .args(["serve", "--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0", "--config"])
        .arg(dir.path())
        .output()
        .expect("run tollgate");
    assert!(!out.status.success(), "serve must exit non-zero on a bad config");
    assert!(String::from_utf8_lossy(&out.stderr).contains("bad.yaml"));
}
