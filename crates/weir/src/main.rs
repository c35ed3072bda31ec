//! The `weir` command: `serve`, `check` and `origin`.
//!
//! This binary stays thin: it parses arguments, sets up logging and signal
//! handling, and calls the libraries.

mod commands;
mod logging;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

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
    if let Err(e) = logging::init(cli.log_format, &cli.log_level) {
        eprintln!("weir: {e:#}");
        return ExitCode::from(2);
    }
    let result = match cli.command {
        Command::Check { config } => commands::check(&config),
        Command::Serve { config } => commands::serve(config.as_deref()),
        Command::Origin {
            listen,
            root,
            workers,
        } => commands::origin(listen, root, workers),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("weir: {e:#}");
            ExitCode::FAILURE
        }
    }
}
