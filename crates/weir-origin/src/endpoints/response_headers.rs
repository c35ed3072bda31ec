//! `GET /response-headers?{name}={value}&…`: a response with the headers
//! you ask for.
//!
//! - Each query pair is percent-decoded and appended as a response header,
//!   in order (a name given twice gives two fields). Any name is allowed,
//!   hop-by-hop ones included (`connection`, `keep-alive`, …): that is what
//!   this endpoint is for, testing how an intermediary treats them.
//! - Response: `200`, `Content-Type: text/plain; charset=utf-8`, body `ok\n`.
//! - A pair that does not decode to a valid field name and value → 400.

use http::{HeaderName, HeaderValue, Response, StatusCode};
use percent_encoding::percent_decode_str;

use crate::error::{OriginError, quote};
use crate::reply::{self, OriginBody};

/// Builds the response for `/response-headers?{query}`.
///
/// # Errors
/// [`OriginError::InvalidHeader`] (→ 400) for a pair that is not a valid field.
pub(crate) fn respond(query: Option<&str>) -> Result<Response<OriginBody>, OriginError> {
    let mut response = reply::text(StatusCode::OK, "ok\n");
    for piece in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (raw_name, raw_value) = piece.split_once('=').unwrap_or((piece, ""));
        let name = percent_decode_str(raw_name).collect::<Vec<u8>>();
        let value = percent_decode_str(raw_value).collect::<Vec<u8>>();
        let invalid = || OriginError::InvalidHeader {
            field: quote(&String::from_utf8_lossy(
                &[&name[..], b"=", &value[..]].concat(),
            )),
        };
        let name = HeaderName::from_bytes(&name).map_err(|_| invalid())?;
        let value = HeaderValue::from_bytes(&value).map_err(|_| invalid())?;
        response.headers_mut().append(name, value);
    }
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_become_headers_in_order() {
        let r = respond(Some("x-a=1&connection=x-a&x-a=2&keep-alive=timeout%3D5")).expect("ok");
        let a: Vec<_> = r.headers().get_all("x-a").iter().collect();
        assert_eq!(a, ["1", "2"]);
        assert_eq!(r.headers()["connection"], "x-a");
        assert_eq!(r.headers()["keep-alive"], "timeout=5");
    }

    #[test]
    fn invalid_fields_are_refused() {
        for q in ["bad%20name=1", "x=%0D%0Ainjected", "=empty"] {
            assert!(
                matches!(respond(Some(q)), Err(OriginError::InvalidHeader { .. })),
                "{q}"
            );
        }
    }
}
