//! Request identity: `X-Request-Id` (kept from a trusted peer, else made
//! up) and a W3C `traceparent` started when the request has none (W3C
//! Trace Context §3.2).

use http::{HeaderMap, HeaderName, HeaderValue};

/// `X-Request-Id`: forwarded upstream and to fragments, returned to the
/// client, written in the access log.
pub const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
/// `traceparent` (W3C Trace Context).
pub const TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");

/// Longest `X-Request-Id` kept from a trusted peer, in bytes.
const MAX_KEPT_ID: usize = 200;

/// Sets the request's `X-Request-Id` and returns it: the one a trusted
/// peer sent (one field line of visible ASCII, at most 200 bytes), else a
/// new UUID v7 (time-ordered, RFC 9562 §5.7), replacing whatever an
/// untrusted client sent. Starts a `traceparent` when there is no valid
/// one.
pub fn identify(headers: &mut HeaderMap, trusted: bool) -> HeaderValue {
    let kept = trusted
        .then(|| single(headers, &X_REQUEST_ID))
        .flatten()
        .filter(|v| {
            !v.is_empty()
                && v.len() <= MAX_KEPT_ID
                && v.as_bytes().iter().all(|b| b.is_ascii_graphic())
        });
    let id = match kept {
        Some(v) => v,
        None => {
            let mut text = [0u8; uuid::fmt::Hyphenated::LENGTH];
            let text = uuid::Uuid::now_v7().hyphenated().encode_lower(&mut text);
            let v = HeaderValue::from_str(text).unwrap_or(HeaderValue::from_static("-"));
            headers.insert(X_REQUEST_ID, v.clone());
            v
        }
    };
    if !single(headers, &TRACEPARENT).is_some_and(|v| valid_traceparent(v.as_bytes())) {
        headers.insert(TRACEPARENT, new_traceparent());
    }
    id
}

/// The value of `name` when it has exactly one field line.
fn single(headers: &HeaderMap, name: &HeaderName) -> Option<HeaderValue> {
    let mut all = headers.get_all(name).iter();
    match (all.next(), all.next()) {
        (Some(v), None) => Some(v.clone()),
        _ => None,
    }
}

/// A version-00 `traceparent`: `00-<32 hex trace-id>-<16 hex parent-id>-<2
/// hex flags>`, lower-case, with neither id all zeros (W3C Trace Context
/// §3.2.2). A later version's longer value is taken by its first 55 bytes
/// followed by `-`, as the spec asks.
fn valid_traceparent(v: &[u8]) -> bool {
    if v.len() < 55 || (v.len() > 55 && (v.starts_with(b"00") || v[55] != b'-')) {
        return false;
    }
    let hex = |s: &[u8]| {
        s.iter()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b))
    };
    let nonzero = |s: &[u8]| s.iter().any(|&b| b != b'0');
    v[2] == b'-'
        && v[35] == b'-'
        && v[52] == b'-'
        && hex(&v[..2])
        && &v[..2] != b"ff"
        && hex(&v[3..35])
        && nonzero(&v[3..35])
        && hex(&v[36..52])
        && nonzero(&v[36..52])
        && hex(&v[53..55])
}

/// A new `traceparent`: random trace and parent ids, not sampled (Weir
/// records no spans itself).
fn new_traceparent() -> HeaderValue {
    // 00-<trace-id>-<parent-id>-00: 2 + 1 + 32 + 1 + 16 + 1 + 2 bytes.
    let mut text = *b"00-________________________________-________________-00";
    let mut trace = [0u8; uuid::fmt::Simple::LENGTH];
    let mut parent = [0u8; uuid::fmt::Simple::LENGTH];
    uuid::Uuid::new_v4().simple().encode_lower(&mut trace);
    uuid::Uuid::new_v4().simple().encode_lower(&mut parent);
    text[3..35].copy_from_slice(&trace);
    text[36..52].copy_from_slice(&parent[..16]);
    HeaderValue::from_bytes(&text).unwrap_or(HeaderValue::from_static("-"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(fields: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (n, v) in fields {
            h.append(*n, HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn a_trusted_peers_id_is_kept_an_untrusted_ones_replaced() {
        let mut h = map(&[("x-request-id", "abc-123")]);
        assert_eq!(identify(&mut h, true), "abc-123");
        assert_eq!(h["x-request-id"], "abc-123");
        let mut h = map(&[("x-request-id", "abc-123")]);
        let id = identify(&mut h, false);
        assert_ne!(id, "abc-123");
        assert_eq!(h["x-request-id"], id);
        assert_eq!(id.len(), 36, "a hyphenated UUID: {id:?}");
        // Two lines, or an id with a space, are not kept even when trusted.
        let mut h = map(&[("x-request-id", "a"), ("x-request-id", "b")]);
        assert_eq!(identify(&mut h, true).len(), 36);
        assert_eq!(h.get_all("x-request-id").iter().count(), 1);
        let mut h = map(&[("x-request-id", "a b")]);
        assert_eq!(identify(&mut h, true).len(), 36);
    }

    #[test]
    fn a_valid_traceparent_is_kept_and_a_missing_or_bad_one_started() {
        let good = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let mut h = map(&[("traceparent", good)]);
        identify(&mut h, false);
        assert_eq!(h["traceparent"], good);
        for bad in [
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "garbage",
        ] {
            let mut h = map(&[("traceparent", bad)]);
            identify(&mut h, false);
            let made = h["traceparent"].to_str().expect("ascii");
            assert_ne!(made, bad);
            assert!(valid_traceparent(made.as_bytes()), "{made}");
        }
        let mut h = HeaderMap::new();
        identify(&mut h, false);
        assert!(valid_traceparent(h["traceparent"].as_bytes()));
        // A later version may carry more after its 55 bytes.
        assert!(valid_traceparent(
            b"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-more"
        ));
    }
}
