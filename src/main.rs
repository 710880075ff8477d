//! The `tollgate` binary: parse the command line, set up logs, run.

use std::process::ExitCode;

use clap::Parser;
use tollgate::cli::{Cli, Command, LogFormat};

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    init_tracing(cli.log_format);
    match cli.command {
        Command::Check { path } => match tollgate::config::load_path(&path) {
            Ok(snapshot) => {
                println!(
                    "{}: ok ({} domains, {} rules, version {})",
                    path.display(),
                    snapshot.domains.len(),
                    snapshot.rule_count(),
                    snapshot.version
                );
                ExitCode::SUCCESS
            }
            Err(errors) => {
                eprintln!("{errors}");
                ExitCode::FAILURE
            }
        },
        Command::Explain(args) => {
            match tollgate::explain::explain_path(&args.path, &args.domain, &args.descriptors) {
                Ok(text) => {
                    print!("{text}");
                    ExitCode::SUCCESS
                }
                Err(errors) => {
                    eprintln!("{errors}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Serve(serve) => {
            match tollgate::app::run(serve.settings(), tollgate::app::shutdown_signal()).await {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    tracing::error!("{e:#}");
                    eprintln!("tollgate: {e:#}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}

fn init_tracing(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder =
        tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(ansi);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}
