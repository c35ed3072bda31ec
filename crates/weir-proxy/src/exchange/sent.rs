//! What the send phase came to.

use http::Response;

use crate::cache::Hit;
use crate::upstream::{PooledBody, UpstreamError};

/// What sending a request came to.
#[derive(Debug)]
pub(crate) enum Sent {
    /// The upstream's response head; its body streams on.
    Response(Response<PooledBody>),
    /// The cache answers instead (a `304` refreshed an entry, or a stale
    /// entry stands in for a failure).
    Cached(Hit),
    /// No response.
    Failed(UpstreamError),
}

impl From<Result<Response<PooledBody>, UpstreamError>> for Sent {
    fn from(sent: Result<Response<PooledBody>, UpstreamError>) -> Sent {
        match sent {
            Ok(resp) => Sent::Response(resp),
            Err(e) => Sent::Failed(e),
        }
    }
}
