//! The send phase: the upstream request goes out on the picked server's
//! pool (connect, request, response head), and a failed attempt is tried
//! again on another server when that is safe. A request that got no
//! response is classified here: the upstream's fault (502/504) or the
//! client's own body (400/408).
//!
//! Retries (`[upstream.retry]`), on another server each time, while
//! `attempts` allows and the retry budget has one:
//! - a request none of which was written (the connection could not be
//!   made) is always retried: the request, body included, is intact;
//! - after the request was written, only an idempotent request (RFC 9110
//!   §9.2.2) is retried, from a copy of its head, and only before any of
//!   the response reached the client (no response head yet). Its body, if
//!   it has one, is sent again from its retry buffer
//!   ([`crate::body::replay`]); once more than `retry_body_bytes` of it
//!   went out, it is not retried;
//! - a stream an HTTP/2 server refused unprocessed (`REFUSED_STREAM`, a
//!   graceful `GOAWAY`: [`UpstreamError::Refused`]) is retried whatever
//!   its method, from a copy of its head and its retry buffer, as a
//!   request that was never sent.
//!
//! A gRPC request's `grpc-timeout` bounds the response head deadline
//! ([`super::grpc::timeout`]).

use std::sync::Arc;

use http::{HeaderMap, Method, Request, StatusCode, Uri, Version, header};
use http_body_util::{Either, Empty};

use super::context::Exchange;
use super::local::Local;
use super::sent::Sent;
use crate::access_log::ClientBodyFailure;
use crate::balance::AttemptResult;
use crate::body::request::{Outgoing, RequestBody};
use crate::metrics::InFlight;
use crate::outcome::Outcome;
use crate::upstream::{PooledBody, SendFailure, UpstreamError};

/// The most attempts of one request (`attempts` is at most 10).
const MAX_ATTEMPTS: usize = 10;

/// What an idempotent request's head is rebuilt from for a retry.
struct HeadCopy {
    method: Method,
    uri: Uri,
    version: Version,
    headers: HeaderMap,
}

impl HeadCopy {
    fn of(req: &Request<RequestBody>) -> HeadCopy {
        HeadCopy {
            method: req.method().clone(),
            uri: req.uri().clone(),
            version: req.version(),
            headers: req.headers().clone(),
        }
    }

    fn request(&self, body: RequestBody) -> Request<RequestBody> {
        let mut req = Request::new(body);
        *req.method_mut() = self.method.clone();
        *req.uri_mut() = self.uri.clone();
        *req.version_mut() = self.version;
        *req.headers_mut() = self.headers.clone();
        req
    }
}

impl Exchange<'_> {
    /// Sends `req` upstream, the request counted in flight until its
    /// response ends; with the cache hook, it first gets the validators the
    /// cache needs, and the cache sees the answer first.
    pub(crate) async fn send(&mut self, mut req: Request<RequestBody>) -> Sent {
        if let Some(cache) = &self.cache {
            cache.prepare(req.headers_mut());
        }
        // A moved key: its previous owner's entry, when it has one,
        // stands for the upstream's answer (crate::fleet). Boxed, so that
        // what is kept across the attempts below stays one pointer.
        let peeked = match self.handoff.take() {
            Some(ask) => Box::pin(self.peek_at(*ask)).await,
            None => None,
        };
        let sent = match peeked {
            Some(resp) => Ok(*resp),
            None => self.attempts(req).await,
        };
        match &mut self.cache {
            Some(cache) => cache.after_send(sent),
            None => Sent::from(sent),
        }
    }

    /// The attempts of one request, on the server the upstream request
    /// phase picked, then on others while a retry is safe and allowed.
    async fn attempts(
        &mut self,
        mut req: Request<RequestBody>,
    ) -> Result<http::Response<PooledBody>, UpstreamError> {
        let group = Arc::clone(&self.target.upstream.group);
        group.deposit();
        // `Host` is absent unless the route preserves the client's: then
        // each server gets its own authority.
        let set_host = !req.headers().contains_key(header::HOST);
        let idempotent = req.method().is_idempotent();
        let h2 = req.version() == Version::HTTP_2;
        let copy = (group.can_retry
            && (idempotent || h2)
            && (matches!(req.body(), Either::Right(_)) || self.tape.is_some()))
        .then(|| HeadCopy::of(&req));
        let deadline = self
            .grpc
            .then(|| super::grpc::timeout(req.headers()))
            .flatten();
        let mut tried = [usize::MAX; MAX_ATTEMPTS];
        let mut server = self.server;
        for n in 0..MAX_ATTEMPTS {
            tried[n] = server;
            let s = &group.servers[server];
            self.server = server;
            self.record.attempts = (n + 1) as u8;
            self.record.server = Some(Arc::clone(&s.authority));
            self.record.hold_in_flight(InFlight::hold(&s.in_flight));
            let SendFailure { error, unsent } = match self
                .proxy
                .client
                .send_on(&s.pool, req, set_host, deadline)
                .await
            {
                Ok(resp) => {
                    if resp.status().is_server_error() {
                        group.record_server_error(server, resp.status());
                    } else if http_body::Body::is_end_stream(resp.body()) {
                        group.record(server, AttemptResult::Ok);
                    } else {
                        // Whether the failure streak ends waits for the
                        // body (see `Exchange::upstream_response`).
                        group.record_head(server);
                        self.body_pending = true;
                    }
                    return Ok(resp);
                }
                Err(failure) => failure,
            };
            let result = attempt_result(&error);
            group.record(server, result);
            let refused = matches!(error, UpstreamError::Refused { .. });
            let again = match unsent {
                Some(unsent) => Some(unsent),
                None if self.record.counters().client_failure().is_none()
                    && (idempotent || refused) =>
                {
                    copy.as_ref().and_then(|head| self.again(head))
                }
                None => None,
            };
            let Some(again) = again.filter(|_| n + 1 < group.retry.attempts as usize) else {
                return Err(error);
            };
            let Some(next) = self.pick_server(again.headers(), &tried[..=n]) else {
                return Err(error);
            };
            if !group.withdraw() {
                group.retry_budget_exhausted.inc();
                self.record.retry_budget_exhausted = true;
                return Err(error);
            }
            group.retried.inc();
            tracing::debug!(
                target: "weir::proxy",
                upstream = %group.name,
                server = %s.authority,
                "attempt {} failed ({error}); retrying on {}",
                n + 1,
                group.servers[next].authority
            );
            self.record.note_retry(&s.authority, result.as_str());
            req = again;
            server = next;
        }
        unreachable!("attempts are capped at {MAX_ATTEMPTS}")
    }

    /// The request again, for another attempt after this one was written:
    /// the head from `head`, the body from the retry buffer; `None` when
    /// the body cannot be sent whole again (over `retry_body_bytes`).
    fn again(&self, head: &HeadCopy) -> Option<Request<RequestBody>> {
        let body = match &self.tape {
            Some(tape) => {
                Outgoing::reader(tape.rewind()?, self.upload_stop.clone().unwrap_or_default())
            }
            None => Either::Right(Empty::new()),
        };
        Some(head.request(body))
    }

    /// The local answer for a request that got no upstream response. When
    /// the client's own request body broke (malformed, stalled, abandoned),
    /// the upstream is not to blame: 400 or 408, and no upstream warning.
    pub(crate) fn upstream_failure(&mut self, err: &UpstreamError) -> Local {
        self.record.reason = Some(err.to_string());
        match self.record.counters().client_failure() {
            Some(ClientBodyFailure::IdleTimeout) => {
                tracing::debug!(target: "weir::proxy", "request body stalled: {err}");
                Local::new(
                    StatusCode::REQUEST_TIMEOUT,
                    "408 Request Timeout: the request body stalled\n",
                    Outcome::ClientAborted,
                )
            }
            Some(ClientBodyFailure::TooLarge) => {
                tracing::debug!(target: "weir::proxy", "request body over its limit: {err}");
                Local::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "413 Content Too Large: the request body is over this route's limit\n",
                    Outcome::BadRequest,
                )
            }
            Some(ClientBodyFailure::TooSlow) => {
                tracing::debug!(target: "weir::proxy", "request body too slow: {err}");
                Local::new(
                    StatusCode::REQUEST_TIMEOUT,
                    "408 Request Timeout: the request body came too slowly\n",
                    Outcome::ClientAborted,
                )
            }
            Some(ClientBodyFailure::Broken) => {
                tracing::debug!(target: "weir::proxy", "request body failed: {err}");
                Local::new(
                    StatusCode::BAD_REQUEST,
                    "400 Bad Request: the request body was malformed or cut short\n",
                    Outcome::ClientAborted,
                )
            }
            None => {
                tracing::warn!(
                    target: "weir::proxy",
                    upstream = %self.target.upstream.name,
                    status = err.status().as_u16(),
                    "upstream failed: {err}"
                );
                if err.is_timeout() {
                    Local::new(
                        err.status(),
                        "504 Gateway Timeout\n",
                        Outcome::UpstreamTimeout,
                    )
                } else {
                    Local::new(err.status(), "502 Bad Gateway\n", Outcome::UpstreamError)
                }
            }
        }
    }
}

/// How a failed attempt counts for ejection and metrics.
pub(crate) fn attempt_result(err: &UpstreamError) -> AttemptResult {
    match err {
        UpstreamError::ConnectRefused { .. }
        | UpstreamError::Connect { .. }
        | UpstreamError::Tls { .. }
        | UpstreamError::Refused { .. } => AttemptResult::ConnectFailed,
        UpstreamError::ConnectTimeout { .. } | UpstreamError::ResponseHeaderTimeout { .. } => {
            AttemptResult::Timeout
        }
        _ => AttemptResult::Failed,
    }
}
