//! Response header fields that several stages read or edit:
//! `Cache-Control: no-transform`, `Vary`, `ETag`. The field grammar is
//! `weir_http`'s.

use http::{HeaderMap, HeaderValue, header};
use weir_http::{directive, list};

/// Whether `Cache-Control` carries `no-transform` (RFC 9111 §5.2.2.6):
/// an intermediary must not change the content (RFC 9110 §7.7).
pub(crate) fn no_transform(headers: &HeaderMap) -> bool {
    directive::has(headers.get_all(header::CACHE_CONTROL), "no-transform")
}

/// Adds `Accept-Encoding` to `Vary` unless it is there already or `Vary`
/// is `*` (RFC 9110 §12.5.5). Existing lines are joined into one.
pub(crate) fn add_vary_accept_encoding(headers: &mut HeaderMap) {
    let mut combined: Vec<u8> = Vec::new();
    for value in headers.get_all(header::VARY) {
        for member in list::members(value) {
            if member == b"*" || member.eq_ignore_ascii_case(b"accept-encoding") {
                return;
            }
            if !combined.is_empty() {
                combined.extend_from_slice(b", ");
            }
            combined.extend_from_slice(member);
        }
    }
    if combined.is_empty() {
        headers.insert(header::VARY, HeaderValue::from_static("Accept-Encoding"));
        return;
    }
    combined.extend_from_slice(b", Accept-Encoding");
    match HeaderValue::from_bytes(&combined) {
        Ok(value) => {
            headers.insert(header::VARY, value);
        }
        Err(_) => {
            headers.append(header::VARY, HeaderValue::from_static("Accept-Encoding"));
        }
    }
}

/// `"x"` → `W/"x"`; a weak tag stays; a malformed one is removed.
pub(crate) fn weaken_etag(headers: &mut HeaderMap) {
    let Some(etag) = headers.get(header::ETAG) else {
        return;
    };
    let tag = etag.as_bytes();
    if tag.starts_with(b"W/") {
        return;
    }
    let weak = if tag.starts_with(b"\"") {
        let mut weak = Vec::with_capacity(tag.len() + 2);
        weak.extend_from_slice(b"W/");
        weak.extend_from_slice(tag);
        HeaderValue::from_bytes(&weak).ok()
    } else {
        None
    };
    match weak {
        Some(weak) => headers.insert(header::ETAG, weak),
        None => headers.remove(header::ETAG),
    };
}
