//! Why an upstream request failed, and its error chain on one line.

use std::error::Error as StdError;

use http::{Request, StatusCode};

use crate::body::request::RequestBody;

/// A request that got no response.
#[derive(Debug)]
pub struct SendFailure {
    /// What failed.
    pub error: UpstreamError,
    /// The request, when none of it was written.
    pub unsent: Option<Request<RequestBody>>,
}

/// Why an upstream request produced no response.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum UpstreamError {
    /// The TCP connection was refused.
    #[error("connection refused by {authority}")]
    ConnectRefused {
        /// The upstream's host:port.
        authority: String,
    },
    /// The TCP connection was not established in time.
    #[error("connect to {authority} timed out after {ms} ms")]
    ConnectTimeout {
        /// The upstream's host:port.
        authority: String,
        /// The configured deadline, in ms.
        ms: u64,
    },
    /// Any other connect failure (DNS, unreachable network, …).
    #[error("cannot connect to {authority}: {detail}")]
    Connect {
        /// The upstream's host:port.
        authority: String,
        /// The underlying error chain, on one line.
        detail: String,
    },
    /// The TLS handshake with an `https://` server failed: its certificate
    /// (expired, for another name, from an unknown CA), a peer that does
    /// not speak TLS, no shared version or cipher, or no HTTP/2 by ALPN. A
    /// connect failure: nothing of the request was sent.
    #[error("TLS handshake with {authority} failed: {reason}")]
    Tls {
        /// The upstream's host:port.
        authority: String,
        /// What rustls (or the ALPN check) said, on one line.
        reason: String,
    },
    /// The response head did not arrive in time.
    #[error("no response headers from {authority} within {ms} ms")]
    ResponseHeaderTimeout {
        /// The upstream's host:port.
        authority: String,
        /// The configured deadline, in ms.
        ms: u64,
    },
    /// The request's body was a secondary branch of the client's body (a
    /// mirror copy) that fell behind and was detached.
    #[error("request to {authority} aborted: its body branch lagged and was detached")]
    BodyDetached {
        /// The upstream's host:port.
        authority: String,
    },
    /// The HTTP/2 server refused the stream before processing any of it
    /// (`RST_STREAM` with `REFUSED_STREAM`, or a graceful `GOAWAY` that left
    /// it out; RFC 9113 §8.7): safe to send again on another server.
    #[error("{authority} refused the request unprocessed: {detail}")]
    Refused {
        /// The upstream's host:port.
        authority: String,
        /// The underlying error chain, on one line.
        detail: String,
    },
    /// The connection failed after it was established (reset, bad response, …).
    #[error("request to {authority} failed: {detail}")]
    Request {
        /// The upstream's host:port.
        authority: String,
        /// The underlying error chain, on one line.
        detail: String,
    },
}

impl UpstreamError {
    /// The status Weir answers with: 504 for deadlines, 502 otherwise.
    pub fn status(&self) -> StatusCode {
        match self {
            UpstreamError::ConnectTimeout { .. } | UpstreamError::ResponseHeaderTimeout { .. } => {
                StatusCode::GATEWAY_TIMEOUT
            }
            _ => StatusCode::BAD_GATEWAY,
        }
    }

    /// Whether this was a missed deadline.
    pub fn is_timeout(&self) -> bool {
        self.status() == StatusCode::GATEWAY_TIMEOUT
    }
}

/// `err`, then each of its sources in turn.
fn chain<'a>(
    err: &'a (dyn StdError + 'static),
) -> impl Iterator<Item = &'a (dyn StdError + 'static)> {
    std::iter::successors(Some(err), |&e| e.source())
}

/// Whether a detached (lagging) body branch caused `err`.
pub(super) fn caused_by_lag(err: &(dyn StdError + 'static)) -> bool {
    chain(err).any(|e| {
        matches!(
            e.downcast_ref::<weir_stream::StreamError>(),
            Some(weir_stream::StreamError::Lagged { .. })
        )
    })
}

/// `err` and its sources on one line, `outer: inner: innermost`.
pub fn error_chain(err: &(dyn StdError + 'static)) -> String {
    let mut out = err.to_string();
    let mut cur = err.source();
    while let Some(e) = cur {
        let s = e.to_string();
        if !out.contains(&s) {
            out.push_str(": ");
            out.push_str(&s);
        }
        cur = e.source();
    }
    out
}
