use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use super::*;
use crate::cli::{parse_from, Command, LogFormat, Parsed};

/// The environment Envoy Gateway generates (its `testdata/deployments/default.yaml`),
/// Redis and Prometheus on, tracing off.
const ENVOY_GATEWAY: &[(&str, &str)] = &[
    ("RUNTIME_ROOT", "/data"),
    ("RUNTIME_SUBDIRECTORY", "ratelimit"),
    ("RUNTIME_IGNOREDOTFILES", "true"),
    ("RUNTIME_WATCH_ROOT", "false"),
    ("LOG_LEVEL", "info"),
    ("USE_STATSD", "false"),
    ("CONFIG_TYPE", "GRPC_XDS_SOTW"),
    ("CONFIG_GRPC_XDS_SERVER_URL", "envoy-gateway:18001"),
    ("CONFIG_GRPC_XDS_NODE_ID", "envoy-ratelimit"),
    ("GRPC_SERVER_USE_TLS", "true"),
    ("GRPC_SERVER_TLS_CERT", "/certs/tls.crt"),
    ("GRPC_SERVER_TLS_KEY", "/certs/tls.key"),
    ("GRPC_SERVER_TLS_CA_CERT", "/certs/ca.crt"),
    ("CONFIG_GRPC_XDS_SERVER_USE_TLS", "true"),
    ("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "/certs/tls.crt"),
    ("CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "/certs/tls.key"),
    ("CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "/certs/ca.crt"),
    ("FORCE_START_WITHOUT_INITIAL_CONFIG", "true"),
    ("REDIS_SOCKET_TYPE", "tcp"),
    ("REDIS_URL", "redis.redis.svc:6379"),
    ("USE_PROMETHEUS", "true"),
    ("PROMETHEUS_ADDR", ":19001"),
    ("PROMETHEUS_MAPPER_YAML", "/etc/statsd-exporter/conf.yaml"),
];

fn parse(args: &[&str], env: &[(&str, &str)]) -> Result<Parsed, String> {
    let env = PeerEnv::from_pairs(env.iter().copied());
    parse_from(args.iter().map(OsString::from).collect(), || Ok(env))
}

/// The settings of `parsed`, the config source reading `env` as the process's environment.
fn settings_of(parsed: &Parsed, env: &[(&str, &str)]) -> crate::app::ServeSettings {
    let lookup = |name: &str| env.iter().find(|(k, _)| *k == name).map(|(_, v)| v.to_string());
    serve_of(parsed).settings_from(&lookup).expect("settings")
}

fn serve_of(parsed: &Parsed) -> &Serve {
    match &parsed.cli.command {
        Command::Serve(serve) => serve,
        other => panic!("not serve: {other:?}"),
    }
}

fn addr(s: &str) -> SocketAddr {
    s.parse().expect("address")
}

#[test]
fn envoy_gateways_command_and_environment_make_the_peers_listeners_and_store() {
    let parsed = parse(&["/bin/ratelimit"], ENVOY_GATEWAY).expect("peer mode");
    assert_eq!(serve_of(&parsed).config, None, "from xDS, RUNTIME_* name no --config");
    let settings = settings_of(&parsed, ENVOY_GATEWAY);
    assert_eq!(settings.grpc_addr, addr("0.0.0.0:8081"), "the Service's and Envoy's port");
    assert_eq!(settings.healthcheck_addr, Some(addr("0.0.0.0:8080")), "the probes' port");
    let metrics = settings.metrics_listener.expect("USE_PROMETHEUS");
    assert_eq!((metrics.addr, metrics.path.as_str()), (addr("0.0.0.0:19001"), "/metrics"));
    assert_eq!(settings.admin_addr, addr("0.0.0.0:6070"), "the peer's debug port");
    assert_eq!(settings.store, StoreKind::Redis);
    assert_eq!(settings.redis.url, "redis://redis.redis.svc:6379/");
    let tls = settings.tls.expect("GRPC_SERVER_USE_TLS");
    assert_eq!(tls.cert, PathBuf::from("/certs/tls.crt"));
    assert_eq!(tls.client_ca, None, "GRPC_SERVER_TLS_CA_CERT is ignored, as by the peer");
    let xds = settings.xds.expect("CONFIG_TYPE=GRPC_XDS_SOTW: the xDS source");
    assert_eq!((xds.server.as_str(), xds.node_id.as_str()), ("envoy-gateway:18001", "envoy-ratelimit"));
    assert!(xds.force_start);
    let report = parsed.peer.expect("report");
    assert_eq!(report.log_filter.as_deref(), Some("info"));
    let ignored: Vec<&str> = report.ignored.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(
        ignored,
        [
            "GRPC_SERVER_TLS_CA_CERT",
            "PROMETHEUS_MAPPER_YAML",
            "RUNTIME_IGNOREDOTFILES",
            "RUNTIME_ROOT",
            "RUNTIME_SUBDIRECTORY",
            "RUNTIME_WATCH_ROOT"
        ],
        "USE_STATSD=false asks for nothing: not reported"
    );
    let why: Vec<&str> =
        report.ignored.iter().filter(|(name, _)| name.starts_with("RUNTIME_")).map(|(_, why)| *why).collect();
    assert_eq!(why.len(), 4);
    assert!(why.iter().all(|why| why.contains("over xDS")), "no files with xDS: {why:?}");
    assert!(!report.applied.iter().any(|name| name.starts_with("RUNTIME_")), "{:?}", report.applied);
    assert!(report.xds.contains(&"CONFIG_TYPE".to_string()));
    assert!(report.xds.contains(&"CONFIG_GRPC_XDS_SERVER_URL".to_string()));
}

/// What else Envoy Gateway may set (`expectedRateLimitContainerEnv`'s conditional
/// variables, and user variables its docs and test data append), group by group.
const ENVOY_GATEWAY_OPTIONAL: &[(&str, &[(&str, &str)])] = &[
    ("redis.tls", &[("REDIS_TLS", "true")]),
    (
        "tracing",
        &[
            ("TRACING_ENABLED", "true"),
            ("TRACING_SERVICE_NAME", "envoy-ratelimit"),
            ("TRACING_SERVICE_NAMESPACE", "envoy-gateway-system"),
            ("TRACING_SERVICE_INSTANCE_ID", "envoy-ratelimit-5d8f7c9b6-x2x7q"),
            ("TRACING_SAMPLING_RATE", "0.6"),
            (
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                "http://trace-collector.envoy-gateway-system.svc.cluster.local:4318",
            ),
        ],
    ),
    (
        "user env",
        &[("REDIS_AUTH", "redis_auth_password"), ("CACHE_KEY_PREFIX", "eg:rl:"), ("env_a", "env_a_value")],
    ),
];

#[test]
fn every_variable_envoy_gateway_sets_is_accepted_but_a_redis_client_certificate() {
    let base = |without_redis: bool| -> Vec<(&str, &str)> {
        ENVOY_GATEWAY
            .iter()
            .copied()
            .filter(|(name, _)| !(without_redis && name.starts_with("REDIS_")))
            .collect()
    };
    for without_redis in [true, false] {
        let env = base(without_redis);
        let parsed = parse(&["/bin/ratelimit"], &env).expect("the default Deployment");
        let store = settings_of(&parsed, &env).store;
        assert_eq!(store, if without_redis { StoreKind::Memory } else { StoreKind::Redis });
    }
    for (group, vars) in ENVOY_GATEWAY_OPTIONAL {
        let mut env = base(false);
        env.extend(vars.iter().copied());
        let parsed = parse(&["/bin/ratelimit"], &env).unwrap_or_else(|e| panic!("{group}: {e}"));
        let settings = settings_of(&parsed, &env);
        assert_eq!(settings.tracing.is_some(), *group == "tracing", "{group}: tracing on only when enabled");
        let report = parsed.peer.expect("report");
        let mut known = vars.iter().filter(|(name, _)| fate(name).is_some());
        let reported = |name: &str| {
            let used = report.applied.iter().chain(&report.tracing);
            used.chain(report.ignored.iter().map(|(n, _)| n)).any(|n| n == name)
        };
        assert!(known.all(|(name, _)| reported(name)), "{group}: {report:?}");
    }
    // redis.tls.certificateRef: the two files become the client certificate flags, checked
    // at startup (here they do not exist: the error names the peer's variable).
    let mut env = base(false);
    env.extend([
        ("REDIS_TLS", "true"),
        ("REDIS_TLS_CLIENT_CERT", "/redis-certs/tls.crt"),
        ("REDIS_TLS_CLIENT_KEY", "/redis-certs/tls.key"),
    ]);
    let parsed = parse(&["/bin/ratelimit"], &env).expect("a Redis client certificate is honoured");
    let serve = serve_of(&parsed);
    assert_eq!(serve.redis_client_cert_file, Some(PathBuf::from("/redis-certs/tls.crt")));
    assert_eq!(serve.redis_client_key_file, Some(PathBuf::from("/redis-certs/tls.key")));
    let lookup = |name: &str| env.iter().find(|(k, _)| *k == name).map(|(_, v)| v.to_string());
    let missing = serve.settings_from(&lookup).expect_err("the files are missing");
    assert!(
        missing.contains("REDIS_TLS_CLIENT_CERT") && missing.contains("/redis-certs/tls.crt"),
        "{missing}"
    );
}

#[test]
fn outside_peer_mode_nothing_of_the_peer_is_read() {
    let parsed = parse(&["tollgate", "serve"], ENVOY_GATEWAY).expect("plain serve");
    assert!(parsed.peer.is_none());
    let settings = settings_of(&parsed, ENVOY_GATEWAY);
    assert_eq!(settings.grpc_addr, addr("127.0.0.1:8081"), "loopback stays the default");
    assert_eq!(settings.admin_addr, addr("127.0.0.1:9102"));
    assert_eq!((settings.healthcheck_addr, settings.metrics_listener), (None, None));
    assert_eq!(settings.store, StoreKind::Memory);
    assert!(settings.xds.is_some(), "CONFIG_TYPE and CONFIG_GRPC_XDS_* are read whenever Tollgate runs");
}

#[test]
fn the_switch_turns_peer_mode_on_and_tollgates_own_settings_win() {
    let env = [("GRPC_PORT", "9000"), ("REDIS_URL", "r:6379"), ("SHADOW_MODE", "true"), ("PORT", "9001")];
    let parsed = parse(
        &["tollgate", "serve", "--peer-env", "--grpc-addr", "127.0.0.1:7000", "--store", "memory"],
        &env,
    )
    .expect("switch");
    let settings = settings_of(&parsed, &env);
    assert_eq!(settings.grpc_addr, addr("127.0.0.1:7000"), "the flag wins");
    assert_eq!(settings.store, StoreKind::Memory, "the flag wins");
    assert!(settings.shadow_mode);
    assert_eq!(settings.healthcheck_addr, Some(addr("0.0.0.0:9001")));
    assert_eq!(settings.metrics_listener, None, "no USE_PROMETHEUS");
}

#[test]
fn an_empty_environment_keeps_tollgates_defaults_but_the_peers_listeners() {
    let parsed = parse(&["ratelimit"], &[]).expect("peer mode");
    let settings = settings_of(&parsed, &[]);
    assert_eq!(settings.store, StoreKind::Memory, "no REDIS_URL: the memory store");
    assert_eq!(settings.config, PathBuf::from("config"), "no RUNTIME_*: Tollgate's default");
    assert!(settings.xds.is_none());
    assert_eq!(settings.grpc_addr, addr("0.0.0.0:8081"));
    assert_eq!(settings.healthcheck_addr, Some(addr("0.0.0.0:8080")));
    assert_eq!(settings.max_connection_age, Some(Duration::from_secs(3600)));
}

#[test]
fn generic_variables_map_onto_tollgate_settings() {
    let env = [
        ("CONFIG_TYPE", "FILE"),
        ("RUNTIME_ROOT", "/srv/runtime_data/current"),
        ("RUNTIME_SUBDIRECTORY", "ratelimit"),
        ("REDIS_URL", "redis:6379"),
        ("REDIS_AUTH", "app:p@ss:word"),
        ("REDIS_TLS", "true"),
        ("REDIS_TLS_CACERT", "/etc/ca.pem"),
        ("CACHE_KEY_PREFIX", "eg:rl:"),
        ("NEAR_LIMIT_RATIO", "0.9"),
        ("LIMIT_RESPONSE_HEADERS_ENABLED", "true"),
        ("LIMIT_RESET_HEADER", "X-Reset"),
        ("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "true"),
        ("MERGE_DOMAIN_CONFIG", "true"),
        ("RESPONSE_DYNAMIC_METADATA", "true"),
        ("GRPC_MAX_CONNECTION_AGE", "24h"),
        ("LOG_FORMAT", "json"),
        ("LOG_LEVEL", "WARNING"),
        ("USE_PROMETHEUS", "true"),
        ("PROMETHEUS_PATH", "/stats/prometheus"),
    ];
    let parsed = parse(&["ratelimit"], &env).expect("peer mode");
    assert_eq!(parsed.cli.log_format, LogFormat::Json);
    let settings = settings_of(&parsed, &env);
    assert_eq!(settings.config, PathBuf::from("/srv/runtime_data/current/ratelimit/config"));
    assert_eq!(settings.redis.url, "rediss://app:p%40ss%3Aword@redis:6379/");
    assert_eq!(settings.redis.tls.ca_file, Some(PathBuf::from("/etc/ca.pem")));
    assert_eq!(settings.redis_key_prefix, "eg:rl:");
    assert_eq!(settings.near_limit_ratio, 0.9);
    let names = settings.limit_headers.expect("limit headers");
    assert_eq!((names.limit.as_str(), names.reset.as_str()), ("RateLimit-Limit", "X-Reset"));
    assert!(settings.config_options.stop_charging_when_over_limit && settings.config_options.merge_domains);
    assert!(settings.response_dynamic_metadata);
    assert_eq!(settings.max_connection_age, Some(Duration::from_secs(86_400)));
    let metrics = settings.metrics_listener.expect("prometheus");
    assert_eq!((metrics.addr, metrics.path.as_str()), (addr("0.0.0.0:9090"), "/stats/prometheus"));
    let report = parsed.peer.expect("report");
    assert_eq!(report.log_filter.as_deref(), Some("warn"));
    assert_eq!(report.xds, ["CONFIG_TYPE"], "read by the config source, peer mode or not");
}

#[test]
fn with_xds_the_runtime_directory_is_not_used_and_an_explicit_config_is_refused() {
    let env = [("RUNTIME_ROOT", "/data"), ("RUNTIME_APPDIRECTORY", "rules")];
    let parsed = parse(&["ratelimit", "--config-source", "xds"], &env).expect("the flag chooses xDS");
    assert_eq!(serve_of(&parsed).config, None);
    let report = parsed.peer.as_ref().expect("report");
    let ignored: Vec<&str> = report.ignored.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(ignored, ["RUNTIME_APPDIRECTORY", "RUNTIME_ROOT"]);
    assert!(settings_of(&parsed, &env).xds.is_some());

    let xds = [("CONFIG_TYPE", "GRPC_XDS_SOTW"), ("RUNTIME_ROOT", "/data")];
    let parsed = parse(&["ratelimit", "--config", "/etc/policies"], &xds).expect("peer mode");
    let lookup = |name: &str| xds.iter().find(|(k, _)| *k == name).map(|(_, v)| v.to_string());
    let refused = serve_of(&parsed).settings_from(&lookup).expect_err("--config with xDS");
    assert!(refused.contains("--config"), "{refused}");
}

#[test]
fn cluster_sentinel_and_unix_sockets() {
    let cluster =
        parse(&["ratelimit"], &[("REDIS_TYPE", "CLUSTER"), ("REDIS_URL", "a:1,b:2"), ("REDIS_AUTH", "pw")])
            .expect("cluster");
    assert_eq!(
        settings_of(&cluster, &[]).redis_topology,
        crate::app::RedisTopology::Cluster {
            nodes: vec!["redis://:pw@a:1".into(), "redis://:pw@b:2".into()]
        }
    );
    let sentinel =
        parse(&["ratelimit"], &[("REDIS_TYPE", "sentinel"), ("REDIS_URL", "mymaster,s1:26379,s2:26379")])
            .expect("sentinel");
    assert_eq!(
        settings_of(&sentinel, &[]).redis_topology,
        crate::app::RedisTopology::Sentinel {
            master: "mymaster".into(),
            sentinels: vec!["s1:26379".into(), "s2:26379".into()]
        }
    );
    let unix =
        parse(&["ratelimit"], &[("REDIS_URL", "/var/run/nutcracker/ratelimit.sock"), ("REDIS_AUTH", "pw")])
            .expect("unix");
    assert_eq!(settings_of(&unix, &[]).redis.url, "redis+unix:///var/run/nutcracker/ratelimit.sock?pass=pw");
}

#[test]
fn what_tollgate_cannot_honour_is_refused_with_the_variable_named() {
    let refused = [
        ("BACKEND_TYPE", "memcache"),
        ("GRPC_UDS", "/run/rls.sock"),
        ("CONFIG_TYPE", "CONSUL"),
        ("LOG_LEVEL", "loud"),
        ("GRPC_PORT", "http"),
        ("SHADOW_MODE", "yes"),
    ];
    for (name, value) in refused {
        let error = parse(&["ratelimit"], &[(name, value)]).expect_err(name);
        assert!(error.contains(name.split('_').next().unwrap_or(name)), "{name}: {error}");
    }
    let san = [
        ("GRPC_SERVER_USE_TLS", "true"),
        ("GRPC_SERVER_TLS_CERT", "c"),
        ("GRPC_SERVER_TLS_KEY", "k"),
        ("GRPC_CLIENT_TLS_CACERT", "ca"),
        ("GRPC_CLIENT_TLS_SAN", "envoy"),
    ];
    assert!(parse(&["ratelimit"], &san).expect_err("SAN").contains("GRPC_CLIENT_TLS_SAN"));
    let mtls = parse(&["ratelimit"], &san[..4]).expect("the peer's client CA");
    assert_eq!(settings_of(&mtls, &[]).tls.and_then(|t| t.client_ca), Some(PathBuf::from("ca")));
}

#[test]
fn the_peers_command_line_is_serve() {
    assert!(is_peer_command(Some(&OsString::from("/bin/ratelimit"))));
    assert!(!is_peer_command(Some(&OsString::from("/usr/local/bin/tollgate"))));
    assert_eq!(as_serve(vec!["ratelimit".into()]), vec![OsString::from("ratelimit"), "serve".into()]);
    assert_eq!(as_serve(vec!["ratelimit".into(), "check".into()]).len(), 2, "a subcommand stays");
}

#[test]
fn every_variable_is_listed_once() {
    let mut names: Vec<&str> = VARIABLES.iter().map(|(name, _)| *name).collect();
    names.sort_unstable();
    let count = names.len();
    names.dedup();
    assert_eq!(names.len(), count);
    assert_eq!(fate("TRACING_ENABLED"), Some(Fate::Tracing));
    assert_eq!(fate("OTEL_EXPORTER_OTLP_ENDPOINT"), Some(Fate::Tracing));
    assert_eq!(fate("PATH"), None);
}
