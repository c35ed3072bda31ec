//! `html::rewritable`: which responses the html-rewrite stage may touch.

use http::HeaderMap;
use http::header::{CONTENT_ENCODING, CONTENT_TYPE, HeaderValue};
use weir_transform::html::rewritable;

fn headers(content_type: &[&str], content_encoding: &[&str]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for v in content_type {
        h.append(CONTENT_TYPE, HeaderValue::from_str(v).unwrap());
    }
    for v in content_encoding {
        h.append(CONTENT_ENCODING, HeaderValue::from_str(v).unwrap());
    }
    h
}

fn name(content_type: &[&str], content_encoding: &[&str]) -> Option<&'static str> {
    rewritable(&headers(content_type, content_encoding)).map(|e| e.name())
}

#[test]
fn html_with_and_without_charset() {
    let table: &[(&str, Option<&str>)] = &[
        ("text/html", Some("UTF-8")),
        ("TEXT/HTML", Some("UTF-8")),
        ("text/html;charset=utf-8", Some("UTF-8")),
        ("text/html; charset=UTF-8", Some("UTF-8")),
        ("Text/Html ; Charset=\"utf-8\"", Some("UTF-8")),
        ("text/html; charset=windows-1252", Some("windows-1252")),
        // The WHATWG Encoding Standard maps these labels to windows-1252.
        ("text/html; charset=ISO-8859-1", Some("windows-1252")),
        ("text/html; charset=latin1", Some("windows-1252")),
        ("text/html; charset=us-ascii", Some("windows-1252")),
        ("text/html; charset=shift_jis", Some("Shift_JIS")),
        ("text/html; charset=koi8-r", Some("KOI8-R")),
        ("text/html; charset=gbk", Some("GBK")),
        (
            "text/html; q=\"a;charset=koi8-r\"; charset=iso-8859-2",
            Some("ISO-8859-2"),
        ),
        // The first charset parameter counts.
        (
            "text/html; charset=iso-8859-2; charset=utf-8",
            Some("ISO-8859-2"),
        ),
        // An empty charset is no charset.
        ("text/html; charset=", Some("UTF-8")),
        ("text/html; foo=bar", Some("UTF-8")),
        // Not ASCII-compatible: lol_html cannot parse them.
        ("text/html; charset=utf-16", None),
        ("text/html; charset=UTF-16LE", None),
        ("text/html; charset=utf-16be", None),
        ("text/html; charset=iso-2022-jp", None),
        // A label for the `replacement` encoding.
        ("text/html; charset=iso-2022-kr", None),
        // Unknown labels.
        ("text/html; charset=klingon", None),
        // Not HTML.
        ("text/plain", None),
        ("application/xhtml+xml", None),
        ("text/htmlx", None),
        ("text/html-sandboxed", None),
        ("application/json; charset=utf-8", None),
        ("", None),
    ];
    for (content_type, expected) in table {
        let mut h = HeaderMap::new();
        h.insert(CONTENT_TYPE, HeaderValue::from_str(content_type).unwrap());
        assert_eq!(
            rewritable(&h).map(|e| e.name()),
            *expected,
            "{content_type:?}"
        );
    }
}

#[test]
fn no_or_several_content_types() {
    assert_eq!(name(&[], &[]), None);
    assert_eq!(name(&["text/html", "text/html"], &[]), None);
}

#[test]
fn content_encoding_other_than_identity() {
    assert_eq!(name(&["text/html"], &["identity"]), Some("UTF-8"));
    assert_eq!(name(&["text/html"], &["Identity"]), Some("UTF-8"));
    assert_eq!(name(&["text/html"], &["identity, identity"]), Some("UTF-8"));
    assert_eq!(name(&["text/html"], &["gzip"]), None);
    assert_eq!(name(&["text/html"], &["br"]), None);
    assert_eq!(name(&["text/html"], &["zstd"]), None);
    assert_eq!(name(&["text/html"], &["identity, gzip"]), None);
    assert_eq!(name(&["text/html"], &["identity", "gzip"]), None);
    assert_eq!(name(&["text/html"], &["x-unknown"]), None);
}

#[test]
fn non_utf8_header_values() {
    let mut h = HeaderMap::new();
    h.insert(
        CONTENT_TYPE,
        HeaderValue::from_bytes(b"text/html; charset=\xe9").unwrap(),
    );
    assert_eq!(rewritable(&h), None);
    let mut h = HeaderMap::new();
    h.insert(CONTENT_TYPE, HeaderValue::from_static("text/html"));
    h.insert(
        CONTENT_ENCODING,
        HeaderValue::from_bytes(b"identit\xe9").unwrap(),
    );
    assert_eq!(rewritable(&h), None);
}
