//! `GET /bytes/{n}`: `n` bytes of the [pattern](crate::pattern), as fast as
//! the peer reads them.
//!
//! - `n`: decimal, `0 ..= 2^40` (1 TiB).
//! - Response: `200`, `Content-Type: application/octet-stream`,
//!   `Content-Length: n`; the body is pattern offsets `0 .. n`, in data
//!   frames of at most 64 KiB, each a zero-copy slice of the shared block.
//! - No query parameters are accepted.

use http::header::{CONTENT_LENGTH, HeaderValue};
use http::{Response, StatusCode};

use super::MAX_BODY_LEN;
use crate::body::{Length, PatternChunks};
use crate::error::OriginError;
use crate::params::{Range, query_values};
use crate::reply::{self, OriginBody};

/// Size of each data frame, in bytes (64 KiB).
pub(crate) const CHUNK: usize = 64 * 1024;

const LENGTH: Range = Range {
    name: "length",
    min: 0,
    max: MAX_BODY_LEN,
};

/// Builds the response for `/bytes/{raw_len}?{query}`.
///
/// # Errors
///
/// A parameter error (→ 400) if `raw_len` is not a number in range or a
/// query parameter is given.
pub(crate) fn respond(
    raw_len: &str,
    query: Option<&str>,
) -> Result<Response<OriginBody>, OriginError> {
    let [] = query_values(query, &[])?;
    let len = LENGTH.parse(raw_len)?;
    let body = PatternChunks::new(len, CHUNK, Length::Announced);
    let mut response = reply::with_body(StatusCode::OK, reply::OCTET_STREAM, body);
    response
        .headers_mut()
        .insert(CONTENT_LENGTH, HeaderValue::from(len));
    Ok(response)
}
