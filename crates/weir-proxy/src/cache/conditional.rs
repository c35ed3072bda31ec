//! A client's own conditional `GET`/`HEAD` evaluated against the response
//! the cache would serve (RFC 9111 §4.3.2), and the `304 Not Modified` it
//! then gets (RFC 9110 §15.4.5).
//!
//! Only `If-None-Match` (weak comparison, `*` too, RFC 9110 §13.1.2) and
//! `If-Modified-Since` (RFC 9110 §13.1.3, ignored when `If-None-Match` is
//! present) are evaluated, and only against a `200` response.

use std::time::SystemTime;

use http::header::{self, HeaderName};
use http::{HeaderMap, StatusCode};
use weir_http::etag::{self, EntityTag};

/// The fields a `304` carries from the response it stands for (RFC 9110
/// §15.4.5: those a `200` would have had; `Last-Modified` as well).
static NOT_MODIFIED_FIELDS: [HeaderName; 7] = [
    header::CACHE_CONTROL,
    header::CONTENT_LOCATION,
    header::DATE,
    header::ETAG,
    header::EXPIRES,
    header::LAST_MODIFIED,
    header::VARY,
];

/// Whether the client's conditional fields in `request` say it already
/// has the response (`status`, `stored` fields) the cache would serve, so
/// it gets a `304` instead (RFC 9110 §13.2.2 steps 3 and 4).
///
/// `If-None-Match` matches when it is `*` or lists an entity-tag equal to
/// the stored `ETag` under the weak comparison (`W/"a"` equals `"a"`).
/// Without `If-None-Match`, a valid `If-Modified-Since` (one HTTP-date)
/// matches when the stored `Last-Modified` — else its `Date` (RFC 9111
/// §4.3.2) — is not later. Anything else, a malformed field included, is
/// no match: the client gets the full response.
pub(crate) fn not_modified(request: &HeaderMap, status: StatusCode, stored: &HeaderMap) -> bool {
    if status != StatusCode::OK {
        return false;
    }
    if request.contains_key(header::IF_NONE_MATCH) {
        return if_none_match_matches(request, stored);
    }
    let mut ims = request.get_all(header::IF_MODIFIED_SINCE).iter();
    let (Some(ims), None) = (ims.next(), ims.next()) else {
        return false;
    };
    let Some(since) = http_date(ims) else {
        return false;
    };
    let modified = stored
        .get(header::LAST_MODIFIED)
        .or_else(|| stored.get(header::DATE))
        .and_then(http_date);
    modified.is_some_and(|m| m <= since)
}

/// `If-None-Match` (all its field lines) against the stored `ETag`.
fn if_none_match_matches(request: &HeaderMap, stored: &HeaderMap) -> bool {
    let mut values = request.get_all(header::IF_NONE_MATCH).iter();
    if let (Some(only), None) = (values.next(), values.next())
        && etag::is_any(only)
    {
        return true;
    }
    let Some(etag) = stored.get(header::ETAG).and_then(EntityTag::parse) else {
        return false;
    };
    request
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .any(|v| etag::list(v).any(|tag| tag.is_ok_and(|t| t.weak_eq(&etag))))
}

fn http_date(value: &http::HeaderValue) -> Option<SystemTime> {
    httpdate::parse_http_date(value.to_str().ok()?.trim()).ok()
}

/// The fields of a `304` standing for a response with `stored` fields.
pub(crate) fn not_modified_fields(stored: &HeaderMap) -> HeaderMap {
    let mut out = HeaderMap::new();
    for name in &NOT_MODIFIED_FIELDS {
        for v in stored.get_all(name) {
            out.append(name.clone(), v.clone());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn fields(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_static(v));
        }
        h
    }

    const LM: &str = "Tue, 15 Nov 1994 08:12:31 GMT";

    fn stored() -> HeaderMap {
        fields(&[("etag", "\"v1\""), ("last-modified", LM)])
    }

    fn check(req: &[(&'static str, &'static str)]) -> bool {
        not_modified(&fields(req), StatusCode::OK, &stored())
    }

    #[test]
    fn if_none_match_uses_the_weak_comparison() {
        assert!(check(&[("if-none-match", "\"v1\"")]));
        assert!(check(&[("if-none-match", "W/\"v1\"")]));
        assert!(check(&[("if-none-match", "\"a\", W/\"v1\"")]));
        assert!(check(&[
            ("if-none-match", "\"a\""),
            ("if-none-match", "\"v1\"")
        ]));
        assert!(check(&[("if-none-match", " * ")]));
        assert!(!check(&[("if-none-match", "\"v2\"")]));
        assert!(!check(&[("if-none-match", "v1")]), "unquoted is malformed");
        // A comma inside an opaque tag is not a separator.
        assert!(!check(&[("if-none-match", "\"v1,x\"")]));
        let weak_stored = fields(&[("etag", "W/\"v1\"")]);
        let req = fields(&[("if-none-match", "\"v1\"")]);
        assert!(not_modified(&req, StatusCode::OK, &weak_stored));
        // No ETag stored: only `*` matches.
        let none = fields(&[("last-modified", LM)]);
        assert!(!not_modified(&req, StatusCode::OK, &none));
    }

    #[test]
    fn if_modified_since_only_without_if_none_match() {
        assert!(check(&[("if-modified-since", LM)]));
        assert!(check(&[(
            "if-modified-since",
            "Wed, 16 Nov 1994 08:12:31 GMT"
        )]));
        assert!(!check(&[(
            "if-modified-since",
            "Mon, 14 Nov 1994 08:12:31 GMT"
        )]));
        assert!(!check(&[("if-modified-since", "yesterday")]));
        assert!(!check(&[
            ("if-modified-since", LM),
            ("if-modified-since", LM)
        ]));
        // RFC 9110 §13.1.3: ignored next to If-None-Match.
        assert!(!check(&[
            ("if-none-match", "\"v2\""),
            ("if-modified-since", LM)
        ]));
        // No Last-Modified: the stored Date stands in (RFC 9111 §4.3.2).
        let dated = fields(&[("date", LM)]);
        let req = fields(&[("if-modified-since", LM)]);
        assert!(not_modified(&req, StatusCode::OK, &dated));
    }

    #[test]
    fn only_a_200_is_answered_304() {
        let req = fields(&[("if-none-match", "*")]);
        assert!(!not_modified(&req, StatusCode::NOT_FOUND, &stored()));
    }

    #[test]
    fn a_304_keeps_the_listed_fields_only() {
        let all = fields(&[
            ("etag", "\"v1\""),
            ("cache-control", "max-age=60"),
            ("content-length", "5"),
            ("content-type", "text/plain"),
            ("vary", "accept-encoding"),
            ("date", LM),
        ]);
        let out = not_modified_fields(&all);
        assert_eq!(out.len(), 4);
        assert!(!out.contains_key("content-length"));
        assert_eq!(out["etag"], "\"v1\"");
    }
}
