//! Response header fields that several stages read or edit: list parsing
//! (RFC 9110 §5.6.1), `Cache-Control: no-transform`, `Vary`, `ETag`,
//! `Content-Length`.

use http::{HeaderMap, HeaderValue, header};

/// Whether `Cache-Control` carries `no-transform` (RFC 9111 §5.2.2.6):
/// an intermediary must not change the content (RFC 9110 §7.7).
pub(crate) fn no_transform(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::CACHE_CONTROL)
        .iter()
        .flat_map(|v| list_members(v.as_bytes()))
        .any(|directive| {
            let name = directive.split(|&b| b == b'=').next().unwrap_or_default();
            trim_ows(name).eq_ignore_ascii_case(b"no-transform")
        })
}

/// The `Content-Length`, if there is exactly one valid one.
pub(crate) fn content_length(headers: &HeaderMap) -> Option<u64> {
    let mut values = headers.get_all(header::CONTENT_LENGTH).iter();
    let first = values.next()?;
    if values.next().is_some() {
        return None;
    }
    first.to_str().ok()?.trim().parse().ok()
}

/// Adds `Accept-Encoding` to `Vary` unless it is there already or `Vary`
/// is `*` (RFC 9110 §12.5.5). Existing lines are joined into one.
pub(crate) fn add_vary_accept_encoding(headers: &mut HeaderMap) {
    let mut combined: Vec<u8> = Vec::new();
    for value in headers.get_all(header::VARY) {
        for member in list_members(value.as_bytes()) {
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

/// The non-empty members of a comma-separated field value, trimmed; commas
/// inside quoted strings do not split (RFC 9110 §5.6.1, §5.6.4).
pub(crate) fn list_members(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut rest = value;
    std::iter::from_fn(move || {
        loop {
            if rest.is_empty() {
                return None;
            }
            let mut quoted = false;
            let mut escaped = false;
            let mut end = rest.len();
            for (i, &b) in rest.iter().enumerate() {
                match b {
                    _ if escaped => escaped = false,
                    b'\\' if quoted => escaped = true,
                    b'"' => quoted = !quoted,
                    b',' if !quoted => {
                        end = i;
                        break;
                    }
                    _ => {}
                }
            }
            let member = trim_ows(&rest[..end]);
            rest = rest.get(end + 1..).unwrap_or_default();
            if !member.is_empty() {
                return Some(member);
            }
        }
    })
}

pub(crate) fn trim_ows(mut s: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = s {
        s = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = s {
        s = rest;
    }
    s
}
