//! `GET /trailers`: a chunked body followed by trailer fields.
//!
//! - Response: `200`, `Content-Type: text/plain; charset=utf-8`,
//!   `Trailer: x-body-sha256, x-trailer-test`, no `Content-Length`. The body
//!   is three text chunks, each its own data frame; then the trailers
//!   `x-body-sha256: <SHA-256 of the whole body, lowercase hex>` and
//!   `x-trailer-test: ok`.
//! - HTTP/2 always carries the trailers. HTTP/1.1 carries them only when
//!   the request said `TE: trailers` (hyper drops them otherwise; the body
//!   is the same either way).
//! - No query parameters are accepted.

use std::future;
use std::sync::LazyLock;

use http::header::{HeaderName, HeaderValue, TRAILER};
use http::{HeaderMap, Response, StatusCode};
use http_body_util::BodyExt;
use sha2::{Digest, Sha256};

use crate::body::StaticChunks;
use crate::error::OriginError;
use crate::hex;
use crate::params::query_values;
use crate::reply::{self, OriginBody};

/// The body, chunk by chunk.
pub(crate) const CHUNKS: &[&[u8]] = &[
    b"Weir trailers test: first chunk.\n",
    b"Second chunk, sent as its own frame.\n",
    b"Third and last chunk; the trailers follow.\n",
];

/// Name of the trailer holding the body's SHA-256.
pub(crate) const BODY_SHA256: HeaderName = HeaderName::from_static("x-body-sha256");

/// Name of the trailer whose value is always `ok`.
pub(crate) const TRAILER_TEST: HeaderName = HeaderName::from_static("x-trailer-test");

/// SHA-256 of the concatenated [`CHUNKS`], as a header value.
static BODY_DIGEST: LazyLock<HeaderValue> = LazyLock::new(|| {
    let mut hasher = Sha256::new();
    for chunk in CHUNKS {
        hasher.update(chunk);
    }
    HeaderValue::from_str(&hex::encode(&hasher.finalize()))
        .expect("lowercase hex digits form a valid header value")
});

/// Builds the response for `/trailers?{query}`.
///
/// # Errors
///
/// A parameter error (→ 400) if a query parameter is given.
pub(crate) fn respond(query: Option<&str>) -> Result<Response<OriginBody>, OriginError> {
    let [] = query_values(query, &[])?;
    let mut trailers = HeaderMap::with_capacity(2);
    trailers.insert(BODY_SHA256, BODY_DIGEST.clone());
    trailers.insert(TRAILER_TEST, HeaderValue::from_static("ok"));
    let body = StaticChunks::new(CHUNKS).with_trailers(future::ready(Some(Ok(trailers))));
    let mut response = reply::with_body(StatusCode::OK, reply::TEXT_PLAIN, body);
    response.headers_mut().insert(
        TRAILER,
        HeaderValue::from_static("x-body-sha256, x-trailer-test"),
    );
    Ok(response)
}
