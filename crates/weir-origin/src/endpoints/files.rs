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

use std::path::Path;

use http::Request;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use tower::ServiceExt;
use tower_http::services::ServeDir;

use crate::error::OriginError;
use crate::reply::OriginBody;

/// The static file service for one root directory.
#[derive(Debug, Clone)]
pub(crate) struct Files {
    dir: ServeDir,
}

impl Files {
    /// Serves the files under `root`.
    pub(crate) fn new(root: &Path) -> Self {
        Self {
            dir: ServeDir::new(root),
        }
    }

    /// Answers `request` from the root directory.
    ///
    /// I/O errors opening a file become a `500`; an error while reading one
    /// mid-body fails the body with [`OriginError::File`].
    pub(crate) async fn respond(&self, request: Request<Incoming>) -> http::Response<OriginBody> {
        let response = match self.dir.clone().oneshot(request).await {
            Ok(response) => response,
            Err(never) => match never {},
        };
        response.map(|body| body.map_err(OriginError::File).boxed_unsync())
    }
}
