//! Log setup: text or JSON lines on stderr, filtered by `--log-level` or
//! `RUST_LOG`; the access log (target `weir::access`) with them, off, or
//! in a file of its own (`[server] access_log`), reopened on request
//! (SIGUSR1, for log rotation).

use std::io::IsTerminal as _;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::Context as _;
use tracing::Metadata;
use tracing_appender::non_blocking::{NonBlockingBuilder, WorkerGuard};
use tracing_subscriber::filter::{EnvFilter, FilterFn, Targets};
use tracing_subscriber::layer::{Layer, SubscriberExt as _};
use tracing_subscriber::util::SubscriberInitExt as _;
use weir_proxy::config::AccessLogTarget;

use crate::LogFormat;

/// The target of access log lines (`weir_proxy::access_log`).
const ACCESS_TARGET: &str = "weir::access";

/// Lines the access log file's writer thread may fall behind by before
/// a request that logs waits for it (none is ever dropped).
const ACCESS_FILE_BACKLOG_LINES: usize = 128_000;

/// What `--log-format` and `--log-level` asked for.
#[derive(Debug, Clone)]
pub struct Options {
    pub format: LogFormat,
    pub level: String,
}

/// Keeps the access log file's writer thread running; dropping it writes
/// out what is queued.
#[must_use = "the access log file is written only while the guard lives"]
pub struct Guard {
    _worker: Option<WorkerGuard>,
    reopen: Option<Arc<AtomicBool>>,
}

impl Guard {
    /// A handle that makes the access log file reopen, or `None` when the
    /// access log is not a file.
    pub fn reopener(&self) -> Option<Reopener> {
        self.reopen.clone().map(Reopener)
    }
}

/// Makes the access log file's writer reopen its file by its path before
/// it writes the next line: after `logrotate` renamed the file, the lines
/// go to a new file of the configured name. Lines already written stay in
/// the renamed one; none is lost.
#[derive(Debug, Clone)]
pub struct Reopener(Arc<AtomicBool>);

impl Reopener {
    /// Asks for the reopen (done by the writer thread, at its next line).
    pub fn reopen(&self) {
        self.0.store(true, Ordering::Release);
    }
}

impl Options {
    /// Checks `--log-level` (or `RUST_LOG`) before anything runs, so that a
    /// bad one is said first whatever else is wrong.
    ///
    /// Errors: the filter does not parse.
    pub fn check(&self) -> anyhow::Result<()> {
        self.filter().map(drop)
    }

    fn filter(&self) -> anyhow::Result<EnvFilter> {
        match std::env::var("RUST_LOG") {
            Ok(env) if !env.is_empty() => EnvFilter::try_new(&env).context("invalid RUST_LOG"),
            _ => EnvFilter::try_new(&self.level)
                .with_context(|| format!("invalid --log-level {:?}", self.level)),
        }
    }

    /// Installs the global subscriber, with the access log sent to
    /// `access`.
    ///
    /// Errors: a bad `--log-level` or `RUST_LOG`, or an access log file
    /// that cannot be opened for appending.
    pub fn init(&self, access: &AccessLogTarget) -> anyhow::Result<Guard> {
        let filter = self.filter()?;
        let with_access = *access == AccessLogTarget::Stderr;
        let not_access =
            FilterFn::new(move |m: &Metadata<'_>| with_access || m.target() != ACCESS_TARGET);
        let stderr = self
            .layer(std::io::stderr, std::io::stderr().is_terminal())
            .with_filter(not_access)
            .with_filter(filter);
        let (file, guard, reopen) = match access {
            AccessLogTarget::File(path) => {
                let file = AccessFile::open(path)?;
                let reopen = Arc::clone(&file.reopen);
                let (writer, guard) = NonBlockingBuilder::default()
                    .lossy(false)
                    .buffered_lines_limit(ACCESS_FILE_BACKLOG_LINES)
                    .thread_name("weir-access-log")
                    .finish(file);
                let only_access = Targets::new().with_target(ACCESS_TARGET, tracing::Level::INFO);
                (
                    Some(self.layer(writer, false).with_filter(only_access)),
                    Some(guard),
                    Some(reopen),
                )
            }
            AccessLogTarget::Stderr | AccessLogTarget::Off => (None, None, None),
        };
        tracing_subscriber::registry()
            .with(stderr)
            .with(file)
            .try_init()
            .context("cannot install the log subscriber")?;
        Ok(Guard {
            _worker: guard,
            reopen,
        })
    }

    /// A formatting layer writing to `writer`, in the chosen format.
    fn layer<S, W>(&self, writer: W, ansi: bool) -> Box<dyn Layer<S> + Send + Sync>
    where
        S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
        W: for<'w> tracing_subscriber::fmt::MakeWriter<'w> + Send + Sync + 'static,
    {
        let layer = tracing_subscriber::fmt::layer()
            .with_writer(writer)
            .with_ansi(ansi);
        match self.format {
            LogFormat::Text => Box::new(layer),
            LogFormat::Json => Box::new(layer.json().flatten_event(true)),
        }
    }
}

/// The access log file, as its writer thread writes it: a failed write
/// (disk full, a closed pipe) is said on stderr once, and its recovery
/// once, instead of lines vanishing without a word.
struct AccessFile {
    file: std::fs::File,
    path: std::path::PathBuf,
    failing: bool,
    /// Set by [`Reopener::reopen`]; the next write reopens first.
    reopen: Arc<AtomicBool>,
}

/// Opens `path` for appending, creating it.
fn open_append(path: &Path) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
}

impl AccessFile {
    fn open(path: &Path) -> anyhow::Result<AccessFile> {
        let file = open_append(path).with_context(|| {
            format!(
                "cannot open the access log {} (server.access_log)",
                path.display()
            )
        })?;
        Ok(AccessFile {
            file,
            path: path.to_owned(),
            failing: false,
            reopen: Arc::new(AtomicBool::new(false)),
        })
    }

    /// Reopens the file by its path when asked to. A file that cannot be
    /// opened is said on stderr, and the lines keep going to the old one.
    fn reopen_if_asked(&mut self) {
        if !self.reopen.swap(false, Ordering::AcqRel) {
            return;
        }
        match open_append(&self.path) {
            Ok(file) => self.file = file,
            Err(e) => eprintln!(
                "weir: cannot reopen the access log {}: {e}; its lines still go to the file it had open",
                self.path.display()
            ),
        }
    }

    /// Says a failed write on stderr, once until a write works again.
    fn report<T>(&mut self, result: std::io::Result<T>, write: bool) -> std::io::Result<T> {
        match &result {
            Err(e) if !self.failing => {
                self.failing = true;
                eprintln!(
                    "weir: cannot write the access log {}: {e}; its lines are lost until writes work again",
                    self.path.display()
                );
            }
            Ok(_) if write && self.failing => {
                self.failing = false;
                eprintln!(
                    "weir: the access log {} is written again",
                    self.path.display()
                );
            }
            _ => {}
        }
        result
    }
}

impl std::io::Write for AccessFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.reopen_if_asked();
        let result = self.file.write(buf);
        self.report(result, true)
    }

    fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        self.reopen_if_asked();
        let result = self.file.write_all(buf);
        self.report(result, true)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let result = self.file.flush();
        self.report(result, false)
    }
}
