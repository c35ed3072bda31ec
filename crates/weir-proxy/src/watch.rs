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
//! and where the directory's `..data` symlink points, if it has one. A
//! ConfigMap update always repoints `..data`, so an update of any of its
//! files (a template, a certificate next to the config) reloads. Nothing
//! else in the directory is looked at: a log file written there must not
//! reload the config every poll. Outside Kubernetes, a change to another
//! file the config names (a certificate, a template) is picked up by the
//! next reload; touch the config file, or send SIGHUP, to reload for it.

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

/// A digest of what decides a reload: the config file's contents and the
/// target of its directory's `..data` symlink (a Kubernetes ConfigMap).
///
/// # Errors
/// The config file or its directory cannot be read.
pub fn fingerprint(config: &Path) -> io::Result<u64> {
    let mut h = DefaultHasher::new();
    // Never open a FIFO (open blocks) or read a device or a huge file
    // whole: the reload refuses those anyway, with the reason.
    let meta = std::fs::metadata(config)?;
    if !meta.is_file() {
        return Err(io::Error::other("not a regular file"));
    }
    if meta.len() > crate::config::MAX_CONFIG_BYTES {
        (meta.len(), meta.modified().ok()).hash(&mut h);
    } else {
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(
            &mut std::io::Read::take(
                std::fs::File::open(config)?,
                crate::config::MAX_CONFIG_BYTES,
            ),
            &mut bytes,
        )?;
        bytes.hash(&mut h);
    }
    let dir = match config.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    // The kubelet's atomic writer: absent outside a ConfigMap volume.
    std::fs::read_link(dir.join("..data")).ok().hash(&mut h);
    Ok(h.finish())
}

/// Polls `config`'s directory every `interval` and reloads through
/// `reloader` when [`fingerprint`] changes. Runs until the task is dropped.
///
/// A refused config is logged (by the reloader) once: it is not retried
/// until the directory changes again. A directory that cannot be read is
/// logged at WARN once per distinct error, and the poll goes on.
pub async fn watch(config: PathBuf, interval: Duration, reloader: Arc<Reloader>) {
    let start = config.clone();
    let mut last = tokio::task::spawn_blocking(move || fingerprint(&start))
        .await
        .ok()
        .and_then(Result::ok);
    let mut last_error: Option<String> = None;
    let mut ticks = tokio::time::interval(interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticks.tick().await;
    loop {
        ticks.tick().await;
        let path = config.clone();
        let polled = tokio::task::spawn_blocking(move || fingerprint(&path)).await;
        let now = match polled.unwrap_or_else(|e| Err(io::Error::other(e.to_string()))) {
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
    fn the_fingerprint_follows_the_config_and_the_configmap_link_only() {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = dir.path().join("weir.toml");
        std::fs::write(&config, "a").expect("write");
        let f0 = fingerprint(&config).expect("fingerprint");
        assert_eq!(fingerprint(&config).expect("again"), f0);

        std::fs::write(&config, "b").expect("rewrite");
        let f1 = fingerprint(&config).expect("fingerprint");
        assert_ne!(f1, f0, "same size, new contents");

        // A log file (or anything else) written next to the config.
        std::fs::write(dir.path().join("weir.log"), "a line").expect("log");
        assert_eq!(fingerprint(&config).expect("neighbour ignored"), f1);

        // A ConfigMap update repoints `..data`.
        std::os::unix::fs::symlink("..2026_1", dir.path().join("..data")).expect("link");
        let f2 = fingerprint(&config).expect("linked");
        assert_ne!(f2, f1);
        std::fs::remove_file(dir.path().join("..data")).expect("unlink");
        std::os::unix::fs::symlink("..2026_2", dir.path().join("..data")).expect("relink");
        assert_ne!(fingerprint(&config).expect("relinked"), f2);
    }

    #[test]
    fn a_missing_config_is_an_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        let err = fingerprint(&dir.path().join("nope.toml")).expect_err("missing");
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
    }
}
