//! The response body Weir sends downstream.

use std::pin::Pin;
use std::task::{Context, Poll};

use http::HeaderMap;
use http_body::SizeHint;
use weir_stream::body::SourceBody;
use weir_stream::{BatchResult, Chain, Once, Pipeline, Source};
use weir_transform::chain::ResponseChain;

use crate::access_log::ResponseLog;
use crate::body_log::BodyLog;
use crate::cache::CacheSource;
use crate::upstream::UpstreamBody;

/// The body Weir sends downstream: the upstream's body or Weir's own, streamed.
/// Its pipeline runs the route's response transforms (empty for most
/// routes and for Weir's own responses), then the access-log stage.
pub type ResponseBody =
    SourceBody<Pipeline<ResponseSource, Chain<Chain<BodyLog, ResponseChain>, ResponseLog>>>;

/// Where a response body comes from.
///
/// The upstream's body is the large variant and the common one: boxing it
/// would cost an allocation per response to save stack space in the rare
/// ones.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)]
pub enum ResponseSource {
    /// The upstream's body.
    Upstream(UpstreamBody),
    /// A body Weir made itself (an error page).
    Local(Once),
    /// A body the response cache serves or tees (crate::cache).
    Cache(CacheSource),
    /// A page composed from a template and its fragments (crate::ssr).
    Page(weir_ssr::PageBody),
}

impl ResponseSource {
    /// An empty body, for responses that have none.
    pub fn empty() -> ResponseSource {
        ResponseSource::Local(weir_stream::once(bytes::Bytes::new()))
    }
}

impl Source for ResponseSource {
    fn poll_next_batch(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<BatchResult>> {
        match self.get_mut() {
            ResponseSource::Upstream(s) => Pin::new(s).poll_next_batch(cx),
            ResponseSource::Local(s) => Pin::new(s).poll_next_batch(cx),
            ResponseSource::Cache(s) => Pin::new(s).poll_next_batch(cx),
            ResponseSource::Page(s) => Pin::new(s).poll_next_batch(cx),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ResponseSource::Upstream(s) => s.size_hint(),
            ResponseSource::Local(s) => s.size_hint(),
            ResponseSource::Cache(s) => s.size_hint(),
            ResponseSource::Page(s) => s.size_hint(),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ResponseSource::Upstream(s) => s.is_end_stream(),
            ResponseSource::Local(s) => s.is_end_stream(),
            ResponseSource::Cache(s) => s.is_end_stream(),
            ResponseSource::Page(s) => s.is_end_stream(),
        }
    }

    fn take_trailers(self: Pin<&mut Self>) -> Option<HeaderMap> {
        match self.get_mut() {
            ResponseSource::Upstream(s) => Pin::new(s).take_trailers(),
            ResponseSource::Local(s) => Pin::new(s).take_trailers(),
            ResponseSource::Cache(s) => Pin::new(s).take_trailers(),
            ResponseSource::Page(_) => None,
        }
    }
}
