//! Building responses: the common body type and small constructors.

use bytes::Bytes;
use http::header::{ALLOW, CONTENT_LENGTH, CONTENT_TYPE, HeaderValue};
use http::{Response, StatusCode};
use http_body::Body;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Empty, Full};

use crate::error::OriginError;

/// Body of every response the origin sends: a boxed stream of `Bytes`
/// frames that fails with [`OriginError`].
pub(crate) type OriginBody = UnsyncBoxBody<Bytes, OriginError>;

/// `text/plain; charset=utf-8`.
pub(crate) const TEXT_PLAIN: HeaderValue = HeaderValue::from_static("text/plain; charset=utf-8");

/// `text/html; charset=utf-8`.
pub(crate) const TEXT_HTML: HeaderValue = HeaderValue::from_static("text/html; charset=utf-8");

/// `application/octet-stream`.
pub(crate) const OCTET_STREAM: HeaderValue = HeaderValue::from_static("application/octet-stream");

/// A response with `status`, `Content-Type: content_type` and `body`.
pub(crate) fn with_body<B>(
    status: StatusCode,
    content_type: HeaderValue,
    body: B,
) -> Response<OriginBody>
where
    B: Body<Data = Bytes, Error = OriginError> + Send + 'static,
{
    let mut response = Response::new(body.boxed_unsync());
    *response.status_mut() = status;
    response.headers_mut().insert(CONTENT_TYPE, content_type);
    response
}

/// A response whose whole body is `content`, with an explicit
/// `Content-Length` (so a `HEAD` response keeps it, see [`without_body`]).
pub(crate) fn full(
    status: StatusCode,
    content_type: HeaderValue,
    content: impl Into<Bytes>,
) -> Response<OriginBody> {
    let content = content.into();
    let length = HeaderValue::from(content.len());
    let body = Full::new(content).map_err(|never| match never {});
    let mut response = with_body(status, content_type, body);
    response.headers_mut().insert(CONTENT_LENGTH, length);
    response
}

/// A plain-text response with `status` and `text`.
pub(crate) fn text(status: StatusCode, text: impl Into<Bytes>) -> Response<OriginBody> {
    full(status, TEXT_PLAIN, text)
}

/// A response with `status` and no body at all (no `Content-Type`).
pub(crate) fn empty(status: StatusCode) -> Response<OriginBody> {
    let mut response = Response::new(empty_body());
    *response.status_mut() = status;
    response
}

/// `response` with its body dropped and its head kept, as the answer to a
/// `HEAD` request (RFC 9110 §9.3.2: same header fields as `GET`, no content).
///
/// hyper's HTTP/2 server does not drop the body of a `HEAD` response by
/// itself: it would send DATA frames, which clients treat as a protocol
/// error. An ended body makes it close the stream with the headers.
pub(crate) fn without_body(response: Response<OriginBody>) -> Response<OriginBody> {
    response.map(|_| empty_body())
}

/// A body that is already at its end.
fn empty_body() -> OriginBody {
    Empty::new().map_err(|never| match never {}).boxed_unsync()
}

/// The response for `error` raised before any response head was sent: its
/// status (see [`OriginError::status`]) and its message as plain text.
pub(crate) fn error(error: &OriginError) -> Response<OriginBody> {
    text(error.status(), format!("{error}\n"))
}

/// `405 Method Not Allowed` with an `Allow` header listing `allow`.
pub(crate) fn method_not_allowed(allow: &'static str) -> Response<OriginBody> {
    let mut response = text(StatusCode::METHOD_NOT_ALLOWED, "method not allowed\n");
    response
        .headers_mut()
        .insert(ALLOW, HeaderValue::from_static(allow));
    response
}
