//! Unit tests of the request and response head rules (`headers.rs`).

use super::*;

fn map(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, v) in pairs {
        h.append(
            HeaderName::from_bytes(k.as_bytes()).expect("name"),
            HeaderValue::from_str(v).expect("value"),
        );
    }
    h
}

#[test]
fn connection_named_fields_are_removed() {
    let mut h = map(&[
        ("connection", "close, X-Secret"),
        ("connection", "x-other"),
        ("x-secret", "1"),
        ("x-other", "2"),
        ("keep-alive", "timeout=5"),
        ("upgrade", "websocket"),
        ("x-kept", "3"),
    ]);
    assert!(!remove_hop_by_hop(&mut h));
    assert_eq!(h.len(), 1, "{h:?}");
    assert!(h.contains_key("x-kept"));
}

#[test]
fn transfer_encoding_drops_content_length() {
    let mut h = map(&[("transfer-encoding", "chunked"), ("content-length", "5")]);
    remove_hop_by_hop(&mut h);
    assert!(h.is_empty(), "{h:?}");
    let mut h = map(&[("content-length", "5"), ("content-length", "5")]);
    remove_hop_by_hop(&mut h);
    assert_eq!(h.get_all("content-length").iter().count(), 1);
}

#[test]
fn te_trailers_is_reported_and_removed() {
    let mut h = map(&[("te", "gzip, trailers")]);
    assert!(remove_hop_by_hop(&mut h));
    assert!(!h.contains_key("te"));
    for zero in ["trailers;q=0", "trailers; q=0.0", "trailers;Q=0.000"] {
        let mut h = map(&[("te", zero)]);
        assert!(!remove_hop_by_hop(&mut h), "{zero}");
    }
    let mut h = map(&[("te", "trailers;q=0.5")]);
    assert!(remove_hop_by_hop(&mut h));
}

#[test]
fn te_and_connection_are_read_with_the_field_grammar() {
    // A `trailers` inside a quoted parameter is not a member (before
    // weir-http, the comma split the quoted string).
    let mut h = map(&[("te", "gzip;x=\"a, trailers\"")]);
    assert!(!remove_hop_by_hop(&mut h));
    // A weight that is not a qvalue voids the member (it counted as
    // non-zero before).
    for malformed in ["trailers;q=abc", "trailers;q=2", "trailers;q"] {
        let mut h = map(&[("te", malformed)]);
        assert!(!remove_hop_by_hop(&mut h), "{malformed}");
    }
    // A `Connection` line with a byte above 0x7F was skipped whole
    // before, so the fields it named were forwarded.
    let mut h = map(&[("x-secret", "1"), ("x-kept", "2")]);
    h.append(
        header::CONNECTION,
        HeaderValue::from_bytes(b"x-secret, x-caf\xe9").expect("value"),
    );
    remove_hop_by_hop(&mut h);
    assert!(!h.contains_key("x-secret"), "{h:?}");
    assert!(h.contains_key("x-kept"));
}

#[test]
fn untrusted_forwarded_headers_are_replaced() {
    let mut h = map(&[
        ("x-forwarded-for", "6.6.6.6"),
        ("x-forwarded-proto", "https"),
        ("forwarded", "for=6.6.6.6"),
        ("x-real-ip", "6.6.6.6"),
        ("true-client-ip", "6.6.6.6"),
    ]);
    set_forwarded(
        &mut h,
        Peer {
            addr: &PeerAddr::new("10.0.0.1".parse().expect("ip")),
            trusted: false,
            proto: "http",
            host: Some("a.test"),
        },
    );
    assert_eq!(h["x-forwarded-for"], "10.0.0.1");
    assert_eq!(h["x-forwarded-proto"], "http");
    assert_eq!(h["x-forwarded-host"], "a.test");
    assert!(!h.contains_key("forwarded"));
    assert_eq!(h["x-real-ip"], "10.0.0.1");
    assert!(!h.contains_key("true-client-ip"));
}

#[test]
fn trusted_forwarded_for_is_appended() {
    let mut h = map(&[
        ("x-forwarded-for", "1.1.1.1"),
        ("x-forwarded-for", "2.2.2.2"),
        ("x-forwarded-proto", "https"),
        ("x-real-ip", "1.1.1.1"),
        ("true-client-ip", "1.1.1.1"),
    ]);
    set_forwarded(
        &mut h,
        Peer {
            addr: &PeerAddr::new("::ffff:10.0.0.1".parse().expect("ip")),
            trusted: true,
            proto: "http",
            host: None,
        },
    );
    assert_eq!(h["x-forwarded-for"], "1.1.1.1, 2.2.2.2, 10.0.0.1");
    assert_eq!(h["x-forwarded-proto"], "https");
    assert_eq!(h["x-real-ip"], "1.1.1.1");
    assert_eq!(h["true-client-ip"], "1.1.1.1");
}

#[test]
fn via_is_appended_with_the_received_version() {
    let mut h = map(&[("via", "1.0 fred")]);
    append_via(&mut h, Version::HTTP_2, "weir");
    let all: Vec<_> = h.get_all("via").iter().collect();
    assert_eq!(all, ["1.0 fred", "2 weir"]);
}

#[test]
fn trailers_cannot_carry_routing_or_forwarding_fields() {
    let mut t = map(&[
        ("x-forwarded-for", "6.6.6.6"),
        ("host", "evil"),
        ("content-length", "1"),
        ("x-sum", "1"),
    ]);
    sanitize_trailers(&mut t);
    assert_eq!(t.len(), 1, "{t:?}");
    assert!(t.contains_key("x-sum"));
}

#[test]
fn h2_cookies_are_joined() {
    let mut h = map(&[("cookie", "a=1"), ("cookie", "b=2")]);
    join_cookies(&mut h);
    assert_eq!(h["cookie"], "a=1; b=2");
    assert_eq!(h.get_all("cookie").iter().count(), 1);
}

fn upstream_head(status: u16, fields: &[(&str, &str)]) -> http::response::Parts {
    let mut b = http::Response::builder()
        .status(status)
        .version(Version::HTTP_10);
    for (k, v) in fields {
        b = b.header(*k, *v);
    }
    b.body(()).expect("response").into_parts().0
}

#[test]
fn the_response_head_filter_cleans_what_it_forwards() {
    let mut head = upstream_head(
        200,
        &[
            ("connection", "x-secret"),
            ("x-secret", "1"),
            ("keep-alive", "timeout=5"),
            ("content-length", "5"),
            ("x-weir-fleet-refused", "token"),
            ("x-weir-fleet-peek", "hit"),
        ],
    );
    response_head(&mut head, &Via::new("weir")).expect("forwardable");
    assert!(head.headers.get("x-secret").is_none());
    assert!(head.headers.get("x-weir-fleet-refused").is_none());
    assert!(head.headers.get("x-weir-fleet-peek").is_none());
    assert!(head.headers.get("keep-alive").is_none());
    assert_eq!(
        head.headers.get("content-length").map(|v| v.as_bytes()),
        Some(&b"5"[..])
    );
    assert_eq!(
        head.headers.get("via").map(|v| v.as_bytes()),
        Some(&b"1.0 weir"[..])
    );
    assert_eq!(head.version, Version::default());
    let mut empty = upstream_head(204, &[("content-length", "0")]);
    response_head(&mut empty, &Via::new("weir")).expect("forwardable");
    assert!(
        empty.headers.get("content-length").is_none(),
        "204 carries no length"
    );
}

#[test]
fn the_response_head_filter_refuses_an_unasked_101_and_unknown_codings() {
    let mut switching = upstream_head(101, &[("upgrade", "websocket")]);
    assert!(response_head(&mut switching, &Via::new("weir")).is_err());
    for te in ["gzip", "gzip, chunked", "chunked, identity"] {
        let mut coded = upstream_head(200, &[("transfer-encoding", te)]);
        assert!(
            response_head(&mut coded, &Via::new("weir")).is_err(),
            "{te}"
        );
    }
    let mut two_lines = upstream_head(
        200,
        &[
            ("transfer-encoding", "chunked"),
            ("transfer-encoding", "gzip"),
        ],
    );
    assert!(
        response_head(&mut two_lines, &Via::new("weir")).is_err(),
        "every line counts"
    );
    let mut chunked = upstream_head(200, &[("transfer-encoding", "chunked")]);
    assert!(response_head(&mut chunked, &Via::new("weir")).is_ok());
}
