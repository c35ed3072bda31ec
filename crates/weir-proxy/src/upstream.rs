//! The upstream client: a pooled hyper-util client, its deadlines, and the
//! classification of its failures into 502 and 504.

use std::error::Error as StdError;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};

use crate::body::request::RequestBody;
use crate::config::ClientSettings;
use crate::counted::{ConnectionCounts, CountingConnector};

/// Why an upstream request produced no response.
#[derive(Debug, thiserror::Error)]
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

/// A pooled HTTP/1.1 client for all upstreams.
#[derive(Debug, Clone)]
pub struct UpstreamClient {
    client: Client<CountingConnector<HttpConnector>, RequestBody>,
    counts: Arc<ConnectionCounts>,
    connect_timeout: Duration,
    response_header_timeout: Duration,
}

impl UpstreamClient {
    /// Builds the client. Idle connections expire after
    /// `pool_idle_timeout` (the pool timer is set, so they really do).
    pub fn new(settings: &ClientSettings) -> Self {
        let counts = Arc::new(ConnectionCounts::default());
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(settings.connect_timeout));
        connector.enforce_http(true);
        let client = Client::builder(TokioExecutor::new())
            .pool_timer(TokioTimer::new())
            .timer(TokioTimer::new())
            .pool_idle_timeout(settings.pool_idle_timeout)
            .pool_max_idle_per_host(settings.pool_max_idle_per_host)
            .set_host(true)
            .build(CountingConnector::new(connector, Arc::clone(&counts)));
        UpstreamClient {
            client,
            counts,
            connect_timeout: settings.connect_timeout,
            response_header_timeout: settings.response_header_timeout,
        }
    }

    /// Live upstream connections (pooled idle ones included), counted
    /// exactly: each connection decrements the count when it is dropped.
    pub fn connections(&self) -> &Arc<ConnectionCounts> {
        &self.counts
    }

    /// Sends `req` (with an absolute URI) and waits for the response head.
    ///
    /// # Cancel safety
    /// Dropping the future abandons the request; its connection is closed,
    /// not returned to the pool.
    ///
    /// # Errors
    /// An [`UpstreamError`] saying what failed; its [`UpstreamError::status`]
    /// is the status to answer with.
    pub async fn send(
        &self,
        req: Request<RequestBody>,
    ) -> Result<Response<Incoming>, UpstreamError> {
        // For the error message only: an `Authority` clone shares the
        // config's bytes, where its text would be an allocation per request.
        let authority = req.uri().authority().cloned();
        let authority = move || authority.map_or_else(String::new, |a| a.to_string());
        let deadline = self.response_header_timeout;
        match tokio::time::timeout(deadline, self.client.request(req)).await {
            Ok(Ok(resp)) => Ok(resp),
            Ok(Err(e)) => Err(self.classify(&e, authority())),
            Err(_) => Err(UpstreamError::ResponseHeaderTimeout {
                authority: authority(),
                ms: deadline.as_millis() as u64,
            }),
        }
    }

    fn classify(
        &self,
        err: &hyper_util::client::legacy::Error,
        authority: String,
    ) -> UpstreamError {
        let detail = error_chain(err);
        if caused_by_lag(err) {
            return UpstreamError::BodyDetached { authority };
        }
        if err.is_connect() {
            match io_kind(err) {
                Some(io::ErrorKind::ConnectionRefused) => {
                    UpstreamError::ConnectRefused { authority }
                }
                Some(io::ErrorKind::TimedOut) => UpstreamError::ConnectTimeout {
                    authority,
                    ms: self.connect_timeout.as_millis() as u64,
                },
                _ => UpstreamError::Connect { authority, detail },
            }
        } else {
            UpstreamError::Request { authority, detail }
        }
    }
}

/// `err`, then each of its sources in turn.
fn chain<'a>(
    err: &'a (dyn StdError + 'static),
) -> impl Iterator<Item = &'a (dyn StdError + 'static)> {
    std::iter::successors(Some(err), |&e| e.source())
}

/// Whether a detached (lagging) body branch caused `err`.
fn caused_by_lag(err: &(dyn StdError + 'static)) -> bool {
    chain(err).any(|e| {
        matches!(
            e.downcast_ref::<weir_stream::StreamError>(),
            Some(weir_stream::StreamError::Lagged { .. })
        )
    })
}

/// The kind of the first I/O error in `err`'s source chain.
fn io_kind(err: &(dyn StdError + 'static)) -> Option<io::ErrorKind> {
    chain(err).find_map(|e| e.downcast_ref::<io::Error>().map(io::Error::kind))
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
