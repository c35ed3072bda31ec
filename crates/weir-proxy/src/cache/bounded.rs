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

/// The largest delta-seconds value the cache takes (RFC 9111 §1.2.2).
pub(crate) const MAX_DELTA_SECONDS: u64 = 1 << 31;

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
    let too_big = |v: &str| {
        let v = v.trim().trim_matches('"');
        !v.is_empty()
            && v.bytes().all(|b| b.is_ascii_digit())
            && v.parse::<u64>().map_or(true, |n| n > MAX_DELTA_SECONDS)
    };
    let over = headers
        .get_all(header::AGE)
        .iter()
        .chain(headers.get_all(header::CACHE_CONTROL))
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|d| too_big(d.split_once('=').map_or(d, |(_, v)| v)));
    if !over {
        return None;
    }
    let max = MAX_DELTA_SECONDS.to_string();
    let mut out = headers.clone();
    out.remove(header::AGE);
    for v in headers.get_all(header::AGE) {
        let capped = match v.to_str() {
            Ok(s) if too_big(s) => HeaderValue::from(MAX_DELTA_SECONDS),
            _ => v.clone(),
        };
        out.append(header::AGE, capped);
    }
    out.remove(header::CACHE_CONTROL);
    for v in headers.get_all(header::CACHE_CONTROL) {
        let Ok(text) = v.to_str() else {
            out.append(header::CACHE_CONTROL, v.clone());
            continue;
        };
        let directives: Vec<String> = text
            .split(',')
            .map(|d| match d.split_once('=') {
                Some((name, arg)) if too_big(arg) => format!("{name}={max}"),
                _ => d.to_owned(),
            })
            .collect();
        match HeaderValue::try_from(directives.join(",")) {
            Ok(value) => out.append(header::CACHE_CONTROL, value),
            Err(_) => out.append(header::CACHE_CONTROL, v.clone()),
        };
    }
    let mut head = http::Response::new(()).into_parts().0;
    head.status = status;
    head.headers = out;
    Some(head)
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
}
