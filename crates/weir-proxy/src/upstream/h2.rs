//! HTTP/2 to an upstream server, over cleartext TCP with prior knowledge
//! (h2c, RFC 9113 §3.3) or over TLS with ALPN `h2` (§3.2, [`super::tls`]):
//! one multiplexed connection per server, shared by
//! every request to it as concurrent streams, and opened again when it
//! closed or failed.
//!
//! The connection is counted in [`crate::counted::ConnectionCounts`] like
//! an HTTP/1.1 one, for as long as its socket lives. It has no idle
//! expiry: it stays open until the server closes it (a `GOAWAY`, a reset)
//! or it fails, then the next request opens a new one.

use std::error::Error as StdError;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use http::uri::{Authority, PathAndQuery, Scheme};
use http::{HeaderValue, Request, Response, Uri, header};
use hyper::body::Incoming;
use hyper::client::conn::http2;
use hyper_util::rt::TokioExecutor;

use super::connect::handshake_error;
use super::error::{SendFailure, UpstreamError, caused_by_lag, error_chain};
use crate::body::request::RequestBody;
use crate::counted::Counted;

/// A new counted socket to the server.
type Socket = Counted<super::connect::Socket>;

/// The sending half of one HTTP/2 upstream connection; clones share it.
type H2Sender = http2::SendRequest<RequestBody>;

/// A server's one HTTP/2 connection, when it has one open.
#[derive(Debug, Default)]
pub(crate) struct H2Slot {
    /// The open connection and its generation (which connection it is, so
    /// a failure forgets only the connection that failed).
    current: Mutex<Option<(u64, H2Sender)>>,
    /// Held while a connection is being opened, so concurrent requests
    /// wait for that one instead of each opening its own.
    opening: tokio::sync::Mutex<Opening>,
    /// Connection attempts finished so far, failed or not.
    finished: AtomicU64,
}

/// What the opening lock keeps.
#[derive(Debug, Default)]
struct Opening {
    /// Connections opened so far; the last one's generation.
    generation: u64,
    /// The last attempt, when it failed: its number (in order of finishing)
    /// and its error. The requests that arrived before it finished get that
    /// error rather than each trying again in turn (which, against a
    /// server that does not answer, would cost every waiter a whole connect
    /// timeout more than the one before).
    failed: Option<(u64, UpstreamError)>,
}

impl H2Slot {
    fn lock(&self) -> MutexGuard<'_, Option<(u64, H2Sender)>> {
        self.current.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The open connection, if it is still open.
    fn live(&self) -> Option<(u64, H2Sender)> {
        match &*self.lock() {
            Some((n, sender)) if !sender.is_closed() => Some((*n, sender.clone())),
            _ => None,
        }
    }

    /// The open connection, or a new one (opened once for all the requests
    /// that wait for it). The `bool` says whether it was just opened.
    async fn sender<F>(
        &self,
        authority: &str,
        socket: impl Fn() -> F,
    ) -> Result<(u64, H2Sender, bool), UpstreamError>
    where
        F: Future<Output = Result<Socket, UpstreamError>>,
    {
        if let Some((n, sender)) = self.live() {
            return Ok((n, sender, false));
        }
        // Boxed: opening is rare and its future large; inline it would
        // grow every stream's future.
        Box::pin(self.open_shared(authority, socket)).await
    }

    /// Opens the connection, once for all the requests that wait for it
    /// (the slow half of [`H2Slot::sender`]).
    async fn open_shared<F>(
        &self,
        authority: &str,
        socket: impl Fn() -> F,
    ) -> Result<(u64, H2Sender, bool), UpstreamError>
    where
        F: Future<Output = Result<Socket, UpstreamError>>,
    {
        let seen = self.finished.load(Ordering::Acquire);
        let mut opening = self.opening.lock().await;
        if let Some((n, sender)) = self.live() {
            return Ok((n, sender, false));
        }
        if let Some((attempt, error)) = &opening.failed
            && *attempt > seen
        {
            return Err(error.clone());
        }
        let opened = match socket().await {
            Ok(io) => open(io, authority).await,
            Err(e) => Err(e),
        };
        let attempt = self.finished.fetch_add(1, Ordering::AcqRel) + 1;
        match opened {
            Ok(sender) => {
                opening.generation += 1;
                opening.failed = None;
                *self.lock() = Some((opening.generation, sender.clone()));
                Ok((opening.generation, sender, true))
            }
            Err(error) => {
                opening.failed = Some((attempt, error.clone()));
                Err(error)
            }
        }
    }

    /// Forgets connection `n` if it is still the current one: the next
    /// request opens a new connection. The connection itself closes once
    /// its streams in flight are done with it.
    fn forget(&self, n: u64) {
        let mut current = self.lock();
        if current.as_ref().is_some_and(|(m, _)| *m == n) {
            *current = None;
        }
    }
}

/// Handshakes HTTP/2 on `io` and spawns the connection.
async fn open(io: Socket, authority: &str) -> Result<H2Sender, UpstreamError> {
    let (sender, conn) = http2::Builder::new(TokioExecutor::new())
        .handshake(io)
        .await
        .map_err(|e| handshake_error(&e, authority))?;
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            tracing::debug!(target: "weir::upstream", "upstream HTTP/2 connection ended: {e}");
        }
    });
    Ok(sender)
}

impl H2Slot {
    /// One exchange as a stream of the HTTP/2 connection to `authority`,
    /// opened on a socket from `socket` when there is none. A request the
    /// connection could not take (it had closed, nothing was sent) goes on a
    /// new connection.
    ///
    /// # Errors
    /// A [`SendFailure`]; the request comes back with it when none of it was
    /// sent. A stream the server refused unprocessed is
    /// [`UpstreamError::Refused`].
    pub(crate) async fn exchange<F>(
        &self,
        authority: &str,
        socket: impl Fn() -> F,
        mut req: Request<RequestBody>,
    ) -> Result<Response<Incoming>, SendFailure>
    where
        F: Future<Output = Result<Socket, UpstreamError>>,
    {
        loop {
            let (n, mut sender, fresh) = match self.sender(authority, &socket).await {
                Ok(s) => s,
                Err(error) => {
                    return Err(SendFailure {
                        error,
                        unsent: Some(req),
                    });
                }
            };
            match sender.try_send_request(req).await {
                Ok(resp) => return Ok(resp),
                Err(mut e) => {
                    if sender.is_closed() || going_away(e.error()) {
                        self.forget(n);
                    }
                    match e.take_message() {
                        Some(unsent) if !fresh => req = unsent,
                        unsent => {
                            return Err(SendFailure {
                                error: stream_error(e.error(), authority),
                                unsent,
                            });
                        }
                    }
                }
            }
        }
    }
}

/// Whether the server refused the stream before processing any of it, so
/// that it is safe to send again whatever its method (RFC 9113 §8.7): a
/// `RST_STREAM` with `REFUSED_STREAM`, or the stream failed by a graceful
/// `GOAWAY` (`NO_ERROR`) whose last stream id is below it (only those
/// streams get that error; §6.8).
fn refused(err: &hyper::Error) -> bool {
    h2_error(err).is_some_and(|h| {
        h.reason() == Some(h2::Reason::REFUSED_STREAM)
            || (h.is_go_away() && h.is_remote() && h.reason() == Some(h2::Reason::NO_ERROR))
    })
}

/// Whether the server sent `GOAWAY`: its connection takes no new streams,
/// so the next request opens another. (A `REFUSED_STREAM` alone leaves the
/// connection in use: the server may just be busy.)
fn going_away(err: &hyper::Error) -> bool {
    h2_error(err).is_some_and(|h| h.is_go_away() && h.is_remote())
}

/// The HTTP/2 error in `err`'s chain, if any.
fn h2_error(err: &hyper::Error) -> Option<&h2::Error> {
    let err: &(dyn StdError + 'static) = err;
    std::iter::successors(Some(err), |&e| e.source()).find_map(|e| e.downcast_ref::<h2::Error>())
}

/// A failure after the stream was opened.
fn stream_error(err: &hyper::Error, authority: &str) -> UpstreamError {
    let authority = authority.to_owned();
    if caused_by_lag(err) {
        UpstreamError::BodyDetached { authority }
    } else if refused(err) {
        UpstreamError::Refused {
            authority,
            detail: error_chain(err),
        }
    } else {
        UpstreamError::Request {
            authority,
            detail: error_chain(err),
        }
    }
}

/// `parts` made an HTTP/2 request to the server at `authority` (RFC 9113
/// §8.3.1): an absolute URI of `scheme` (`:scheme`) whose authority is the request's `Host`
/// field (it is removed: the `:authority` pseudo-header carries it) or,
/// without one, the server's; every connection-specific field removed
/// (§8.2.2), `TE` only as `trailers`.
pub(crate) fn prepare(parts: &mut http::request::Parts, scheme: &Scheme, authority: &str) {
    crate::headers::remove_connection_specific(&mut parts.headers);
    let authority = parts
        .headers
        .remove(header::HOST)
        .and_then(|host| host_authority(&host))
        .or_else(|| Authority::try_from(authority).ok());
    let mut uri = std::mem::take(&mut parts.uri).into_parts();
    uri.scheme = Some(scheme.clone());
    if authority.is_some() {
        uri.authority = authority;
    }
    if uri.path_and_query.is_none() {
        uri.path_and_query = Some(PathAndQuery::from_static("/"));
    }
    parts.uri = Uri::from_parts(uri).unwrap_or_else(|_| Uri::from_static("/"));
    parts.version = http::Version::HTTP_2;
}

/// A `Host` field's value as an authority, when it is a valid one.
fn host_authority(host: &HeaderValue) -> Option<Authority> {
    Authority::try_from(host.as_bytes()).ok()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::AtomicUsize;
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn requests_that_wait_for_a_failing_connect_share_its_error() {
        let slot = Arc::new(H2Slot::default());
        let dials = Arc::new(AtomicUsize::new(0));
        let waiters: Vec<_> = (0..8)
            .map(|_| {
                let (slot, dials) = (Arc::clone(&slot), Arc::clone(&dials));
                tokio::spawn(async move {
                    let dial = || {
                        dials.fetch_add(1, Ordering::SeqCst);
                        async {
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            Err::<Socket, _>(UpstreamError::ConnectTimeout {
                                authority: "10.0.0.1:1".to_owned(),
                                ms: 50,
                            })
                        }
                    };
                    slot.sender("10.0.0.1:1", dial).await.map(|_| ())
                })
            })
            .collect();
        for w in waiters {
            let err = w.await.expect("task").expect_err("no server");
            assert!(matches!(err, UpstreamError::ConnectTimeout { .. }), "{err}");
        }
        assert_eq!(
            dials.load(Ordering::SeqCst),
            1,
            "one connect for all of them"
        );
        // A request that comes after the failure tries again.
        let again = slot
            .sender("10.0.0.1:1", || {
                dials.fetch_add(1, Ordering::SeqCst);
                async {
                    Err::<Socket, _>(UpstreamError::ConnectRefused {
                        authority: "10.0.0.1:1".to_owned(),
                    })
                }
            })
            .await;
        assert!(matches!(again, Err(UpstreamError::ConnectRefused { .. })));
        assert_eq!(dials.load(Ordering::SeqCst), 2);
    }

    fn head(fields: &[(&str, &str)]) -> http::request::Parts {
        let mut b = Request::builder().uri("http://10.0.0.9:1/a?b");
        for (k, v) in fields {
            b = b.header(*k, *v);
        }
        b.body(()).expect("request").into_parts().0
    }

    #[test]
    fn the_request_gets_the_servers_authority_and_no_connection_fields() {
        let mut parts = head(&[
            ("connection", "x-hop"),
            ("x-hop", "1"),
            ("keep-alive", "5"),
            ("transfer-encoding", "chunked"),
            ("upgrade", "h2c"),
            ("te", "trailers"),
            ("x-kept", "yes"),
        ]);
        prepare(&mut parts, &Scheme::HTTP, "10.0.0.1:8080");
        assert_eq!(parts.uri, "http://10.0.0.1:8080/a?b");
        assert_eq!(parts.version, http::Version::HTTP_2);
        for gone in [
            "connection",
            "x-hop",
            "keep-alive",
            "transfer-encoding",
            "upgrade",
            "host",
        ] {
            assert!(parts.headers.get(gone).is_none(), "{gone} kept");
        }
        assert_eq!(parts.headers["te"], "trailers");
        assert_eq!(parts.headers["x-kept"], "yes");
    }

    #[test]
    fn a_preserved_host_becomes_the_authority_and_te_other_than_trailers_goes() {
        let mut parts = head(&[("host", "example.com:8443"), ("te", "gzip")]);
        prepare(&mut parts, &Scheme::HTTP, "10.0.0.1:8080");
        assert_eq!(parts.uri, "http://example.com:8443/a?b");
        assert!(parts.headers.get("host").is_none());
        assert!(parts.headers.get("te").is_none());
    }
}
