//! `GET /response-headers?{name}={value}&…`: a response with the headers
//! you ask for.
//!
//! - Each query pair is percent-decoded and added as a response header, in
//!   order (a name given twice gives two fields). The first pair naming a
//!   field the response has of its own (`Content-Type`) replaces it; the
//!   others are appended. Any name is allowed, hop-by-hop ones included
//!   (`connection`, `keep-alive`, …): that is what this endpoint is for,
//!   testing how an intermediary treats them.
//! - Response: `200`, `Content-Type: text/plain; charset=utf-8` unless
//!   replaced, body `ok\n`.
//! - A pair that does not decode to a valid field name and value, or that
//!   names `Content-Length` (the framing's), → 400.

use http::header::CONTENT_LENGTH;
use http::{HeaderName, HeaderValue, Response, StatusCode};
use percent_encoding::percent_decode_str;

use crate::error::{OriginError, quote};
use crate::reply::{self, OriginBody};

/// Builds the response for `/response-headers?{query}`.
///
/// # Errors
/// [`OriginError::InvalidHeader`] (→ 400) for a pair that is not a valid
/// field, or that names `Content-Length`.
pub(crate) fn respond(query: Option<&str>) -> Result<Response<OriginBody>, OriginError> {
    let mut response = reply::text(StatusCode::OK, "ok\n");
    // The endpoint's own fields, which a pair replaces rather than repeats.
    let mut own: Vec<HeaderName> = response.headers().keys().cloned().collect();
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
        if name == CONTENT_LENGTH {
            return Err(invalid());
        }
        if let Some(k) = own.iter().position(|n| *n == name) {
            own.swap_remove(k);
            response.headers_mut().insert(name, value);
        } else {
            response.headers_mut().append(name, value);
        }
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

    /// Issue 15, U10: a field the endpoint sets itself is replaced, not
    /// doubled; a second pair of that name is appended.
    #[test]
    fn a_pair_replaces_the_endpoints_own_field() {
        let r = respond(Some("Content-Type=text/html&content-type=text/x-second")).expect("ok");
        let ct: Vec<_> = r.headers().get_all("content-type").iter().collect();
        assert_eq!(ct, ["text/html", "text/x-second"]);
        let r = respond(Some("x-a=1")).expect("ok");
        assert_eq!(r.headers()["content-type"], "text/plain; charset=utf-8");
    }

    #[test]
    fn invalid_fields_are_refused() {
        for q in [
            "bad%20name=1",
            "x=%0D%0Ainjected",
            "=empty",
            "content-length=9",
        ] {
            assert!(
                matches!(respond(Some(q)), Err(OriginError::InvalidHeader { .. })),
                "{q}"
            );
        }
    }
}
