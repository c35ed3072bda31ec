//! Settings of the origin.

use std::io;
use std::path::PathBuf;

/// Settings of the origin.
#[derive(Debug, Clone)]
pub struct OriginConfig {
    /// Directory whose files are served for every path that is not an
    /// endpoint (`/` serves `root/index.html`); its `fragments/`
    /// subdirectory holds the markup `/fragment/{name}` serves. Relative
    /// paths are resolved against the process's working directory.
    pub root: PathBuf,
    /// Whether the test and load-test endpoints answer (`/bytes`,
    /// `/stream`, `/status`, `/delay`, `/abort`, `/echo`, `/sse`, `/page`,
    /// `/trailers`, `/response-headers`, and `/fragment`'s `bytes`,
    /// `fail_after`, `include` and `header` parameters). Off, their paths are
    /// static-file paths (so `404` unless such a file exists), those
    /// parameters are a `400`, and the origin serves only its files and
    /// fragment markup: what a public demo needs, nothing that makes it
    /// send gigabytes or hold connections for minutes on request.
    pub test_endpoints: bool,
}

impl OriginConfig {
    /// Serves `root` with every endpoint on.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self {
            root: root.into(),
            test_endpoints: true,
        }
    }

    /// Checks that [`root`](Self::root) is an existing directory.
    ///
    /// # Errors
    ///
    /// The I/O error of looking it up, or [`io::ErrorKind::NotADirectory`]
    /// if it is something else.
    pub(crate) async fn check_root(&self) -> io::Result<()> {
        let metadata = tokio::fs::metadata(&self.root).await.map_err(|err| {
            io::Error::new(
                err.kind(),
                format!("origin root {}: {err}", self.root.display()),
            )
        })?;
        if metadata.is_dir() {
            Ok(())
        } else {
            Err(io::Error::new(
                io::ErrorKind::NotADirectory,
                format!("origin root {} is not a directory", self.root.display()),
            ))
        }
    }
}
