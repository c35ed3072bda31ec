//! gRPC calls Weir fails itself: answered the way a gRPC client reads a
//! failure, a trailers-only response ("gRPC over HTTP/2", PROTOCOL-HTTP2.md,
//! Responses → Trailers-Only), instead of an HTTP error page the client
//! would report as a protocol error. Also the call's `grpc-timeout`.
//!
//! The answer is `200` with `content-type: application/grpc`, `grpc-status`
//! and `grpc-message` in its head and no body: over HTTP/2 that is one
//! `HEADERS` frame with `END_STREAM`, which is what Trailers-Only is.

use std::time::Duration;

use http::header::{self, HeaderMap, HeaderValue};
use http::{Response, StatusCode};

use super::local::{self, Local};
use crate::access_log::AccessRecord;
use crate::body::response::ResponseBody;
use crate::outcome::Outcome;

/// `grpc-status` 4: the deadline expired before the call completed.
pub const DEADLINE_EXCEEDED: u8 = 4;
/// `grpc-status` 14: the service is unavailable (transient; the client
/// may retry).
pub const UNAVAILABLE: u8 = 14;

/// Whether a request is a gRPC call: its `Content-Type` is
/// `application/grpc`, or starts with `application/grpc+` or
/// `application/grpc;` (PROTOCOL-HTTP2.md, Requests).
pub fn is_grpc(headers: &HeaderMap) -> bool {
    headers.get(header::CONTENT_TYPE).is_some_and(|v| {
        let v = v.as_bytes();
        let prefix = b"application/grpc";
        v.len() >= prefix.len()
            && v[..prefix.len()].eq_ignore_ascii_case(prefix)
            && matches!(v.get(prefix.len()), None | Some(b'+' | b';'))
    })
}

/// The `grpc-status` for a failure Weir answers with `status`: 4 for a
/// missed deadline (504, 408), 14 for every other (502, 503, …).
pub fn status_code(status: StatusCode) -> u8 {
    match status {
        StatusCode::GATEWAY_TIMEOUT | StatusCode::REQUEST_TIMEOUT => DEADLINE_EXCEEDED,
        _ => UNAVAILABLE,
    }
}

/// A call's deadline from its `grpc-timeout` field: 1 to 8 digits and a
/// unit (`H`, `M`, `S`, `m`, `u`, `n`; PROTOCOL-HTTP2.md, Requests).
/// `None` when the field is absent or malformed (the call then has no
/// deadline of its own).
pub fn timeout(headers: &HeaderMap) -> Option<Duration> {
    let v = headers.get("grpc-timeout")?.to_str().ok()?;
    let (digits, unit) = v.split_at(v.len().checked_sub(1)?);
    if digits.is_empty() || digits.len() > 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n * 3600),
        "M" => Duration::from_secs(n * 60),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

/// `message` percent-encoded for `grpc-message`: every byte outside
/// printable ASCII (0x20..=0x7E), and `%` itself, as `%XX` of its UTF-8
/// bytes.
pub fn percent_encode(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    for b in message.bytes() {
        if (0x20..=0x7E).contains(&b) && b != b'%' {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Whether Weir answers `local` to a gRPC call as a gRPC failure: the
/// upstream could not be reached or missed a deadline (502, 503, 504).
pub(crate) fn replaces(local: &Local) -> bool {
    matches!(
        local.status,
        StatusCode::BAD_GATEWAY | StatusCode::SERVICE_UNAVAILABLE | StatusCode::GATEWAY_TIMEOUT
    )
}

/// The trailers-only answer standing for `local` to a gRPC call, logged
/// through `record` with `local`'s outcome: `grpc-status` by
/// [`status_code`], `grpc-message` the failure's reason (the record's,
/// else `local`'s one-line text).
pub(crate) fn answer(record: AccessRecord, local: Local) -> Response<ResponseBody> {
    let code = status_code(local.status);
    let message = record
        .reason
        .clone()
        .unwrap_or_else(|| local.body.trim_end().to_owned());
    let outcome = if code == DEADLINE_EXCEEDED {
        Outcome::UpstreamTimeout
    } else {
        local.outcome
    };
    let mut resp = local::answer(record, Local::new(StatusCode::OK, "", outcome), false);
    let fields = resp.headers_mut();
    fields.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/grpc"),
    );
    fields.insert("grpc-status", HeaderValue::from(u16::from(code)));
    if let Ok(v) = HeaderValue::try_from(percent_encode(&message)) {
        fields.insert("grpc-message", v);
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(
                http::HeaderName::from_bytes(k.as_bytes()).expect("name"),
                HeaderValue::from_str(v).expect("value"),
            );
        }
        h
    }

    #[test]
    fn grpc_is_told_by_its_content_type() {
        for yes in [
            "application/grpc",
            "application/grpc+proto",
            "Application/GRPC;x=1",
        ] {
            assert!(is_grpc(&fields(&[("content-type", yes)])), "{yes}");
        }
        for no in ["application/grpcx", "application/json", "text/grpc"] {
            assert!(!is_grpc(&fields(&[("content-type", no)])), "{no}");
        }
        assert!(!is_grpc(&HeaderMap::new()));
    }

    #[test]
    fn grpc_timeout_reads_every_unit_and_refuses_the_malformed() {
        for (v, d) in [
            ("1H", Duration::from_secs(3600)),
            ("2M", Duration::from_secs(120)),
            ("3S", Duration::from_secs(3)),
            ("250m", Duration::from_millis(250)),
            ("7u", Duration::from_micros(7)),
            ("99999999n", Duration::from_nanos(99_999_999)),
        ] {
            assert_eq!(timeout(&fields(&[("grpc-timeout", v)])), Some(d), "{v}");
        }
        for bad in ["", "S", "10", "123456789S", "1x", "-1S", "1.5S"] {
            assert_eq!(timeout(&fields(&[("grpc-timeout", bad)])), None, "{bad:?}");
        }
    }

    #[test]
    fn grpc_message_is_percent_encoded_and_statuses_map() {
        assert_eq!(
            percent_encode("no server: 50% é\n"),
            "no server: 50%25 %C3%A9%0A"
        );
        assert_eq!(status_code(StatusCode::GATEWAY_TIMEOUT), DEADLINE_EXCEEDED);
        assert_eq!(status_code(StatusCode::BAD_GATEWAY), UNAVAILABLE);
        assert_eq!(status_code(StatusCode::SERVICE_UNAVAILABLE), UNAVAILABLE);
    }
}
