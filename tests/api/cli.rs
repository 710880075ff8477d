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

/// Two files of one domain, one of them setting `failure_mode`.
fn split_domain() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let write = |name: &str, yaml: &str| std::fs::write(dir.path().join(name), yaml).expect("write");
    write("api-users.yaml", "domain: api\nfailure_mode: closed\ndescriptors:\n  - key: user\n    rate_limit: { unit: minute, requests_per_unit: 3 }\n");
    write("api-ips.yaml", "domain: api\ndescriptors:\n  - key: ip\n    rate_limit: { unit: minute, requests_per_unit: 5, burst: 2 }\n");
    dir
}

#[test]
fn check_and_explain_accept_merge_domains_by_flag_and_environment() {
    let dir = split_domain();
    let out = tollgate().arg("check").arg(dir.path()).output().expect("run tollgate");
    assert!(!out.status.success(), "one domain in two files needs --merge-domains");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("duplicate domain") && err.contains("api-ips.yaml"), "{err}");

    let out = tollgate().arg("check").arg(dir.path()).arg("--merge-domains").output().expect("run tollgate");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("ok (1 domains, 2 rules"));
    let out = tollgate()
        .arg("check")
        .arg(dir.path())
        .env("TOLLGATE_MERGE_DOMAINS", "true")
        .output()
        .expect("run tollgate");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    let out = tollgate()
        .arg("explain")
        .arg(dir.path())
        .args(["--merge-domains", "--domain", "api", "--descriptor", "user=alice"])
        .output()
        .expect("run tollgate");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    for expected in [
        "failure_mode closed",
        "files (merged)",
        "api-ips.yaml",
        "api-users.yaml",
        "api-users:descriptors[0]",
    ] {
        assert!(text.contains(expected), "explain lacks {expected:?}:\n{text}");
    }
}

#[test]
fn check_and_explain_accept_the_default_algorithm() {
    let dir = split_domain();
    let explain = |extra: &[&str]| {
        let out = tollgate()
            .arg("explain")
            .arg(dir.path())
            .args([
                "--merge-domains",
                "--domain",
                "api",
                "--descriptor",
                "user=alice",
                "--descriptor",
                "ip=1",
            ])
            .args(extra)
            .output()
            .expect("run tollgate");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let gcra = explain(&[]);
    assert!(gcra.contains("3 per minute (gcra)") && !gcra.contains("fixed_window"), "{gcra}");
    let fixed = explain(&["--default-algorithm", "fixed_window"]);
    assert!(fixed.contains("3 per minute (fixed_window)"), "{fixed}");
    assert!(
        fixed.contains("5 per minute (gcra), burst 2"),
        "a burst without an algorithm means gcra:\n{fixed}"
    );

    let check = |env: &str| {
        let out = tollgate()
            .arg("check")
            .arg(dir.path())
            .arg("--merge-domains")
            .env("TOLLGATE_DEFAULT_ALGORITHM", env)
            .output()
            .expect("run tollgate");
        (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned())
    };
    let (ok, gcra) = check("gcra");
    let (ok_fixed, fixed) = check("sliding_window");
    assert!(ok && ok_fixed, "{gcra} {fixed}");
    let version =
        |text: &str| text.trim().rsplit(' ').next().unwrap_or_default().trim_end_matches(')').to_owned();
    assert_ne!(version(&gcra), version(&fixed), "the flag changes the config version: {gcra} {fixed}");
    let (ok, _) = check("leaky_bucket");
    assert!(!ok, "an unknown algorithm is refused");
}
