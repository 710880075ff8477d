//! The shipped front proxy and compose demo, checked without Docker: `envoy/envoy.yaml`
//! passes the real Envoy's `--mode validate`; every descriptor it sends has a rule in its
//! domain; each part `examples/compose/docker-compose.yml` names exists and is valid (the
//! Envoy config it mounts, the policies it mounts, the Dockerfile it builds); and the
//! names and ports the parts use to find each other agree. The compose topology itself
//! runs without Docker in `through_envoy` and `failures`.

use crate::harness::compose::{self, command, flag_value, mount_source, service};
use crate::harness::descriptors::{assert_policies_cover, policies_in, sent_by_bootstrap};
use crate::harness::yaml::{at, find, load, repo_path, seq_at, str_at};
use crate::harness::{envoy, tollgate};

const ENVOY_CONFIG: &str = "envoy/envoy.yaml";

#[test]
fn the_shipped_envoy_config_passes_envoy_validate() {
    if let Err(output) = envoy::validate(&repo_path(ENVOY_CONFIG)) {
        panic!("envoy rejects {ENVOY_CONFIG}:\n{output}");
    }
}

#[test]
fn every_descriptor_the_shipped_envoy_sends_has_a_rule_in_its_domain() {
    let sent = sent_by_bootstrap(&load(ENVOY_CONFIG));
    let domains: Vec<&str> = sent.iter().map(|(d, _)| d.as_str()).collect();
    assert!(domains.contains(&"edge") && domains.contains(&"login"), "domains: {domains:?}");
    assert_policies_cover(&sent, &policies_in(&repo_path("config")));
}

#[test]
fn the_compose_demo_mounts_a_valid_envoy_config_and_valid_policies() {
    let demo = compose::compose();
    let envoy_config = mount_source(&demo, "envoy", "/etc/envoy/envoy.yaml");
    assert_eq!(envoy_config.canonicalize().ok(), repo_path(ENVOY_CONFIG).canonicalize().ok());
    envoy::validate(&envoy_config).unwrap_or_else(|out| panic!("{}:\n{out}", envoy_config.display()));
    let policies = mount_source(&demo, "tollgate", "/etc/tollgate/config");
    tollgate::check(&policies);
    assert_eq!(flag_value(&command(&demo, "tollgate"), "--config"), "/etc/tollgate/config");
    let build = at(service(&demo, "tollgate"), "build");
    let context = repo_path(compose::COMPOSE_FILE).parent().expect("folder").join(str_at(build, "context"));
    assert!(context.join(str_at(build, "dockerfile")).is_file(), "no Dockerfile in {}", context.display());
    assert!(context.join("Cargo.toml").is_file(), "build context {} is not the crate", context.display());
}

#[test]
fn the_compose_services_are_where_the_envoy_config_looks_for_them() {
    let demo = compose::compose();
    let config = load(ENVOY_CONFIG);
    let clusters = seq_at(&config, "static_resources.clusters");
    let endpoint = |name: &str| {
        let address = at(find(clusters, "name", name), "load_assignment.endpoints.0.lb_endpoints.0.endpoint");
        let socket = at(address, "address.socket_address");
        (str_at(socket, "address").to_string(), at(socket, "port_value").as_u64().expect("port"))
    };
    let tollgate = command(&demo, "tollgate");
    let grpc_port = port_of(flag_value(&tollgate, "--grpc-addr"));
    assert_eq!(endpoint("tollgate"), ("tollgate".to_string(), grpc_port));
    assert!(flag_value(&tollgate, "--grpc-addr").starts_with("0.0.0.0:"), "gRPC must leave loopback");
    let upstream = command(&demo, "upstream");
    let listen = upstream.iter().find(|a| a.starts_with("-listen=")).expect("upstream -listen=");
    assert_eq!(endpoint("upstream"), ("upstream".to_string(), port_of(listen)));
    assert!(flag_value(&tollgate, "--redis-url").starts_with("redis://redis:"), "Redis service name");
    service(&demo, "redis");
    let listener = at(find(seq_at(&config, "static_resources.listeners"), "name", "edge"), "address");
    let listen_port = at(listener, "socket_address.port_value").as_u64().expect("port");
    let published = seq_at(service(&demo, "envoy"), "ports");
    assert!(
        published.iter().filter_map(|p| p.as_str()).any(|p| port_of(p) == listen_port),
        "envoy publishes {published:?}, listens on {listen_port}"
    );
}

/// The port at the end of `host:port`, `:port` or `-listen=:port` text.
fn port_of(text: &str) -> u64 {
    let digits: String = text.chars().rev().take_while(char::is_ascii_digit).collect();
    digits.chars().rev().collect::<String>().parse().unwrap_or_else(|_| panic!("no port in {text:?}"))
}

#[test]
fn the_dockerfile_builds_in_stages_and_runs_as_non_root() {
    let text = std::fs::read_to_string(repo_path("Dockerfile")).expect("read Dockerfile");
    let lines: Vec<&str> = text.lines().map(str::trim).filter(|l| !l.starts_with('#')).collect();
    let froms: Vec<usize> =
        lines.iter().enumerate().filter(|(_, l)| l.starts_with("FROM ")).map(|(i, _)| i).collect();
    assert!(froms.len() >= 2, "not multi-stage");
    let runtime = &lines[*froms.last().expect("FROM")..];
    let user =
        runtime.iter().rev().find_map(|l| l.strip_prefix("USER ")).expect("the runtime stage sets USER");
    assert!(!["root", "0", "0:0"].contains(&user.trim()), "runs as {user}");
    let copied =
        runtime.iter().find(|l| l.starts_with("COPY --from=")).expect("binary copied from the build stage");
    let binary = copied.split_whitespace().last().expect("COPY destination");
    let entrypoint = runtime.iter().find_map(|l| l.strip_prefix("ENTRYPOINT ")).expect("ENTRYPOINT");
    assert!(entrypoint.contains(&format!("\"{binary}\"")), "ENTRYPOINT {entrypoint} is not {binary}");
    let manifest = std::fs::read_to_string(repo_path("Cargo.toml")).expect("Cargo.toml");
    let rust_version = manifest
        .lines()
        .find_map(|l| l.strip_prefix("rust-version = "))
        .map(|v| v.trim_matches('"'))
        .expect("rust-version");
    assert!(lines[froms[0]].starts_with(&format!("FROM rust:{rust_version}")), "toolchain != {rust_version}");
    // The image ships the stripped release build; symbols live in the `profiling` profile.
    assert!(lines.iter().any(|l| l.contains("cargo build --release")), "the image builds --release");
    let release = manifest.split("[profile.release]").nth(1).expect("[profile.release]");
    let release = release.split("\n[").next().unwrap_or(release);
    assert!(release.contains("strip = \"symbols\""), "release is not stripped:{release}");
    assert!(!release.contains("debug ="), "release keeps debug info:{release}");
    assert!(manifest.contains("[profile.profiling]"), "no profiling profile");
    let ignore = std::fs::read_to_string(repo_path(".dockerignore")).expect(".dockerignore");
    assert!(ignore.lines().any(|l| l.trim().trim_start_matches('/') == "target/"), "target/ not ignored");
}
