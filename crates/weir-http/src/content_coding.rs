//! Content codings, `Content-Encoding = #content-coding` (RFC 9110
//! §8.4): how the representation's bytes were encoded (`gzip`, `br`).
//!
//! Coding names are tokens, case-insensitive (RFC 9110 §8.4.1);
//! `identity` means "no encoding" (RFC 9110 §12.5.3).

use http::{HeaderMap, header};

use crate::list::members_all;

/// Every coding named by the `Content-Encoding` field lines, in the order
/// they were applied, as written (empty list elements skipped).
///
/// ```
/// use http::{HeaderMap, HeaderValue};
/// use weir_http::content_coding::codings;
/// let mut h = HeaderMap::new();
/// h.insert("content-encoding", HeaderValue::from_static("gzip, , br"));
/// assert_eq!(codings(&h).collect::<Vec<_>>(), [&b"gzip"[..], b"br"]);
/// ```
pub fn codings(headers: &HeaderMap) -> impl Iterator<Item = &[u8]> {
    members_all(headers.get_all(header::CONTENT_ENCODING))
}

/// Whether the content is not encoded: no `Content-Encoding`, or only
/// `identity` codings (any case).
///
/// ```
/// use http::{HeaderMap, HeaderValue};
/// use weir_http::content_coding::is_identity;
/// let mut h = HeaderMap::new();
/// assert!(is_identity(&h));
/// h.insert("content-encoding", HeaderValue::from_static("Identity"));
/// assert!(is_identity(&h));
/// h.append("content-encoding", HeaderValue::from_static("gzip"));
/// assert!(!is_identity(&h));
/// ```
pub fn is_identity(headers: &HeaderMap) -> bool {
    codings(headers).all(|c| c.eq_ignore_ascii_case(b"identity"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn ce(lines: &[&'static str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for l in lines {
            h.append(header::CONTENT_ENCODING, HeaderValue::from_static(l));
        }
        h
    }

    #[test]
    fn identity_or_not() {
        assert!(is_identity(&ce(&[])));
        assert!(is_identity(&ce(&[""])));
        assert!(is_identity(&ce(&[" , identity ,IDENTITY"])));
        assert!(!is_identity(&ce(&["gzip"])));
        assert!(!is_identity(&ce(&["identity", "br"])));
        assert!(
            !is_identity(&ce(&["identity;q=1"])),
            "codings take no parameters"
        );
        assert!(!is_identity(&ce(&["\"identity\""])));
    }

    #[test]
    fn codings_across_lines() {
        let h = ce(&["gzip", "x-custom, br"]);
        assert_eq!(
            codings(&h).collect::<Vec<_>>(),
            [&b"gzip"[..], b"x-custom", b"br"]
        );
    }
}
