//! Log setup: text or JSON lines on stderr, filtered by `--log-level` or `RUST_LOG`.

use std::io::IsTerminal as _;

use anyhow::Context as _;
use tracing_subscriber::EnvFilter;

use crate::LogFormat;

/// Installs the global subscriber.
pub fn init(format: LogFormat, level: &str) -> anyhow::Result<()> {
    let filter = match std::env::var("RUST_LOG") {
        Ok(env) if !env.is_empty() => EnvFilter::try_new(&env).context("invalid RUST_LOG")?,
        _ => EnvFilter::try_new(level).with_context(|| format!("invalid --log-level {level:?}"))?,
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().flatten_event(true).init(),
    }
    Ok(())
}
