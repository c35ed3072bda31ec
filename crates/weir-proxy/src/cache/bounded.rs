//! Response heads as the cache policy sees them: every delta-seconds value
//! at most 2^31 (RFC 9111 §1.2.2).
//!
//! `http-cache-semantics` adds `Age` and the `max-age`/`s-maxage` seconds
//! to durations and times without checking: an upstream that sends
//! `Age: 18446744073709551615` or `max-age=18446744073709551615` (both
//! valid delta-seconds) would make those sums overflow and panic, in a
//! fill or in every later lookup of the key. RFC 9111 §1.2.2 says what to
//! do instead: a value past what the cache can represent is taken as
//! 2147483648 (2^31). The policy is built from such a capped copy of the
//! head; the fields forwarded and stored stay as the upstream sent them.

use http::header::{self, HeaderValue};
use http::{HeaderMap, StatusCode};
use http_cache_semantics::{AfterResponse, CachePolicy};
use weir_http::delta::{self, MAX_DELTA_SECONDS};
use weir_http::ows::trim_ows;
use weir_http::{directive, list, quoted};

/// The policy for the response `head` to `view`.
pub(crate) fn policy(view: &http::request::Parts, head: &http::response::Parts) -> CachePolicy {
    match capped(head.status, &head.headers) {
        Some(head) => CachePolicy::new(view, &head),
        None => CachePolicy::new(view, head),
    }
}

/// `stored` updated by `resp`, the answer to a revalidation of it
/// (`http-cache-semantics`' `after_response`).
pub(crate) fn after_response<B>(
    stored: &CachePolicy,
    view: &http::request::Parts,
    resp: &http::Response<B>,
    now: std::time::SystemTime,
) -> AfterResponse {
    match capped(resp.status(), resp.headers()) {
        Some(head) => stored.after_response(view, &head, now),
        None => stored.after_response(view, resp, now),
    }
}

/// A copy of the head with `Age` and the numeric `Cache-Control` arguments
/// capped at [`MAX_DELTA_SECONDS`]; `None` when none is past it.
fn capped(status: StatusCode, headers: &HeaderMap) -> Option<http::response::Parts> {
    // `Age: "5"` is not valid, but has always been read like `Age: 5`.
    let age_too_big = |v: &HeaderValue| too_big(&quoted::unquote(trim_ows(v.as_bytes())));
    let argument_too_big = |d: &directive::Directive<'_>| d.argument().is_some_and(|a| too_big(&a));
    let over = headers.get_all(header::AGE).iter().any(age_too_big)
        || directive::directives(headers.get_all(header::CACHE_CONTROL))
            .any(|d| argument_too_big(&d));
    if !over {
        return None;
    }
    let mut out = headers.clone();
    out.remove(header::AGE);
    for v in headers.get_all(header::AGE) {
        let capped = if age_too_big(v) {
            HeaderValue::from(MAX_DELTA_SECONDS)
        } else {
            v.clone()
        };
        out.append(header::AGE, capped);
    }
    out.remove(header::CACHE_CONTROL);
    for v in headers.get_all(header::CACHE_CONTROL) {
        if !list::members(v).any(|m| argument_too_big(&directive::parse(m))) {
            out.append(header::CACHE_CONTROL, v.clone());
            continue;
        }
        let mut text = Vec::with_capacity(v.len());
        for member in list::members(v) {
            if !text.is_empty() {
                text.extend_from_slice(b", ");
            }
            let d = directive::parse(member);
            if argument_too_big(&d) {
                text.extend_from_slice(d.name());
                text.extend_from_slice(format!("={MAX_DELTA_SECONDS}").as_bytes());
            } else {
                text.extend_from_slice(member);
            }
        }
        match HeaderValue::from_bytes(&text) {
            Ok(value) => out.append(header::CACHE_CONTROL, value),
            Err(_) => out.append(header::CACHE_CONTROL, v.clone()),
        };
    }
    let mut head = http::Response::new(()).into_parts().0;
    head.status = status;
    head.headers = out;
    Some(head)
}

/// Whether `v` is a delta-seconds value past [`MAX_DELTA_SECONDS`]: one
/// the cache takes as 2^31, but whose exact value is larger (or does not
/// fit a `u64`).
fn too_big(v: &[u8]) -> bool {
    delta::parse_capped(v) == Some(MAX_DELTA_SECONDS) && delta::parse(v) != Some(MAX_DELTA_SECONDS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn delta_seconds_past_2_pow_31_are_taken_as_2_pow_31() {
        let h = fields(&[
            ("age", "18446744073709551615"),
            (
                "cache-control",
                "public, max-age=99999999999999999999999, s-maxage=\"4294967296\"",
            ),
            ("cache-control", "no-cache=\"a, b\", stale-if-error=60"),
        ]);
        let head = capped(StatusCode::OK, &h).expect("capped");
        assert_eq!(head.headers["age"], "2147483648");
        let cc: Vec<_> = head.headers.get_all("cache-control").iter().collect();
        assert_eq!(
            cc,
            [
                "public, max-age=2147483648, s-maxage=2147483648",
                "no-cache=\"a, b\", stale-if-error=60"
            ]
        );
        let ok = fields(&[("age", "2147483648"), ("cache-control", "max-age=60")]);
        assert!(capped(StatusCode::OK, &ok).is_none());
    }

    #[test]
    fn numbers_inside_quoted_strings_are_not_capped() {
        // Before weir-http the comma in the quoted string split it, and the
        // `max-age` inside was rewritten.
        let h = fields(&[(
            "cache-control",
            "private=\"a, max-age=99999999999\", max-age=60",
        )]);
        assert!(capped(StatusCode::OK, &h).is_none());
        let h = fields(&[(
            "cache-control",
            "private=\"a, max-age=99999999999\", max-age=99999999999",
        )]);
        let head = capped(StatusCode::OK, &h).expect("capped");
        assert_eq!(
            head.headers["cache-control"],
            "private=\"a, max-age=99999999999\", max-age=2147483648"
        );
    }
}
