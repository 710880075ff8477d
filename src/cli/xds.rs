//! The config source flags (`--config-source xds` and the `--xds-*` flags, each also a
//! `TOLLGATE_*` variable) and envoyproxy/ratelimit's variables for the same things, which
//! are honoured whenever Tollgate runs: `CONFIG_TYPE`, `CONFIG_GRPC_XDS_*`,
//! `XDS_CLIENT_BACKOFF_*`, `XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES`,
//! `FORCE_START_WITHOUT_INITIAL_CONFIG`, `HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED`.
//! A flag or `TOLLGATE_*` variable wins over the peer's variable; an empty peer variable
//! counts as unset. Values are read as the peer reads them (Go booleans and durations).

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};

use crate::sources::xds::{parse_headers, parse_node_metadata, BackoffSettings, XdsSettings, XdsTls};

/// `--config-source`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ConfigSource {
    /// Policy files (`--config`), the default.
    Files,
    /// An xDS management server (the peer's CONFIG_TYPE=GRPC_XDS_SOTW).
    Xds,
}

#[derive(Debug, Clone, Args)]
pub struct XdsFlags {
    /// Where policies come from [default: files; CONFIG_TYPE=FILE|GRPC_XDS_SOTW when unset].
    #[arg(long, env = "TOLLGATE_CONFIG_SOURCE", value_enum)]
    pub config_source: Option<ConfigSource>,
    /// xDS server host:port [CONFIG_GRPC_XDS_SERVER_URL; default localhost:18000].
    #[arg(long, env = "TOLLGATE_XDS_SERVER")]
    pub xds_server: Option<String>,
    /// xDS node id [CONFIG_GRPC_XDS_NODE_ID; default "default"].
    #[arg(long, env = "TOLLGATE_XDS_NODE_ID")]
    pub xds_node_id: Option<String>,
    /// xDS node metadata, k=v,k2=v2 [CONFIG_GRPC_XDS_NODE_METADATA].
    #[arg(long, env = "TOLLGATE_XDS_NODE_METADATA")]
    pub xds_node_metadata: Option<String>,
    /// TLS to the xDS server, true|false [CONFIG_GRPC_XDS_SERVER_USE_TLS; default false].
    #[arg(long, env = "TOLLGATE_XDS_TLS", value_parser = parse_go_bool)]
    pub xds_tls: Option<bool>,
    /// PEM client certificate for xDS mTLS [CONFIG_GRPC_XDS_CLIENT_TLS_CERT].
    #[arg(long, env = "TOLLGATE_XDS_CLIENT_CERT")]
    pub xds_client_cert: Option<PathBuf>,
    /// PEM client key (PKCS#1, PKCS#8 or SEC1) for xDS mTLS [CONFIG_GRPC_XDS_CLIENT_TLS_KEY].
    #[arg(long, env = "TOLLGATE_XDS_CLIENT_KEY")]
    pub xds_client_key: Option<PathBuf>,
    /// PEM CA bundle the xDS server's certificate must chain to [CONFIG_GRPC_XDS_SERVER_TLS_CACERT].
    #[arg(long, env = "TOLLGATE_XDS_CA")]
    pub xds_ca: Option<PathBuf>,
    /// Name the xDS server's certificate must carry, instead of the address's host
    /// [CONFIG_GRPC_XDS_SERVER_TLS_SAN].
    #[arg(long, env = "TOLLGATE_XDS_SAN")]
    pub xds_san: Option<String>,
    /// Extra gRPC metadata on the xDS stream, name:value,name2:value2
    /// [CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS].
    #[arg(long, env = "TOLLGATE_XDS_HEADERS", hide_env_values = true)]
    pub xds_headers: Option<String>,
    /// First wait before reconnecting after a broken xDS stream, e.g. 10s
    /// [XDS_CLIENT_BACKOFF_INITIAL_INTERVAL; default 10s].
    #[arg(long, env = "TOLLGATE_XDS_BACKOFF_INITIAL", value_parser = parse_go_duration)]
    pub xds_backoff_initial: Option<Duration>,
    /// Longest wait before reconnecting [XDS_CLIENT_BACKOFF_MAX_INTERVAL; default 60s].
    #[arg(long, env = "TOLLGATE_XDS_BACKOFF_MAX", value_parser = parse_go_duration)]
    pub xds_backoff_max: Option<Duration>,
    /// Growth of the wait per attempt [XDS_CLIENT_BACKOFF_RANDOM_FACTOR; default 0.5: constant].
    #[arg(long, env = "TOLLGATE_XDS_BACKOFF_FACTOR")]
    pub xds_backoff_factor: Option<f64>,
    /// Jitter the wait, true|false [XDS_CLIENT_BACKOFF_JITTER; default true].
    #[arg(long, env = "TOLLGATE_XDS_BACKOFF_JITTER", value_parser = parse_go_bool)]
    pub xds_backoff_jitter: Option<bool>,
    /// Wait after a failed connection to the xDS server
    /// [CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL; default 3s].
    #[arg(long, env = "TOLLGATE_XDS_CONNECT_RETRY", value_parser = parse_go_duration)]
    pub xds_connect_retry: Option<Duration>,
    /// Largest xDS response accepted, in bytes [XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES; default 4 MiB].
    #[arg(long, env = "TOLLGATE_XDS_MAX_MESSAGE_BYTES")]
    pub xds_max_message_bytes: Option<usize>,
    /// Serve before the first xDS snapshot (nothing is limited until it arrives), true|false
    /// [FORCE_START_WITHOUT_INITIAL_CONFIG; default false: wait for it].
    #[arg(long, env = "TOLLGATE_FORCE_START_WITHOUT_INITIAL_CONFIG", value_parser = parse_go_bool)]
    pub force_start_without_initial_config: Option<bool>,
    /// Without force start: how long start-up waits for the first xDS snapshot before
    /// serving anyway, e.g. 30s (0: for ever).
    #[arg(long, env = "TOLLGATE_XDS_INITIAL_WAIT", value_parser = parse_go_duration, default_value = "0s")]
    pub xds_initial_wait: Duration,
    /// /readyz only once at least one domain is configured, true|false
    /// [HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED; default false].
    #[arg(long, env = "TOLLGATE_READY_NEEDS_DOMAIN", value_parser = parse_go_bool)]
    pub ready_needs_domain: Option<bool>,
}

/// What the flags and variables choose.
#[derive(Debug, Clone)]
pub struct Chosen {
    /// `Some` when policies come from xDS.
    pub xds: Option<XdsSettings>,
    pub ready_needs_domain: bool,
}

impl XdsFlags {
    /// Where policies come from: `--config-source`, else `CONFIG_TYPE` (read through `env`;
    /// empty counts as unset), else files. An unknown `CONFIG_TYPE` is an error.
    pub fn source(&self, env: &dyn Fn(&str) -> Option<String>) -> Result<ConfigSource, String> {
        match (self.config_source, env("CONFIG_TYPE").filter(|kind| !kind.is_empty())) {
            (Some(source), _) => Ok(source),
            (None, None) => Ok(ConfigSource::Files),
            (None, Some(kind)) => match kind.as_str() {
                "FILE" => Ok(ConfigSource::Files),
                "GRPC_XDS_SOTW" => Ok(ConfigSource::Xds),
                other => Err(format!("CONFIG_TYPE: {other:?} is neither FILE nor GRPC_XDS_SOTW")),
            },
        }
    }

    /// Resolves the flags against the peer's variables, read through `env`.
    pub fn choose(&self, env: &dyn Fn(&str) -> Option<String>) -> Result<Chosen, String> {
        let env = |name: &str| env(name).filter(|value| !value.is_empty());
        let boolean = |flag: Option<bool>, name: &str, default: bool| -> Result<bool, String> {
            match (flag, env(name)) {
                (Some(value), _) => Ok(value),
                (None, Some(text)) => parse_go_bool(&text).map_err(|e| format!("{name}: {e}")),
                (None, None) => Ok(default),
            }
        };
        let duration = |flag: Option<Duration>, name: &str, default: Duration| -> Result<Duration, String> {
            match (flag, env(name)) {
                (Some(value), _) => Ok(value),
                (None, Some(text)) => parse_go_duration(&text).map_err(|e| format!("{name}: {e}")),
                (None, None) => Ok(default),
            }
        };
        let text = |flag: &Option<String>, name: &str| flag.clone().or_else(|| env(name));
        let path = |flag: &Option<PathBuf>, name: &str| flag.clone().or_else(|| env(name).map(PathBuf::from));
        let ready_needs_domain =
            boolean(self.ready_needs_domain, "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", false)?;
        if self.source(&env)? == ConfigSource::Files {
            return Ok(Chosen { xds: None, ready_needs_domain });
        }
        let server =
            text(&self.xds_server, "CONFIG_GRPC_XDS_SERVER_URL").unwrap_or_else(|| "localhost:18000".into());
        let mut xds = XdsSettings::new(server);
        if let Some(id) = text(&self.xds_node_id, "CONFIG_GRPC_XDS_NODE_ID") {
            xds.node_id = id;
        }
        xds.node_metadata = parse_node_metadata(
            &text(&self.xds_node_metadata, "CONFIG_GRPC_XDS_NODE_METADATA").unwrap_or_default(),
        );
        xds.headers = parse_headers(
            &text(&self.xds_headers, "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS").unwrap_or_default(),
        )
        .map_err(|e| format!("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS / --xds-headers: {e}"))?;
        if boolean(self.xds_tls, "CONFIG_GRPC_XDS_SERVER_USE_TLS", false)? {
            xds.tls = Some(XdsTls {
                client_cert: path(&self.xds_client_cert, "CONFIG_GRPC_XDS_CLIENT_TLS_CERT"),
                client_key: path(&self.xds_client_key, "CONFIG_GRPC_XDS_CLIENT_TLS_KEY"),
                ca: path(&self.xds_ca, "CONFIG_GRPC_XDS_SERVER_TLS_CACERT"),
                san: text(&self.xds_san, "CONFIG_GRPC_XDS_SERVER_TLS_SAN"),
            });
        }
        let defaults = BackoffSettings::default();
        xds.backoff = BackoffSettings {
            initial: duration(
                self.xds_backoff_initial,
                "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL",
                defaults.initial,
            )?,
            max: duration(self.xds_backoff_max, "XDS_CLIENT_BACKOFF_MAX_INTERVAL", defaults.max)?,
            factor: match (self.xds_backoff_factor, env("XDS_CLIENT_BACKOFF_RANDOM_FACTOR")) {
                (Some(factor), _) => factor,
                (None, Some(text)) => text
                    .parse()
                    .map_err(|_| format!("XDS_CLIENT_BACKOFF_RANDOM_FACTOR: {text:?} is not a number"))?,
                (None, None) => defaults.factor,
            },
            jitter: boolean(self.xds_backoff_jitter, "XDS_CLIENT_BACKOFF_JITTER", defaults.jitter)?,
        };
        xds.connect_retry = duration(
            self.xds_connect_retry,
            "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL",
            xds.connect_retry,
        )?;
        match (self.xds_max_message_bytes, env("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES")) {
            (Some(bytes), _) => xds.max_message_bytes = bytes,
            (None, Some(text)) => match text.parse::<usize>() {
                Ok(0) => {}
                Ok(bytes) => xds.max_message_bytes = bytes,
                Err(_) => return Err(format!("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES: {text:?} is not a number")),
            },
            (None, None) => {}
        }
        xds.force_start =
            boolean(self.force_start_without_initial_config, "FORCE_START_WITHOUT_INITIAL_CONFIG", false)?;
        xds.initial_wait = (!self.xds_initial_wait.is_zero()).then_some(self.xds_initial_wait);
        Ok(Chosen { xds: Some(xds), ready_needs_domain })
    }
}

/// Go's `strconv.ParseBool`: 1 t T TRUE true True, 0 f F FALSE false False.
pub fn parse_go_bool(text: &str) -> Result<bool, String> {
    match text {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Ok(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Ok(false),
        _ => Err(format!("{text:?} is not a boolean (true or false)")),
    }
}

/// Go's `time.ParseDuration` for non-negative values: `10s`, `1m30s`, `1.5s`, `500ms`, `0`.
pub fn parse_go_duration(text: &str) -> Result<Duration, String> {
    let invalid = || format!("invalid duration {text:?} (e.g. 10s, 1m30s, 500ms)");
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    let mut rest = text;
    let mut total = 0f64;
    if rest.is_empty() {
        return Err(invalid());
    }
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).ok_or_else(invalid)?;
        let number: f64 = rest[..digits].parse().map_err(|_| invalid())?;
        rest = &rest[digits..];
        let unit_len = rest.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(rest.len());
        let seconds = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return Err(invalid()),
        };
        total += number * seconds;
        rest = &rest[unit_len..];
    }
    Duration::try_from_secs_f64(total).map_err(|_| invalid())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Flags {
        #[command(flatten)]
        xds: XdsFlags,
    }

    fn choose(args: &[&str], vars: &[(&str, &str)]) -> Result<Chosen, String> {
        let flags = Flags::try_parse_from(std::iter::once("t").chain(args.iter().copied()))
            .map_err(|e| e.to_string())?;
        let vars: Vec<(String, String)> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        flags.xds.choose(&|name| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone()))
    }

    #[test]
    fn envoy_gateway_environment_selects_xds_with_mtls() {
        let chosen = choose(
            &[],
            &[
                ("CONFIG_TYPE", "GRPC_XDS_SOTW"),
                ("CONFIG_GRPC_XDS_SERVER_URL", "envoy-gateway:18001"),
                ("CONFIG_GRPC_XDS_NODE_ID", "envoy-ratelimit"),
                ("CONFIG_GRPC_XDS_SERVER_USE_TLS", "true"),
                ("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "/certs/tls.crt"),
                ("CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "/certs/tls.key"),
                ("CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "/certs/ca.crt"),
                ("FORCE_START_WITHOUT_INITIAL_CONFIG", "true"),
            ],
        )
        .expect("valid");
        let xds = chosen.xds.expect("xds");
        assert_eq!(xds.server, "envoy-gateway:18001");
        assert_eq!(xds.node_id, "envoy-ratelimit");
        assert!(xds.force_start);
        let tls = xds.tls.expect("tls");
        assert_eq!(tls.ca, Some(PathBuf::from("/certs/ca.crt")));
        assert_eq!(tls.client_key, Some(PathBuf::from("/certs/tls.key")));
        assert_eq!(xds.backoff.initial, Duration::from_secs(10));
        assert_eq!(xds.connect_retry, Duration::from_secs(3));
    }

    #[test]
    fn flags_win_and_files_stay_the_default() {
        assert!(choose(&[], &[]).expect("valid").xds.is_none());
        let chosen =
            choose(&["--config-source", "files"], &[("CONFIG_TYPE", "GRPC_XDS_SOTW")]).expect("valid");
        assert!(chosen.xds.is_none());
        let chosen = choose(
            &["--config-source", "xds", "--xds-node-id", "mine"],
            &[("CONFIG_GRPC_XDS_NODE_ID", "theirs")],
        )
        .expect("valid");
        let xds = chosen.xds.expect("xds");
        assert_eq!((xds.node_id.as_str(), xds.server.as_str()), ("mine", "localhost:18000"));
        assert!(choose(&[], &[("CONFIG_TYPE", "GRPC_XDS_DELTA")]).is_err());
        assert!(choose(&[], &[("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", "yes")]).is_err());
    }

    #[test]
    fn the_source_is_the_flag_else_config_type_else_files() {
        let flags = |args: &[&str]| {
            Flags::try_parse_from(std::iter::once("t").chain(args.iter().copied())).expect("flags").xds
        };
        let config_type =
            |kind: &'static str| move |name: &str| (name == "CONFIG_TYPE").then(|| kind.to_string());
        assert_eq!(flags(&[]).source(&config_type("GRPC_XDS_SOTW")), Ok(ConfigSource::Xds));
        assert_eq!(flags(&[]).source(&config_type("")), Ok(ConfigSource::Files), "empty counts as unset");
        assert_eq!(
            flags(&["--config-source", "files"]).source(&config_type("GRPC_XDS_SOTW")),
            Ok(ConfigSource::Files)
        );
        assert!(flags(&[]).source(&config_type("CONSUL")).is_err());
    }

    #[test]
    fn go_durations() {
        assert_eq!(parse_go_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_go_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_go_duration("0"), Ok(Duration::ZERO));
        assert!(parse_go_duration("10").is_err());
        assert!(parse_go_duration("").is_err());
    }
}
