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
fn check_refuses_reservations_it_could_not_keep_exact_naming_file_line_and_field() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("tokens.yaml");
    let policy = "domain: tokens\nconsistency: approximate\nreservations:\n  key: request\n  ttl: 10m\n\
                  descriptors:\n  - key: user\n    rate_limit:\n      unlimited: true\n";
    std::fs::write(&file, policy).expect("write");
    let out = tollgate().arg("check").arg(dir.path()).output().expect("run tollgate");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("tokens.yaml:3") && err.contains("reservations") && err.contains("approximate"),
        "{err}"
    );
    assert!(err.contains("tokens.yaml:9") && err.contains("descriptors[0].rate_limit.unlimited"), "{err}");
    let fixed = policy
        .replace("consistency: approximate\n", "")
        .replace("unlimited: true", "unit: day\n      requests_per_unit: 1000");
    std::fs::write(&file, fixed).expect("write");
    let out = tollgate().arg("check").arg(dir.path()).output().expect("run tollgate");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
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

/// Each misuse of issue 14's fields, in a file of its own: `(file, YAML, expected
/// `file:line: path: message` fragment)`.
const MISUSES: &[(&str, &str, &str)] = &[
    (
        "both.yaml",
        "domain: both\ndescriptors:\n  - key: k\n    rate_limit: { unit: second, requests_per_unit: 1 }\n    rate_limits:\n      - { name: a, unit: second, requests_per_unit: 1 }\n",
        "both.yaml:5: descriptors[0].rate_limits: rate_limit and rate_limits on one descriptor",
    ),
    (
        "missing_name.yaml",
        "domain: missing_name\ndescriptors:\n  - key: k\n    rate_limits:\n      - unit: second\n        requests_per_unit: 1\n",
        "missing_name.yaml:5: descriptors[0].rate_limits[0].name: missing name",
    ),
    (
        "repeated_name.yaml",
        "domain: repeated_name\ndescriptors:\n  - key: k\n    rate_limits:\n      - name: a\n        unit: second\n        requests_per_unit: 1\n      - name: a\n        unit: day\n        requests_per_unit: 9\n",
        "repeated_name.yaml:8: descriptors[0].rate_limits[1].name: duplicate name \"a\"",
    ),
    (
        "zero_multiplier.yaml",
        "domain: zero_multiplier\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: minute\n      unit_multiplier: 0\n      requests_per_unit: 1\n",
        "zero_multiplier.yaml:6: descriptors[0].rate_limit.unit_multiplier: unit_multiplier must be at least 1",
    ),
    (
        "unknown_charge.yaml",
        "domain: unknown_charge\ncharge: some\ndescriptors:\n  - key: k\n    rate_limit: { unit: second, requests_per_unit: 1 }\n",
        "unknown_charge.yaml:2: charge: unknown charge \"some\" (expected per_descriptor or all_or_nothing)",
    ),
];

#[test]
fn check_rejects_each_misuse_of_several_limits_windows_and_charge_with_file_line_and_field() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (name, yaml, _) in MISUSES {
        std::fs::write(dir.path().join(name), yaml).expect("write");
    }
    let out = tollgate().arg("check").arg(dir.path()).output().expect("run tollgate");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    for (_, _, expected) in MISUSES {
        assert!(err.contains(expected), "check lacks {expected:?}:\n{err}");
    }
}

#[test]
fn check_and_explain_accept_stop_charging_when_over_limit_and_the_domain_field_wins() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rule = "descriptors:\n  - key: k\n    rate_limits:\n      - { name: burst, unit: second, requests_per_unit: 20 }\n      - { name: five, unit: minute, unit_multiplier: 5, requests_per_unit: 7 }\n";
    std::fs::write(dir.path().join("plain.yaml"), format!("domain: plain\n{rule}")).expect("write");
    std::fs::write(dir.path().join("own.yaml"), format!("domain: own\ncharge: per_descriptor\n{rule}"))
        .expect("write");
    let explain = |domain: &str, extra: &[&str], env: Option<&str>| {
        let mut command = tollgate();
        command.arg("explain").arg(dir.path()).args(["--domain", domain, "--descriptor", "k=v"]).args(extra);
        if let Some(value) = env {
            command.env("TOLLGATE_STOP_CHARGING_WHEN_OVER_LIMIT", value);
        }
        let out = command.output().expect("run tollgate");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let plain = explain("plain", &[], None);
    assert!(plain.contains("domain plain: failure_mode open, file") && !plain.contains("charge"), "{plain}");
    assert!(plain.contains("five: requests_per_unit 7 per 5 minutes (gcra)"), "{plain}");
    let flagged = explain("plain", &["--stop-charging-when-over-limit"], None);
    assert!(flagged.contains("failure_mode open, charge all_or_nothing, file"), "{flagged}");
    assert_eq!(explain("plain", &[], Some("true")), flagged, "the environment sets it too");
    let own = explain("own", &["--stop-charging-when-over-limit"], None);
    assert!(!own.contains("all_or_nothing"), "the domain's charge wins:\n{own}");

    let check = |extra: &[&str]| {
        let out = tollgate().arg("check").arg(dir.path()).args(extra).output().expect("run tollgate");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert_ne!(check(&[]), check(&["--stop-charging-when-over-limit"]), "the flag changes the version");
}

#[test]
fn check_refuses_what_an_approximate_domain_cannot_serve_naming_file_line_and_field() {
    let dir = tempfile::tempdir().expect("tempdir");
    let edge = "domain: edge\nconsistency: approximate\ndescriptors:\n  - key: ip\n    rate_limit: { unit: minute, requests_per_unit: 1000 }\n  - key: user\n    lease: true\n    rate_limit: { unit: second, requests_per_unit: 5, algorithm: fixed_window }\n";
    std::fs::write(dir.path().join("edge.yaml"), edge).expect("write");
    let check = |extra: &[&str]| {
        let out = tollgate().arg("check").arg(dir.path()).args(extra).output().expect("run tollgate");
        (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (ok, err) = check(&[]);
    assert!(!ok, "gcra by default and a lease are refused:\n{err}");
    for expected in [
        "edge.yaml:5: descriptors[0].rate_limit.algorithm: consistency: approximate serves sliding_window \
         and fixed_window, not gcra (the default algorithm, --default-algorithm gcra); set algorithm: \
         sliding_window",
        "edge.yaml:7: descriptors[1].lease: lease: true in a domain with consistency: approximate: leases \
         are an exact-mode device",
    ] {
        assert!(err.contains(expected), "check lacks {expected:?}:\n{err}");
    }

    let no_lease = edge.replace("    lease: true\n", "");
    std::fs::write(dir.path().join("edge.yaml"), &no_lease).expect("write");
    let (ok, err) = check(&["--default-algorithm", "sliding_window"]);
    assert!(ok, "with a window default every limit is served:\n{err}");
    std::fs::write(
        dir.path().join("edge.yaml"),
        no_lease.replace("consistency: approximate", "consistency: eventual"),
    )
    .expect("write");
    let (ok, err) = check(&["--default-algorithm", "sliding_window"]);
    assert!(!ok && err.contains("edge.yaml:2: consistency: unknown consistency \"eventual\""), "{err}");
}

/// Settings no server can keep its promises with are refused at startup, naming the flag:
/// a staleness limit below the sync interval (every approximate bucket would turn to the
/// failure policy between two syncs) and a store timeout of 0.
#[test]
fn serve_refuses_a_staleness_below_the_sync_interval_and_a_zero_store_timeout() {
    let serve = |flags: &[&str]| {
        let out = tollgate()
            .args([
                "serve",
                "--grpc-addr",
                "127.0.0.1:0",
                "--admin-addr",
                "127.0.0.1:0",
                "--config",
                "config",
            ])
            .args(flags)
            .output()
            .expect("run tollgate");
        assert!(!out.status.success(), "serve {flags:?} must exit non-zero");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let err = serve(&["--sync-interval-ms", "500", "--sync-staleness-ms", "400"]);
    assert!(err.contains("--sync-staleness-ms") && err.contains("--sync-interval-ms"), "{err}");
    let err = serve(&["--store-timeout-ms", "0"]);
    assert!(err.contains("--store-timeout-ms"), "{err}");
    let settings = |f: fn(&mut tollgate::app::ServeSettings)| {
        let mut s = tollgate::app::ServeSettings::new("config".into());
        f(&mut s);
        s
    };
    // The same refusals for a server built in process (not only through the flags).
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    for bad in [
        settings(|s| s.store_timeout = std::time::Duration::ZERO),
        settings(|s| s.sync_staleness = std::time::Duration::from_millis(100)),
    ] {
        let err = runtime.block_on(tollgate::app::spawn(bad)).expect_err("refused");
        assert!(err.to_string().contains("must be at least"), "{err}");
    }
}

#[test]
fn check_against_lists_what_starts_afresh_and_refuses_a_broken_old_config() {
    let dir = tempfile::tempdir().expect("tempdir");
    let write = |name: &str, yaml: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, yaml).expect("write");
        path
    };
    let old = write("old.yaml", "domain: api\ndescriptors:\n  - key: user\n    rate_limit: { name: per-user, unit: hour, requests_per_unit: 5 }\n");
    let new = write("new.yaml", "domain: api\ndescriptors:\n  - key: user_id\n    rate_limit: { name: per-user, unit: minute, requests_per_unit: 5 }\n");
    let out = tollgate().arg("check").arg(&new).arg("--against").arg(&old).output().expect("run tollgate");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "a fresh bucket is no error: {}", String::from_utf8_lossy(&out.stderr));
    assert!(
        stdout.contains("domain api, rule per-user: descriptor path user → user_id; unit hour → minute"),
        "{stdout}"
    );
    let broken = write("broken.yaml", "domain: api\ndescriptors:\n  - key: user\n    rate_limit: { unit: fortnight, requests_per_unit: 5 }\n");
    let out = tollgate().arg("check").arg(&new).arg("--against").arg(&broken).output().expect("run tollgate");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--against") && err.contains("fortnight"), "{err}");
}

#[test]
fn serve_refuses_policy_files_together_with_the_xds_source() {
    let serve = |flags: &[&str], vars: &[(&str, &str)]| {
        let out = tollgate()
            .args(["serve", "--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0"])
            .args(flags)
            .env_remove("TOLLGATE_CONFIG")
            .env_remove("CONFIG_TYPE")
            .envs(vars.iter().copied())
            .output()
            .expect("run tollgate");
        assert!(!out.status.success(), "serve {flags:?} {vars:?} must exit non-zero");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let err = serve(&["--config", "config", "--config-source", "xds"], &[]);
    assert!(err.contains("--config") && err.contains("choose one"), "{err}");
    let err = serve(&[], &[("TOLLGATE_CONFIG", "config"), ("CONFIG_TYPE", "GRPC_XDS_SOTW")]);
    assert!(err.contains("CONFIG_TYPE=GRPC_XDS_SOTW") && err.contains("choose one"), "{err}");
    let err = serve(&[], &[("CONFIG_TYPE", "GRPC_XDS_SOTW"), ("CONFIG_GRPC_XDS_SERVER_USE_TLS", "yes")]);
    assert!(err.contains("CONFIG_GRPC_XDS_SERVER_USE_TLS"), "{err}");
    let err = serve(&[], &[("CONFIG_TYPE", "GRPC_XDS_DELTA")]);
    assert!(err.contains("CONFIG_TYPE"), "{err}");
}

/// `explain --from ADMIN`: the binary asks a running server, which explains against what it
/// serves (here: files), its source first; a server not listening is a clear error.
#[tokio::test]
async fn explain_from_a_running_server_shows_its_source_and_the_walk() {
    let policy =
        "domain: api\ndescriptors:\n  - key: user\n    rate_limit: { unit: minute, requests_per_unit: 7 }\n";
    let app = crate::support::spawn_app(tollgate::app::StoreKind::Memory, &[("api.yaml", policy)]).await;
    let admin = app.admin_addr().to_string();
    let run = |admin: String| {
        tokio::task::spawn_blocking(move || {
            tollgate()
                .args(["explain", "--from", &admin, "--domain", "api", "--descriptor", "user=alice"])
                .output()
                .expect("run tollgate explain")
        })
    };
    let out = run(admin).await.expect("explain");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.starts_with("source: files ") && stdout.contains("7 per minute"), "{stdout}");
    drop(app);
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("port").local_addr().expect("addr");
    let out = run(closed.to_string()).await.expect("explain");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains(&closed.to_string()));
}
