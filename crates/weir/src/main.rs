//! The `weir` command: `serve`, `check` and `origin`.
//!
//! This binary stays thin: it parses arguments, sets up logging and signal
//! handling, and calls the libraries.

mod commands;
mod logging;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use weir_proxy::config::AccessLogTarget;

/// Weir: a streaming HTTP reverse proxy and SSR edge server.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Cli {
    /// Log line format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text, global = true)]
    log_format: LogFormat,
    /// Log filter, e.g. `info` or `weir=debug,hyper=info` (the RUST_LOG variable wins if set).
    #[arg(long, default_value = "info", global = true)]
    log_level: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the proxy. Without --config, runs the embedded default config
    /// (config/weir.toml), which serves fixtures/ through the built-in origin
    /// at http://127.0.0.1:8080/.
    Serve {
        /// Config file.
        #[arg(long, short)]
        config: Option<PathBuf>,
        /// Reload when the config file's contents change, or when the
        /// `..data` link of its directory is repointed (a Kubernetes
        /// ConfigMap mounted as a directory), as SIGHUP does: a bad config
        /// is refused and the one in effect stays. Needs --config.
        #[arg(long, requires = "config")]
        watch: bool,
        /// How often --watch polls the directory, in milliseconds (100 to 3600000).
        #[arg(long, default_value_t = weir_proxy::watch::DEFAULT_INTERVAL_MS,
              value_parser = clap::value_parser!(u64).range(weir_proxy::watch::INTERVAL_RANGE_MS),
              requires = "watch")]
        watch_interval_ms: u64,
    },
    /// Validate a config file and print the resolved listeners, upstreams and routes.
    Check {
        /// Config file.
        #[arg(long, short)]
        config: PathBuf,
    },
    /// Run the built-in origin server alone (static files and test endpoints).
    Origin {
        /// Address to listen on.
        #[arg(long, default_value = "127.0.0.1:8081")]
        listen: std::net::SocketAddr,
        /// Directory of static files.
        #[arg(long, default_value = "fixtures")]
        root: PathBuf,
        /// Runtime worker threads (default: one per CPU).
        #[arg(long)]
        workers: Option<usize>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let log = logging::Options {
        format: cli.log_format,
        level: cli.log_level,
    };
    if let Err(e) = log.check() {
        eprintln!("weir: {e:#}");
        return ExitCode::from(2);
    }
    // `serve` sets up logging itself, once its config says where the
    // access log goes; the others log to stderr only.
    let stderr_log = || log.init(&AccessLogTarget::Stderr);
    let result = match cli.command {
        Command::Serve {
            config,
            watch,
            watch_interval_ms,
        } => {
            let watch = watch.then(|| std::time::Duration::from_millis(watch_interval_ms));
            commands::serve(config.as_deref(), watch, &log)
        }
        Command::Check { config } => stderr_log().and_then(|_log| commands::check(&config)),
        Command::Origin {
            listen,
            root,
            workers,
        } => stderr_log().and_then(|_log| commands::origin(listen, root, workers)),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("weir: {e:#}");
            ExitCode::FAILURE
        }
    }
}
