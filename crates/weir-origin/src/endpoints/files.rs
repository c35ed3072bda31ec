//! Everything else: static files from the configured root.
//!
//! Serving is tower-http's `ServeDir`, which brings:
//! - `GET /` and `GET /dir/` serve `index.html`; `GET /dir` redirects to
//!   `/dir/`.
//! - `Content-Type` guessed from the extension; `Content-Length`,
//!   `Last-Modified`, single and multiple `Range` requests (`206`, `416`),
//!   `If-Modified-Since` / `If-Unmodified-Since` (`304`, `412`).
//! - Path traversal is impossible: paths are percent-decoded and any `..`,
//!   root or prefix component makes the request a `404`.
//! - A path that is not a file: `404` with an empty body. A method other
//!   than `GET`/`HEAD`: `405`.
//!
//! Small files are then kept in memory, exactly as `ServeDir` answered
//! them, and checked for changes at most every second ([`file_cache`]).

use std::path::Path;

use http::Request;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use tower::ServiceExt;
use tower_http::services::ServeDir;

use std::sync::Arc;

use http::{Method, header};
use http_body_util::Full;

use super::file_cache::{self, FileCache, Stamp};
use crate::error::OriginError;
use crate::reply::{self, OriginBody};

/// The static file service for one root directory.
#[derive(Debug, Clone)]
pub(crate) struct Files {
    dir: ServeDir,
    cache: Arc<FileCache>,
}

impl Files {
    /// Serves the files under `root`.
    pub(crate) fn new(root: &Path) -> Self {
        Self {
            dir: ServeDir::new(root),
            cache: Arc::new(FileCache::new(root)),
        }
    }

    /// Answers `request` from the root directory.
    ///
    /// I/O errors opening a file become a `500`; an error while reading one
    /// mid-body fails the body with [`OriginError::File`].
    pub(crate) async fn respond(&self, request: Request<Incoming>) -> http::Response<OriginBody> {
        let file = self.cache.cacheable(&request);
        let path = request.uri().path().to_owned();
        let get = request.method() == Method::GET;
        if file.is_some()
            && let Some(hit) = self.cache.get(&path, !get)
        {
            return hit.map(full);
        }
        // Stamped before the read, so a change during it is noticed.
        let stamp = file.as_deref().filter(|_| get).and_then(Stamp::of);
        let response = match self.dir.clone().oneshot(request).await {
            Ok(response) => response,
            Err(never) => match never {},
        };
        let small = response
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
            .is_some_and(|n| n <= file_cache::MAX_FILE_BYTES);
        match (file, stamp) {
            (Some(file), Some(stamp)) if small && response.status() == http::StatusCode::OK => {
                let (head, body) = response.into_parts();
                match body.collect().await {
                    Ok(collected) => {
                        let bytes = collected.to_bytes();
                        self.cache.keep(&path, file, stamp, &head, bytes.clone());
                        http::Response::from_parts(head, full(bytes))
                    }
                    Err(e) => reply::error(&OriginError::File(e)),
                }
            }
            _ => response.map(|body| body.map_err(OriginError::File).boxed_unsync()),
        }
    }
}

/// A body of `bytes`, whole.
fn full(bytes: bytes::Bytes) -> OriginBody {
    Full::new(bytes)
        .map_err(|never| match never {})
        .boxed_unsync()
}
