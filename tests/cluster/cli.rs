//! The flags: `--redis-cluster-nodes` (not with an explicit `--redis-url`) and
//! `--redis-sentinel`, on the command line and from the environment.

use std::process::Command;

use clap::Parser;
use tollgate::app::RedisTopology;
use tollgate::cli::{Cli, Command as Sub};

fn topology(args: &[&str]) -> Result<RedisTopology, clap::Error> {
    let cli = Cli::try_parse_from(["tollgate", "serve", "--store", "redis"].iter().chain(args))?;
    match cli.command {
        Sub::Serve(serve) => Ok(serve.settings().expect("settings").redis_topology),
        other => panic!("not serve: {other:?}"),
    }
}

#[test]
fn cluster_nodes_and_sentinel_parse_into_a_topology() {
    assert_eq!(topology(&[]).expect("single"), RedisTopology::Single);
    assert_eq!(
        topology(&["--redis-cluster-nodes", "10.0.0.1:7000,10.0.0.2:7000"]).expect("cluster"),
        RedisTopology::Cluster { nodes: vec!["10.0.0.1:7000".into(), "10.0.0.2:7000".into()] }
    );
    assert_eq!(
        topology(&["--redis-sentinel", "mymaster,s1:26379,s2:26379"]).expect("sentinel"),
        RedisTopology::Sentinel {
            master: "mymaster".into(),
            sentinels: vec!["s1:26379".into(), "s2:26379".into()]
        }
    );
    // The sentinel's master credentials come from --redis-url: both together are fine.
    assert!(topology(&["--redis-sentinel", "m,s1:26379", "--redis-url", "redis://:pw@x:6379/2"]).is_ok());
    assert!(topology(&["--redis-sentinel", "mymaster"]).is_err(), "needs a sentinel");
    assert!(topology(&["--redis-sentinel", "s1:26379,s2:26379"]).is_err(), "needs a master name");
}

#[test]
fn cluster_nodes_conflict_with_an_explicit_redis_url_or_sentinel() {
    let nodes = ["--redis-cluster-nodes", "a:7000"];
    let err = topology(&[&nodes[..], &["--redis-url", "redis://x:6379/"]].concat()).expect_err("conflict");
    assert_eq!(err.kind(), clap::error::ErrorKind::ArgumentConflict);
    let err = topology(&[&nodes[..], &["--redis-sentinel", "m,s:26379"]].concat()).expect_err("conflict");
    assert_eq!(err.kind(), clap::error::ErrorKind::ArgumentConflict);
}

#[test]
fn the_environment_sets_cluster_nodes_and_the_conflict_still_holds() {
    let tollgate = || {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_tollgate"));
        cmd.env_remove("TOLLGATE_REDIS_URL").env_remove("TOLLGATE_REDIS_SENTINEL");
        cmd
    };
    let out = tollgate()
        .env("TOLLGATE_REDIS_CLUSTER_NODES", "127.0.0.1:1")
        .args(["serve", "--store", "redis", "--redis-url", "redis://127.0.0.1:1/"])
        .output()
        .expect("run tollgate");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--redis-cluster-nodes") && err.contains("--redis-url"), "{err}");
    // Cluster nodes with the memory store are a startup error, not silently ignored.
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("a.yaml"), "domain: a\ndescriptors: []\n").expect("write policy");
    let out = tollgate()
        .env("TOLLGATE_REDIS_CLUSTER_NODES", "127.0.0.1:1")
        .args(["serve", "--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0", "--config"])
        .arg(dir.path())
        .output()
        .expect("run tollgate");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("need --store redis"), "{err}");
}
