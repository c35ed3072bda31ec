//! `GET /status/{code}`: a response with any final status.
//!
//! - `code`: decimal, `200 ..= 599` (`100 ..= 199` are informational and
//!   rejected with 400, like anything outside `100 ..= 599`).
//! - Response: status `code`, `Content-Type: text/plain; charset=utf-8`, body
//!   `"{code} {reason}\n"` (e.g. `418 I'm a teapot`; just `"{code}\n"` for a
//!   code without a registered reason). `204`, `205` and `304` have no body
//!   and no `Content-Type`, as HTTP requires.
//! - No query parameters are accepted.

use http::{Response, StatusCode};

use crate::error::OriginError;
use crate::params::{Range, query_values};
use crate::reply::{self, OriginBody};

const CODE: Range = Range {
    name: "status",
    min: 100,
    max: 599,
};

/// Builds the response for `/status/{raw_code}?{query}`.
///
/// # Errors
///
/// A parameter error (→ 400) if `raw_code` is not a number in
/// `100 ..= 599`, is informational (1xx), or a query parameter is given.
pub(crate) fn respond(
    raw_code: &str,
    query: Option<&str>,
) -> Result<Response<OriginBody>, OriginError> {
    let [] = query_values(query, &[])?;
    let code = CODE.parse(raw_code)?;
    let out_of_range = || OriginError::OutOfRange {
        name: CODE.name,
        value: code,
        min: CODE.min,
        max: CODE.max,
    };
    let code = u16::try_from(code).map_err(|_| out_of_range())?;
    if code < 200 {
        return Err(OriginError::InformationalStatus { code });
    }
    let status = StatusCode::from_u16(code).map_err(|_| out_of_range())?;
    if matches!(code, 204 | 205 | 304) {
        return Ok(reply::empty(status));
    }
    let text = match status.canonical_reason() {
        Some(reason) => format!("{code} {reason}\n"),
        None => format!("{code}\n"),
    };
    Ok(reply::text(status, text))
}
