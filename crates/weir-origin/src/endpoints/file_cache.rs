//! Small static files kept in memory, so a load test of `weir origin`
//! measures serving, not opening and reading the same file for every
//! request on the blocking pool.
//!
//! A plain `GET` or `HEAD` (no `Range`, no conditional field) of a simple
//! path (no `%`, no dot segment, no empty segment) is answered from the
//! cache when the file's response is there. The first such request goes
//! through `ServeDir` as every other one does; a `200` of a regular file of
//! at most [`MAX_FILE_BYTES`] is then kept, head and body, exactly as
//! `ServeDir` made it (`Content-Type`, `Last-Modified`, `ETag`,
//! `Accept-Ranges`, `Content-Length`). The file's modification time and
//! length are checked again at most every [`RECHECK`]: a file that changed
//! is dropped and served afresh, so an edit shows within that time. The
//! cache holds at most [`MAX_TOTAL_BYTES`]; past that, files are served
//! from disk.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use http::{HeaderMap, Method, Request, Response, StatusCode, header};

/// The largest file kept in memory, in bytes (64 KiB).
pub(crate) const MAX_FILE_BYTES: u64 = 64 * 1024;
/// The most bytes of file bodies kept in memory in all (16 MiB).
pub(crate) const MAX_TOTAL_BYTES: u64 = 16 * 1024 * 1024;
/// How long a kept file is served before its metadata is checked again.
pub(crate) const RECHECK: Duration = Duration::from_secs(1);

/// A kept response.
#[derive(Debug)]
struct Entry {
    status: StatusCode,
    headers: HeaderMap,
    body: Bytes,
    file: PathBuf,
    stamp: Stamp,
    /// When the file's metadata was last seen unchanged.
    checked: Mutex<Instant>,
}

/// What says a file is the one kept: its modification time and length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stamp {
    modified: SystemTime,
    len: u64,
}

impl Stamp {
    /// The stamp of the regular file at `path`, `None` for anything else.
    pub(crate) fn of(path: &Path) -> Option<Stamp> {
        let meta = std::fs::metadata(path).ok()?;
        if !meta.is_file() {
            return None;
        }
        Some(Stamp {
            modified: meta.modified().ok()?,
            len: meta.len(),
        })
    }
}

/// The kept files of one root directory.
#[derive(Debug)]
pub(crate) struct FileCache {
    root: PathBuf,
    entries: Mutex<HashMap<String, Arc<Entry>>>,
    total: Mutex<u64>,
}

impl FileCache {
    /// An empty cache for the files under `root`.
    pub(crate) fn new(root: &Path) -> Self {
        FileCache {
            root: root.to_owned(),
            entries: Mutex::new(HashMap::new()),
            total: Mutex::new(0),
        }
    }

    /// The file a plain request for `request`'s path would be, if the
    /// request may be answered from the cache at all.
    pub(crate) fn cacheable<B>(&self, request: &Request<B>) -> Option<PathBuf> {
        if !matches!(*request.method(), Method::GET | Method::HEAD) {
            return None;
        }
        let fields = request.headers();
        for name in [
            header::RANGE,
            header::IF_RANGE,
            header::IF_MATCH,
            header::IF_NONE_MATCH,
            header::IF_MODIFIED_SINCE,
            header::IF_UNMODIFIED_SINCE,
        ] {
            if fields.contains_key(name) {
                return None;
            }
        }
        let path = request.uri().path();
        let rest = path.strip_prefix('/')?;
        // With no `//`, an empty segment can only be the last one (`/dir/`).
        let simple = !path.contains(['%', '\\', '\0'])
            && !path.contains("//")
            && rest.split('/').all(|seg| seg != "." && seg != "..");
        if !simple {
            return None;
        }
        let file = self.root.join(rest);
        Some(if path.ends_with('/') {
            file.join("index.html")
        } else {
            file
        })
    }

    /// The kept response for `path` as a `GET` (`head_only`: without its
    /// body), if there is one and its file has not changed.
    pub(crate) fn get(&self, path: &str, head_only: bool) -> Option<Response<Bytes>> {
        let entry = self.entries.lock().ok()?.get(path).cloned()?;
        {
            let mut checked = entry.checked.lock().ok()?;
            if checked.elapsed() >= RECHECK {
                if Stamp::of(&entry.file) != Some(entry.stamp) {
                    drop(checked);
                    self.remove(path, &entry);
                    return None;
                }
                *checked = Instant::now();
            }
        }
        let body = if head_only {
            Bytes::new()
        } else {
            entry.body.clone()
        };
        let mut response = Response::new(body);
        *response.status_mut() = entry.status;
        *response.headers_mut() = entry.headers.clone();
        Some(response)
    }

    /// Keeps `head` and `body`, `ServeDir`'s answer to a `GET` of `path`
    /// (the file `file`, stamped `stamp` before it was read), when it is a
    /// `200` of at most [`MAX_FILE_BYTES`] and the cache has room.
    pub(crate) fn keep(
        &self,
        path: &str,
        file: PathBuf,
        stamp: Stamp,
        head: &http::response::Parts,
        body: Bytes,
    ) {
        let len = body.len() as u64;
        if head.status != StatusCode::OK || len > MAX_FILE_BYTES || stamp.len != len {
            return;
        }
        // The file may have changed while it was read.
        if Stamp::of(&file) != Some(stamp) {
            return;
        }
        let Ok(mut total) = self.total.lock() else {
            return;
        };
        if *total + len > MAX_TOTAL_BYTES {
            return;
        }
        let entry = Arc::new(Entry {
            status: head.status,
            headers: head.headers.clone(),
            body,
            file,
            stamp,
            checked: Mutex::new(Instant::now()),
        });
        if let Ok(mut entries) = self.entries.lock()
            && entries.insert(path.to_owned(), entry).is_none()
        {
            *total += len;
        }
    }

    fn remove(&self, path: &str, entry: &Arc<Entry>) {
        if let Ok(mut entries) = self.entries.lock()
            && entries.get(path).is_some_and(|e| Arc::ptr_eq(e, entry))
        {
            entries.remove(path);
            if let Ok(mut total) = self.total.lock() {
                *total = total.saturating_sub(entry.body.len() as u64);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache() -> FileCache {
        FileCache::new(Path::new("/srv"))
    }

    fn get(uri: &str) -> Request<()> {
        Request::builder().uri(uri).body(()).expect("request")
    }

    #[test]
    fn only_plain_requests_of_simple_paths_are_cacheable() {
        let c = cache();
        assert_eq!(
            c.cacheable(&get("/a/b.css")),
            Some(PathBuf::from("/srv/a/b.css"))
        );
        assert_eq!(
            c.cacheable(&get("/")),
            Some(PathBuf::from("/srv/index.html"))
        );
        assert_eq!(
            c.cacheable(&get("/docs/")),
            Some(PathBuf::from("/srv/docs/index.html"))
        );
        for uri in ["/a/../b", "/a/./b", "/a%2fb", "/a//b", "/a\\b"] {
            assert_eq!(c.cacheable(&get(uri)), None, "{uri}");
        }
        let mut ranged = get("/a");
        ranged
            .headers_mut()
            .insert(header::RANGE, "bytes=0-1".parse().expect("value"));
        assert_eq!(c.cacheable(&ranged), None);
        let mut conditional = get("/a");
        conditional
            .headers_mut()
            .insert(header::IF_NONE_MATCH, "\"x\"".parse().expect("value"));
        assert_eq!(c.cacheable(&conditional), None);
        let post = Request::builder()
            .method(Method::POST)
            .uri("/a")
            .body(())
            .expect("request");
        assert_eq!(c.cacheable(&post), None);
    }

    #[test]
    fn a_kept_file_is_dropped_when_it_changes() {
        let dir = std::env::temp_dir().join(format!("weir-file-cache-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let file = dir.join("a.txt");
        std::fs::write(&file, b"one").expect("write");
        let c = FileCache::new(&dir);
        let stamp = Stamp::of(&file).expect("a file");
        let head = Response::new(()).into_parts().0;
        c.keep(
            "/a.txt",
            file.clone(),
            stamp,
            &head,
            Bytes::from_static(b"one"),
        );
        let hit = c.get("/a.txt", false).expect("kept");
        assert_eq!(hit.body(), &Bytes::from_static(b"one"));
        assert!(c.get("/a.txt", true).expect("kept").body().is_empty());
        std::fs::write(&file, b"other").expect("write");
        // Force the recheck instead of waiting for RECHECK.
        if let Some(e) = c.entries.lock().expect("lock").get("/a.txt") {
            *e.checked.lock().expect("lock") = Instant::now() - RECHECK;
        }
        assert!(
            c.get("/a.txt", false).is_none(),
            "a changed file is not served from memory"
        );
        assert!(c.entries.lock().expect("lock").is_empty());
        std::fs::remove_dir_all(&dir).ok();
    }
}
