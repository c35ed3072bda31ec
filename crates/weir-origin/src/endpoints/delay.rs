//! `GET /delay/{ms}`: a response whose head is sent only after a wait.
//!
//! - `ms`: decimal, `0 ..= 300000` (5 minutes).
//! - Response, after `ms` milliseconds: `200`,
//!   `Content-Type: text/plain; charset=utf-8`, body `ok\n`. Nothing, not
//!   even the status line, is sent before the wait ends.
//! - No query parameters are accepted.

use std::time::Duration;

use http::{Response, StatusCode};

use super::MAX_WAIT_MS;
use crate::error::OriginError;
use crate::params::{Range, query_values};
use crate::reply::{self, OriginBody};

const WAIT_MS: Range = Range {
    name: "delay_ms",
    min: 0,
    max: MAX_WAIT_MS,
};

/// Waits the requested time, then builds the response for
/// `/delay/{raw_ms}?{query}`.
///
/// # Errors
///
/// A parameter error (→ 400), returned at once without waiting, if `raw_ms`
/// is not a number in range or a query parameter is given.
///
/// # Cancel safety
///
/// Dropping the future (the client went away) just ends the wait.
pub(crate) async fn respond(
    raw_ms: &str,
    query: Option<&str>,
) -> Result<Response<OriginBody>, OriginError> {
    let [] = query_values(query, &[])?;
    let wait = Duration::from_millis(WAIT_MS.parse(raw_ms)?);
    tokio::time::sleep(wait).await;
    Ok(reply::text(StatusCode::OK, "ok\n"))
}
