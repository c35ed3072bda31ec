//! How the composer gets fragments: a small trait that the proxy implements.
//!
//! `weir-ssr` knows nothing of connections, pools or upstreams. It hands a
//! `src` and the URL of the template it came from to [`Fetcher::resolve`],
//! which decides where the fragment may come from, and sends the resolved
//! request with [`Fetcher::fetch`].

use std::future::Future;
use std::pin::Pin;

use http::{HeaderMap, StatusCode};
use weir_stream::Source;

/// A fragment body: any source of batches.
pub type BoxSource = Pin<Box<dyn Source + Send + 'static>>;

/// What [`Fetcher::fetch`] returns.
pub type FetchFuture = Pin<Box<dyn Future<Output = Result<FragmentResponse, FetchError>> + Send>>;

/// A fragment's response: its head and its body (as received; the composer
/// decodes `gzip` and `deflate`).
pub struct FragmentResponse {
    /// The status.
    pub status: StatusCode,
    /// The response fields.
    pub headers: HeaderMap,
    /// The body.
    pub body: BoxSource,
}

impl std::fmt::Debug for FragmentResponse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FragmentResponse")
            .field("status", &self.status)
            .field("headers", &self.headers)
            .finish_non_exhaustive()
    }
}

/// Why a fragment could not be fetched.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FetchError {
    /// The `src` names a host that no upstream names.
    #[error("src {src:?} names a host no upstream names")]
    NotAllowed {
        /// The `src` as written.
        src: String,
    },
    /// The `src` is not a usable URL.
    #[error("src {src:?} is not a valid URL: {reason}")]
    Invalid {
        /// The `src` as written.
        src: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The upstream could not be reached or failed before a response head.
    #[error("upstream failed: {reason}")]
    Upstream {
        /// What happened (for the log).
        reason: String,
    },
}

/// Resolves and fetches fragments; implemented by the proxy.
pub trait Fetcher: Send + Sync + 'static {
    /// The absolute URL that `src` (as written in a template) names,
    /// relative to `base`, the absolute URL of the template itself.
    ///
    /// # Errors
    /// [`FetchError::NotAllowed`] for a host no upstream names,
    /// [`FetchError::Invalid`] for a `src` that is not a URL reference.
    fn resolve(&self, base: &str, src: &str) -> Result<String, FetchError>;

    /// Sends `GET url` with `headers` (the client's forwarded fields).
    /// Dropping the future, or the body it gave, cancels the request.
    fn fetch(&self, url: &str, headers: HeaderMap) -> FetchFuture;
}
