//! The `tollgate` binary: parse the command line, set up logs, run.

use std::process::ExitCode;

use tollgate::cli::{Cli, Command, LogFormat};

/// mimalloc instead of the system allocator: a request allocates and frees on whichever
/// worker thread runs it, which glibc malloc serves slowly (see docs/performance.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let parsed = match tollgate::cli::parse() {
        Ok(parsed) => parsed,
        Err(e) => {
            eprintln!("tollgate: {e}");
            return ExitCode::FAILURE;
        }
    };
    let cli = parsed.cli;
    init_tracing(cli.log_format, parsed.peer.as_ref().and_then(|peer| peer.log_filter.as_deref()));
    if let Some(peer) = &parsed.peer {
        peer.log();
    }
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    if let Command::Serve(serve) = &cli.command {
        if let Some(n) = serve.worker_threads {
            runtime.worker_threads(usize::from(n));
        }
    }
    match runtime.enable_all().build() {
        Ok(runtime) => runtime.block_on(run(cli)),
        Err(e) => {
            eprintln!("tollgate: cannot start the async runtime: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> ExitCode {
    match cli.command {
        Command::Check { path, against, load } => {
            match tollgate::operate::check::check(&path, against.as_deref(), &load.options()) {
                Ok(report) => {
                    print!("{report}");
                    ExitCode::SUCCESS
                }
                Err(errors) => {
                    eprintln!("{errors}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Explain(args) => {
            let explained = match (&args.from, &args.path) {
                (Some(admin), _) => {
                    tollgate::operate::admin::client::explain(admin, &args.domain, &args.descriptors).await
                }
                (None, Some(path)) => tollgate::operate::explain::explain_path(
                    path,
                    &args.load.options(),
                    &args.domain,
                    &args.descriptors,
                )
                .map_err(|errors| errors.to_string()),
                (None, None) => Err("explain needs a PATH or --from ADMIN".to_string()),
            };
            match explained {
                Ok(text) => {
                    print!("{text}");
                    ExitCode::SUCCESS
                }
                Err(error) => {
                    eprintln!("{error}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Usage(call) => {
            tollgate::operate::admin::client::run(tollgate::operate::admin::client::Verb::Usage, &call).await
        }
        Command::Reset(call) => {
            tollgate::operate::admin::client::run(tollgate::operate::admin::client::Verb::Reset, &call).await
        }
        Command::Serve(serve) => {
            let settings = match serve.settings() {
                Ok(settings) => settings,
                Err(e) => {
                    eprintln!("tollgate: {e}");
                    return ExitCode::FAILURE;
                }
            };
            match tollgate::app::run(settings, tollgate::app::shutdown_signal()).await {
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

/// `RUST_LOG`, else the peer's `LOG_LEVEL` (peer mode), else `info`.
fn init_tracing(format: LogFormat, peer_level: Option<&str>) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(peer_level.unwrap_or("info")));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder =
        tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(ansi);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}
