//! Command-line interface: every flag is also a `TOLLGATE_*` environment variable.
//!
//! Layout: this file holds the command line and its subcommands; `serve` the flags of
//! `tollgate serve` and the settings they make, `load` the flags every config-loading
//! subcommand shares, `values` the parsers of flag values, `peer` envoyproxy/ratelimit's
//! environment (peer mode). `usage` and `reset` take the admin client's `AdminCall`.
//!
//! Layers inside, top to bottom (`tests/layers.rs`): `peer`; this file; `serve`; `tracing`;
//! `redis_tls`, `load`, `values`, `xds`.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::parser::ValueSource;
use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};

mod load;
pub mod peer;
mod redis_tls;
mod serve;
#[cfg(test)]
mod tests;
pub mod tracing;
mod values;
pub mod xds;

pub use crate::operate::admin::client::AdminCall;
pub use load::{DefaultAlgorithm, LoadFlags};
pub use serve::Serve;
pub use values::{
    parse_duration, parse_limit_header_names, parse_metrics_path, parse_sentinel, parse_share, SentinelArg,
};

/// The command line, and what peer mode did (`None` outside it).
#[derive(Debug)]
pub struct Parsed {
    pub cli: Cli,
    pub peer: Option<peer::PeerReport>,
}

/// Parses `args` (argv[0] first), exiting on a usage error as clap does. Started as
/// `ratelimit` (envoyproxy/ratelimit's command: `serve` is implied) or with
/// `serve --peer-env`, applies the peer's environment `env` (`peer`); an invalid peer
/// variable is an error.
pub fn parse_from(
    args: Vec<OsString>,
    env: impl FnOnce() -> Result<peer::PeerEnv, String>,
) -> Result<Parsed, String> {
    let as_peer = peer::is_peer_command(args.first());
    let args = if as_peer { peer::as_serve(args) } else { args };
    let matches = Cli::command().get_matches_from(args);
    let mut cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let Command::Serve(serve) = &mut cli.command else { return Ok(Parsed { cli, peer: None }) };
    if !(as_peer || serve.peer_env) {
        return Ok(Parsed { cli, peer: None });
    }
    let serve_matches = matches.subcommand_matches("serve").unwrap_or(&matches);
    let report = peer::apply(serve, serve_matches, &env()?)?;
    let log_format_given = [&matches, serve_matches].iter().any(|m| {
        matches!(m.value_source("log_format"), Some(ValueSource::CommandLine | ValueSource::EnvVariable))
    });
    if let (false, Some(json)) = (log_format_given, report.log_json) {
        cli.log_format = if json { LogFormat::Json } else { LogFormat::Text };
    }
    Ok(Parsed { cli, peer: Some(report) })
}

/// [`parse_from`] with this process's arguments and environment.
pub fn parse() -> Result<Parsed, String> {
    parse_from(std::env::args_os().collect(), peer::PeerEnv::from_process)
}

#[derive(Debug, Parser)]
#[command(name = "tollgate", version, about = "Rate-limit service for Envoy")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// Log format.
    #[arg(long, global = true, env = "TOLLGATE_LOG_FORMAT", value_enum, default_value = "text")]
    pub log_format: LogFormat,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the Envoy rate-limit API.
    Serve(Box<Serve>),
    /// Validate a config file or directory; exit non-zero with every error. With
    /// `--against OLD`, also list the buckets that replacing OLD with it starts afresh.
    Check {
        /// A policy file or a directory of *.yaml / *.yml files.
        path: PathBuf,
        /// The config PATH would replace (e.g. the one serving now): list every rule whose
        /// bucket keys change, as a reload would warn. Loaded with the same flags.
        #[arg(long, value_name = "OLD")]
        against: Option<PathBuf>,
        #[command(flatten)]
        load: LoadFlags,
    },
    /// Show which rule each descriptor matches and why (the path walked, the limit, the key).
    Explain(Explain),
    /// Ask a running server how much of a descriptor's quota is left (GET /v1/usage).
    Usage(AdminCall),
    /// Reset a descriptor's buckets to full on a running server (POST /v1/reset).
    Reset(AdminCall),
}

/// `tollgate explain PATH --domain D --descriptor k=v[,k=v…]...`, or `--from ADMIN`
/// instead of `PATH`: against what a running server serves (files or xDS).
#[derive(Debug, Args)]
pub struct Explain {
    /// A policy file or a directory of *.yaml / *.yml files.
    #[arg(required_unless_present = "from", conflicts_with = "from")]
    pub path: Option<PathBuf>,
    /// Explain against the config a running server serves, from its admin address
    /// (`host:port`): its source (files, or the xDS server and acknowledged version) first.
    #[arg(long, value_name = "ADMIN")]
    pub from: Option<String>,
    /// The request's domain.
    #[arg(long)]
    pub domain: String,
    /// One descriptor as `key=value,key=value` (entries in order; `\,` for a comma in a
    /// value). Repeat for the descriptors of one request.
    #[arg(long = "descriptor", required = true)]
    pub descriptors: Vec<crate::operate::explain::DescriptorArg>,
    #[command(flatten)]
    pub load: LoadFlags,
}
