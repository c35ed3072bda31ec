//! `compress::plan`: which responses are compressed, and the header edits.

use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, StatusCode};
use weir_transform::coding::Coding;
use weir_transform::compress::{CompressSettings, plan};

fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in pairs {
        map.append(
            HeaderName::from_bytes(name.as_bytes()).unwrap(),
            HeaderValue::from_str(value).unwrap(),
        );
    }
    map
}

/// An HTML page of 10 000 bytes, as an origin would send it.
fn page(extra: &[(&str, &str)]) -> HeaderMap {
    let mut map = headers(&[
        ("content-type", "text/html; charset=utf-8"),
        ("content-length", "10000"),
    ]);
    map.extend(headers(extra));
    map
}

/// Runs `plan` for a GET with `Accept-Encoding: gzip, deflate, br, zstd`.
fn run(status: u16, response: &mut HeaderMap) -> Option<Coding> {
    run_with(&CompressSettings::default(), &Method::GET, status, response)
}

fn run_with(
    settings: &CompressSettings,
    method: &Method,
    status: u16,
    response: &mut HeaderMap,
) -> Option<Coding> {
    let request = headers(&[("accept-encoding", "gzip, deflate, br, zstd")]);
    plan(
        settings,
        method,
        &request,
        StatusCode::from_u16(status).unwrap(),
        response,
    )
}

fn values(map: &HeaderMap, name: HeaderName) -> Vec<&str> {
    map.get_all(name)
        .iter()
        .map(|v| v.to_str().unwrap())
        .collect()
}

/// `plan` skips the response and leaves every header as it was.
fn assert_untouched(status: u16, method: &Method, response: HeaderMap) {
    let mut edited = response.clone();
    let got = run_with(&CompressSettings::default(), method, status, &mut edited);
    assert_eq!(got, None, "{method} {status} {response:?}");
    assert_eq!(edited, response, "{method} {status}: headers changed");
}

#[test]
fn compressing_edits_the_headers() {
    let mut h = page(&[
        ("accept-ranges", "bytes"),
        ("etag", "\"v1-abc\""),
        ("content-digest", "sha-256=:AAAA:"),
        ("repr-digest", "sha-256=:AAAA:"),
        ("cache-control", "public, max-age=60"),
        ("x-other", "kept"),
    ]);
    assert_eq!(run(200, &mut h), Some(Coding::Zstd));
    assert_eq!(values(&h, header::CONTENT_ENCODING), ["zstd"]);
    assert!(!h.contains_key(header::CONTENT_LENGTH));
    assert!(!h.contains_key(header::ACCEPT_RANGES));
    assert!(!h.contains_key("content-digest"));
    assert!(!h.contains_key("repr-digest"));
    assert_eq!(values(&h, header::ETAG), ["W/\"v1-abc\""]);
    assert_eq!(values(&h, header::VARY), ["Accept-Encoding"]);
    assert_eq!(values(&h, header::CACHE_CONTROL), ["public, max-age=60"]);
    assert_eq!(values(&h, HeaderName::from_static("x-other")), ["kept"]);
    assert_eq!(
        values(&h, header::CONTENT_TYPE),
        ["text/html; charset=utf-8"]
    );
}

#[test]
fn vary_is_appended_once() {
    let mut h = page(&[("vary", "Cookie")]);
    run(200, &mut h).unwrap();
    assert_eq!(values(&h, header::VARY), ["Cookie, Accept-Encoding"]);

    let mut h = page(&[("vary", "Cookie"), ("vary", "Origin")]);
    run(200, &mut h).unwrap();
    assert_eq!(
        values(&h, header::VARY),
        ["Cookie, Origin, Accept-Encoding"]
    );

    let mut h = page(&[("vary", "origin, accept-encoding")]);
    run(200, &mut h).unwrap();
    assert_eq!(values(&h, header::VARY), ["origin, accept-encoding"]);

    let mut h = page(&[("vary", "*")]);
    run(200, &mut h).unwrap();
    assert_eq!(values(&h, header::VARY), ["*"]);

    let mut h = page(&[("vary", "")]);
    run(200, &mut h).unwrap();
    assert_eq!(values(&h, header::VARY), ["Accept-Encoding"]);
}

#[test]
fn vary_is_added_when_identity_is_negotiated() {
    for accept in [None, Some("identity"), Some("deflate"), Some("")] {
        let mut request = HeaderMap::new();
        if let Some(accept) = accept {
            request.insert(
                header::ACCEPT_ENCODING,
                HeaderValue::from_str(accept).unwrap(),
            );
        }
        let mut h = page(&[("etag", "\"x\""), ("accept-ranges", "bytes")]);
        let got = plan(
            &CompressSettings::default(),
            &Method::GET,
            &request,
            StatusCode::OK,
            &mut h,
        );
        assert_eq!(got, None, "{accept:?}");
        assert_eq!(values(&h, header::VARY), ["Accept-Encoding"], "{accept:?}");
        // Everything else as it was: the content goes out as is.
        assert_eq!(values(&h, header::CONTENT_LENGTH), ["10000"]);
        assert_eq!(values(&h, header::ETAG), ["\"x\""]);
        assert_eq!(values(&h, header::ACCEPT_RANGES), ["bytes"]);
        assert!(!h.contains_key(header::CONTENT_ENCODING));
    }
}

#[test]
fn etags() {
    let mut h = page(&[("etag", "W/\"weak\"")]);
    run(200, &mut h).unwrap();
    assert_eq!(values(&h, header::ETAG), ["W/\"weak\""]);

    let mut h = page(&[("etag", "unquoted")]);
    run(200, &mut h).unwrap();
    assert!(
        !h.contains_key(header::ETAG),
        "a malformed tag cannot be weakened"
    );

    let mut h = page(&[]);
    run(200, &mut h).unwrap();
    assert!(!h.contains_key(header::ETAG));
}

#[test]
fn partial_content_is_untouched() {
    assert_untouched(
        206,
        &Method::GET,
        page(&[
            ("content-range", "bytes 0-9999/50000"),
            ("accept-ranges", "bytes"),
        ]),
    );
    // A Content-Range on another status is left alone too.
    assert_untouched(
        200,
        &Method::GET,
        page(&[("content-range", "bytes 0-9999/50000")]),
    );
}

#[test]
fn head_is_untouched() {
    assert_untouched(200, &Method::HEAD, page(&[("etag", "\"x\"")]));
}

#[test]
fn statuses_without_content_are_untouched() {
    for status in [100, 101, 103, 204, 205, 304] {
        assert_untouched(status, &Method::GET, page(&[]));
    }
}

#[test]
fn other_statuses_are_compressed() {
    for status in [200, 201, 203, 301, 400, 404, 410, 500, 503] {
        let mut h = page(&[]);
        assert_eq!(run(status, &mut h), Some(Coding::Zstd), "{status}");
    }
}

#[test]
fn already_encoded_is_untouched() {
    assert_untouched(200, &Method::GET, page(&[("content-encoding", "gzip")]));
    assert_untouched(
        200,
        &Method::GET,
        page(&[("content-encoding", "identity, br")]),
    );
    assert_untouched(200, &Method::GET, page(&[("content-encoding", "x-custom")]));
    // `identity` is no coding: compressed, and replaced.
    let mut h = page(&[("content-encoding", "Identity")]);
    assert_eq!(run(200, &mut h), Some(Coding::Zstd));
    assert_eq!(values(&h, header::CONTENT_ENCODING), ["zstd"]);
}

#[test]
fn content_types() {
    for skipped in [
        "image/png",
        "IMAGE/JPEG",
        "image/webp; q=1",
        "video/mp4",
        "audio/ogg",
        "font/woff2",
        "application/zip",
        "application/gzip",
        "application/zstd",
        "application/octet-stream",
    ] {
        let h = page(&[]);
        let mut h2 = h.clone();
        h2.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_str(skipped).unwrap(),
        );
        assert_untouched(200, &Method::GET, h2);
    }
    for compressed in [
        "text/html",
        "TEXT/HTML; charset=UTF-8",
        "text/plain",
        "text/css",
        "text/event-stream",
        "application/json",
        "application/javascript",
        "application/wasm",
        "image/svg+xml",
        "image/x-icon",
        "font/ttf",
    ] {
        let mut h = page(&[]);
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_str(compressed).unwrap(),
        );
        assert_eq!(run(200, &mut h), Some(Coding::Zstd), "{compressed}");
    }
    // No Content-Type: unknown content, not compressed.
    let mut h = page(&[]);
    h.remove(header::CONTENT_TYPE);
    assert_untouched(200, &Method::GET, h);
}

#[test]
fn lengths() {
    let with_length = |len: &str| {
        let mut h = page(&[]);
        h.insert(header::CONTENT_LENGTH, HeaderValue::from_str(len).unwrap());
        h
    };
    assert_untouched(200, &Method::GET, with_length("0"));
    assert_untouched(200, &Method::GET, with_length("255"));
    assert_eq!(run(200, &mut with_length("256")), Some(Coding::Zstd));
    // Streamed (no length): compressed.
    let mut h = page(&[]);
    h.remove(header::CONTENT_LENGTH);
    assert_eq!(run(200, &mut h), Some(Coding::Zstd));

    let settings = CompressSettings {
        min_length: 0,
        ..CompressSettings::default()
    };
    assert_eq!(
        run_with(&settings, &Method::GET, 200, &mut with_length("1")),
        Some(Coding::Zstd)
    );
}

#[test]
fn a_list_of_identical_lengths_is_that_length() {
    // RFC 9110 §8.6 lets a recipient take `N, N` as N, and hyper frames the
    // body by it; since weir-http, min_length applies to it too (before, the
    // length counted as unknown and the response was compressed).
    let with_length = |len: &'static str| {
        let mut h = page(&[]);
        h.insert(header::CONTENT_LENGTH, HeaderValue::from_static(len));
        h
    };
    assert_untouched(200, &Method::GET, with_length("100, 100"));
    assert_eq!(run(200, &mut with_length("300, 300")), Some(Coding::Zstd));
    // Differing values are no length: compressed like a streamed body.
    assert_eq!(run(200, &mut with_length("100, 300")), Some(Coding::Zstd));
}

#[test]
fn no_transform_is_untouched() {
    assert_untouched(
        200,
        &Method::GET,
        page(&[("cache-control", "public, no-transform")]),
    );
    assert_untouched(
        200,
        &Method::GET,
        page(&[("cache-control", "No-Transform")]),
    );
    assert_untouched(
        200,
        &Method::GET,
        page(&[
            ("cache-control", "max-age=3"),
            ("cache-control", "no-transform"),
        ]),
    );
    // Inside a quoted value it is not the directive.
    let mut h = page(&[("cache-control", "private=\"x, no-transform\"")]);
    assert_eq!(run(200, &mut h), Some(Coding::Zstd));
}

#[test]
fn no_codings_means_no_compression() {
    let settings = CompressSettings {
        codings: Vec::new(),
        ..CompressSettings::default()
    };
    let original = page(&[]);
    let mut h = original.clone();
    assert_eq!(run_with(&settings, &Method::GET, 200, &mut h), None);
    assert_eq!(h, original, "not even Vary: the response never varies");
}

#[test]
fn post_responses_are_compressed() {
    let mut h = page(&[]);
    assert_eq!(
        run_with(&CompressSettings::default(), &Method::POST, 200, &mut h),
        Some(Coding::Zstd)
    );
}
