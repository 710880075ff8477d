//! Command-line interface: every flag is also a `TOLLGATE_*` environment variable.
//!
//! Layout: this file holds the command line and its subcommands; `serve` the flags of
//! `tollgate serve` and the settings they make, `load` the flags every config-loading
//! subcommand shares, `values` the parsers of flag values. `usage` and `reset` take the
//! admin client's `AdminCall`.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

mod load;
mod serve;
#[cfg(test)]
mod tests;
mod values;
pub mod xds;

pub use crate::admin::client::AdminCall;
pub use load::{DefaultAlgorithm, LoadFlags};
pub use serve::Serve;
pub use values::{
    parse_duration, parse_limit_header_names, parse_metrics_path, parse_sentinel, parse_share, SentinelArg,
};

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
    pub descriptors: Vec<crate::explain::DescriptorArg>,
    #[command(flatten)]
    pub load: LoadFlags,
}
