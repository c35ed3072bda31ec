//! Local answers: responses Weir makes itself (no route, a bad request, an
//! upstream that failed, a method a template route does not take), and
//! how their access log line reads.

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Response, StatusCode};
use weir_stream::body::SourceBody;
use weir_stream::{TransformExt as _, once, pull};
use weir_transform::chain::ResponseChain;

use crate::access_log::{AccessRecord, ResponseLog};
use crate::body::response::{ResponseBody, ResponseSource};
use crate::body_log::BodyLog;
use crate::outcome::Outcome;

/// A response Weir makes itself: status, a one-line plain-text body, and
/// the outcome its log line gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Local {
    pub(crate) status: StatusCode,
    pub(crate) body: &'static str,
    pub(crate) outcome: Outcome,
    /// The `Allow` field of a `405` (RFC 9110 §15.5.6).
    pub(crate) allow: Option<&'static str>,
    /// The `Retry-After` field, in seconds (RFC 9110 §10.2.3), of a `429`.
    pub(crate) retry_after: Option<u64>,
}

impl Local {
    /// A local answer without extra fields.
    pub(crate) const fn new(status: StatusCode, body: &'static str, outcome: Outcome) -> Local {
        Local {
            status,
            body,
            outcome,
            allow: None,
            retry_after: None,
        }
    }

    /// `429 Too Many Requests` (RFC 6585 §4) with `Retry-After: seconds`,
    /// for a route's rate limit, logged as `limited`.
    pub(crate) const fn rate_limited(seconds: u64) -> Local {
        Local {
            status: StatusCode::TOO_MANY_REQUESTS,
            body: "429 Too Many Requests\n",
            outcome: Outcome::Limited,
            allow: None,
            retry_after: Some(seconds),
        }
    }

    /// `400 Bad Request` with `body`, logged as `bad_request`.
    pub(crate) const fn bad_request(body: &'static str) -> Local {
        Local::new(StatusCode::BAD_REQUEST, body, Outcome::BadRequest)
    }

    /// `503 Service Unavailable` for a route at its
    /// `max_concurrent_requests`, logged as `limited`.
    /// A request with a fleet peer token that is not this replica's
    /// secret (`crate::fleet`).
    pub(crate) const fn fleet_refused() -> Local {
        Local::new(
            StatusCode::FORBIDDEN,
            "403 Forbidden: fleet peer token mismatch\n",
            Outcome::BadRequest,
        )
    }

    pub(crate) const fn too_busy() -> Local {
        Local::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "503 Service Unavailable: too many requests in flight on this route\n",
            Outcome::Limited,
        )
    }

    /// `502 Bad Gateway`, logged as `upstream_error`.
    pub(crate) const fn bad_gateway(body: &'static str) -> Local {
        Local::new(StatusCode::BAD_GATEWAY, body, Outcome::UpstreamError)
    }
}

/// The response for `local`, logged through `record` when its body ends
/// (`head_only`: a `HEAD`, whose body hyper never polls).
pub(crate) fn answer(
    mut record: AccessRecord,
    local: Local,
    head_only: bool,
) -> Response<ResponseBody> {
    record.status = local.status.as_u16();
    // A `204` or `304` has no body for hyper to poll (RFC 9110 §6.4.1):
    // its end is not a client that went away.
    let bodiless = matches!(
        local.status,
        StatusCode::NO_CONTENT | StatusCode::NOT_MODIFIED
    );
    let log = ResponseLog::new(record, local.outcome, !head_only && !bodiless);
    let body = ResponseSource::Local(once(Bytes::from_static(local.body.as_bytes())));
    let mut resp = Response::new(SourceBody::new(pull(
        body,
        BodyLog::off().then(ResponseChain::default()).then(log),
    )));
    *resp.status_mut() = local.status;
    let fields = resp.headers_mut();
    fields.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    if let Some(allow) = local.allow {
        fields.insert(header::ALLOW, HeaderValue::from_static(allow));
    }
    if let Some(seconds) = local.retry_after {
        fields.insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    }
    resp
}

/// The answer to a peer's ask for a rate-limit token
/// (`crate::fleet::rate`), which gets no access log line: `204` for a
/// token, `429` with `Retry-After` for an empty bucket, `400` for a
/// malformed ask (`None`).
pub(crate) fn rate_answer(token: Option<Result<(), u64>>) -> Response<ResponseBody> {
    let (status, retry_after) = match token {
        Some(Ok(())) => (StatusCode::NO_CONTENT, None),
        Some(Err(seconds)) => (StatusCode::TOO_MANY_REQUESTS, Some(seconds)),
        None => (StatusCode::BAD_REQUEST, None),
    };
    let mut resp = unlogged(status);
    if let Some(seconds) = retry_after {
        resp.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    }
    resp
}

/// An empty answer of `status` to a peer's internal request (a rate-limit
/// ask, an invalidation), with no access log line.
pub(crate) fn unlogged(status: StatusCode) -> Response<ResponseBody> {
    let mut resp = Response::new(SourceBody::new(pull(
        ResponseSource::empty(),
        BodyLog::off()
            .then(ResponseChain::default())
            .then(ResponseLog::detached()),
    )));
    *resp.status_mut() = status;
    resp
}
