//! Reload on change (`weir serve --watch`): the directory the config file
//! is in is polled, and any change reloads the config through the same
//! [`Reloader`] as SIGHUP, so a bad config is refused and the one in effect
//! stays.
//!
//! Made for a Kubernetes ConfigMap mounted as a directory. The kubelet
//! updates such a volume by writing the new files into a fresh hidden
//! directory and renaming a `..data` symlink over the old one, so every
//! file changes at once and no reader ever sees half of an update. A
//! `subPath` mount never updates and cannot be watched.
//!
//! Polling instead of inotify: inotify watches inodes, and the swap replaces
//! the directory the visible symlinks resolve through, so a watch on the
//! files goes silent after the first update. A poll of a handful of small
//! files per interval costs nothing measurable, works on every filesystem,
//! and follows symlinks as a reader does.
//!
//! What is compared per poll ([`fingerprint`]): the config file's contents,
//! and the name, size, modification time and inode of every other entry of
//! the directory whose name does not start with `.` (symlinks followed).
//! Files the config names in other directories (certificates, templates)
//! are read again by each reload but do not trigger one.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::reload::Reloader;

/// The default time between two polls of the watched directory, in ms.
pub const DEFAULT_INTERVAL_MS: u64 = 1000;

/// The shortest and longest poll interval `--watch-interval-ms` accepts, in ms.
pub const INTERVAL_RANGE_MS: std::ops::RangeInclusive<u64> = 100..=3_600_000;

/// A digest of what a reload would read: the config file's contents and
/// the metadata of the other visible entries of its directory.
///
/// # Errors
/// The config file or its directory cannot be read.
pub fn fingerprint(config: &Path) -> io::Result<u64> {
    let mut h = DefaultHasher::new();
    std::fs::read(config)?.hash(&mut h);
    let dir = match config.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let mut entries: Vec<(std::ffi::OsString, PathBuf)> = std::fs::read_dir(dir)?
        .filter_map(Result::ok)
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .map(|e| (e.file_name(), e.path()))
        .collect();
    entries.sort();
    for (name, path) in entries {
        name.hash(&mut h);
        // A dangling symlink mid-swap hashes as absent; the next poll sees
        // the settled state.
        if let Ok(meta) = std::fs::metadata(&path) {
            meta.len().hash(&mut h);
            meta.modified().ok().hash(&mut h);
            #[cfg(unix)]
            std::os::unix::fs::MetadataExt::ino(&meta).hash(&mut h);
        }
    }
    Ok(h.finish())
}

/// Polls `config`'s directory every `interval` and reloads through
/// `reloader` when [`fingerprint`] changes. Runs until the task is dropped.
///
/// A refused config is logged (by the reloader) once: it is not retried
/// until the directory changes again. A directory that cannot be read is
/// logged at WARN once per distinct error, and the poll goes on.
pub async fn watch(config: PathBuf, interval: Duration, reloader: Arc<Reloader>) {
    let mut last = fingerprint(&config).ok();
    let mut last_error: Option<String> = None;
    let mut ticks = tokio::time::interval(interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticks.tick().await;
    loop {
        ticks.tick().await;
        let now = match fingerprint(&config) {
            Ok(f) => {
                last_error = None;
                f
            }
            Err(e) => {
                let e = e.to_string();
                if last_error.as_ref() != Some(&e) {
                    tracing::warn!(
                        target: "weir::reload",
                        config = %config.display(),
                        "cannot read the watched config: {e}"
                    );
                    last_error = Some(e);
                }
                continue;
            }
        };
        if last == Some(now) {
            continue;
        }
        // Taken before the reload reads the files: a change during the
        // reload is seen by the next poll.
        last = Some(now);
        tracing::info!(
            target: "weir::reload",
            config = %config.display(),
            "the watched config directory changed: reloading"
        );
        // The reloader logs and counts the outcome.
        let _ = reloader.reload().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fingerprint_changes_with_the_config_and_with_a_visible_neighbour_only() {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = dir.path().join("weir.toml");
        std::fs::write(&config, "a").expect("write");
        let f0 = fingerprint(&config).expect("fingerprint");
        assert_eq!(fingerprint(&config).expect("again"), f0);

        std::fs::write(&config, "b").expect("rewrite");
        let f1 = fingerprint(&config).expect("fingerprint");
        assert_ne!(f1, f0, "same size, new contents");

        std::fs::write(dir.path().join(".hidden"), "x").expect("hidden");
        assert_eq!(fingerprint(&config).expect("hidden ignored"), f1);

        std::fs::write(dir.path().join("template.html"), "x").expect("neighbour");
        assert_ne!(fingerprint(&config).expect("neighbour"), f1);
    }

    #[test]
    fn a_missing_config_is_an_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        let err = fingerprint(&dir.path().join("nope.toml")).expect_err("missing");
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
    }
}
