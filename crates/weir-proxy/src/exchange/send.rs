//! The send phase: the upstream request goes out through the pooled
//! client (connect, request, response head). A request that got no
//! response is classified here: the upstream's fault (502/504) or the
//! client's own body (400/408). This is where a retry will plug in.

use http::{Request, StatusCode};

use super::context::Exchange;
use super::local::Local;
use super::sent::Sent;
use crate::access_log::ClientBodyFailure;
use crate::body::request::RequestBody;
use crate::metrics::InFlight;
use crate::outcome::Outcome;
use crate::upstream::UpstreamError;

impl Exchange<'_> {
    /// Sends `req` upstream, the request counted in flight until its
    /// response ends; with the cache hook, it first gets the validators the
    /// cache needs, and the cache sees the answer first.
    pub(crate) async fn send(&mut self, mut req: Request<RequestBody>) -> Sent {
        if let Some(cache) = &self.cache {
            cache.prepare(req.headers_mut());
        }
        self.record
            .hold_in_flight(InFlight::hold(&self.target.upstream.in_flight));
        let sent = self.proxy.client.send(req).await;
        match &mut self.cache {
            Some(cache) => cache.after_send(sent),
            None => Sent::from(sent),
        }
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
