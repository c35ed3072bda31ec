//! What the send phase came to.

use http::Response;
use hyper::body::Incoming;

use crate::cache::Hit;
use crate::upstream::UpstreamError;

/// What sending a request came to.
#[derive(Debug)]
pub(crate) enum Sent {
    /// The upstream's response head; its body streams on.
    Response(Response<Incoming>),
    /// The cache answers instead (a `304` refreshed an entry, or a stale
    /// entry stands in for a failure).
    Cached(Hit),
    /// No response.
    Failed(UpstreamError),
}

impl From<Result<Response<Incoming>, UpstreamError>> for Sent {
    fn from(sent: Result<Response<Incoming>, UpstreamError>) -> Sent {
        match sent {
            Ok(resp) => Sent::Response(resp),
            Err(e) => Sent::Failed(e),
        }
    }
}
