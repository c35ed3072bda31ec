//! `GET /abort/{n}`: a transfer that fails after `n` bytes of the
//! [pattern](crate::pattern).
//!
//! - `n`: decimal, `0 ..= 2^40` (1 TiB).
//! - Response: `200`, `Content-Type: application/octet-stream`, no
//!   `Content-Length` (chunked on HTTP/1.1). The body sends pattern offsets
//!   `0 .. n` in frames of at most 64 KiB, waits 50 ms so those bytes leave
//!   the server, then fails: hyper closes the HTTP/1.1 connection without
//!   the final zero-size chunk, or resets the HTTP/2 stream
//!   (`INTERNAL_ERROR`). Clients see a failed transfer (curl exits 18 on
//!   HTTP/1.1, 92 on HTTP/2).
//! - A peer too slow to take `n` bytes within the grace period may receive
//!   fewer before the failure; it fails either way.
//! - No query parameters are accepted.

use std::time::Duration;

use http::{Response, StatusCode};

use super::MAX_BODY_LEN;
use super::bytes::CHUNK;
use crate::body::{FailAtEnd, Length, PatternChunks};
use crate::error::OriginError;
use crate::params::{Range, query_values};
use crate::reply::{self, OriginBody};

/// Wait between the last byte and the failure, so hyper can flush (50 ms).
pub(crate) const GRACE: Duration = Duration::from_millis(50);

const LENGTH: Range = Range {
    name: "length",
    min: 0,
    max: MAX_BODY_LEN,
};

/// Builds the response for `/abort/{raw_len}?{query}`.
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
    let body = FailAtEnd::new(PatternChunks::new(len, CHUNK, Length::Hidden), GRACE);
    Ok(reply::with_body(StatusCode::OK, reply::OCTET_STREAM, body))
}
