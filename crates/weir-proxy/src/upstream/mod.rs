//! The upstream client: a pool of HTTP/1.1 connections or one HTTP/2
//! connection per upstream server over hyper's connection API, over TCP or
//! TLS (the `tls` module), its deadlines, and the classification of its failures
//! into 502 and 504.

mod body;
mod connect;
mod error;
mod h2;
mod pool;
mod stream;
mod tls;

use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};

use http::uri::{Authority, PathAndQuery, Scheme};
use http::{Request, Response, Uri, Version, header};
use weir_stream::body::HttpBodySource;

pub use body::PooledBody;
use error::caused_by_lag;
pub use error::{SendFailure, UpstreamError, error_chain};
pub(crate) use pool::ServerPool;
pub use tls::TlsSetupError;

use crate::body::idle::IdleTimeout;
use crate::body::request::RequestBody;
use crate::config::{ClientSettings, UpstreamTls};
use crate::counted::ConnectionCounts;

/// An upstream response body as the proxy reads it: through hyper's body
/// adapter, under the body idle timeout.
pub type UpstreamBody = IdleTimeout<HttpBodySource<PooledBody>>;

/// The client for all upstreams: one server pool per upstream scheme and
/// authority (idle HTTP/1.1 connections, one HTTP/2 connection), made on
/// first use and kept.
#[derive(Debug, Clone)]
pub struct UpstreamClient {
    pools: Arc<RwLock<HashMap<String, Arc<ServerPool>>>>,
    settings: ClientSettings,
    counts: Arc<ConnectionCounts>,
}

impl UpstreamClient {
    /// Builds the client. Idle connections expire after
    /// `pool_idle_timeout` (a reaper task per server closes them).
    pub fn new(settings: &ClientSettings) -> Self {
        UpstreamClient {
            pools: Arc::default(),
            settings: settings.clone(),
            counts: Arc::new(ConnectionCounts::default()),
        }
    }

    /// Live upstream connections (pooled idle ones included), counted
    /// exactly: each connection decrements the count when it is dropped.
    pub fn connections(&self) -> &Arc<ConnectionCounts> {
        &self.counts
    }

    /// Sends `req` (with an absolute `http://` or `https://` URI) and waits for the
    /// response head: as a stream of the server's HTTP/2 connection when
    /// its version is HTTP/2, else over HTTP/1.1, in origin form (RFC 9112
    /// §3.2.1) with a `Host` field from the URI when the request has none.
    ///
    /// A request that a pooled connection could not take (it closed while
    /// idle, before anything was written) goes out on another connection.
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
    ) -> Result<Response<PooledBody>, UpstreamError> {
        let (parts, body) = req.into_parts();
        let pool = match (parts.uri.scheme(), parts.uri.authority()) {
            (Some(scheme), Some(authority))
                if *scheme == Scheme::HTTP || *scheme == Scheme::HTTPS =>
            {
                self.pool(scheme, authority, None)
                    .map_err(|e| UpstreamError::Tls {
                        authority: authority.to_string(),
                        reason: e.to_string(),
                    })?
            }
            _ => {
                return Err(UpstreamError::Connect {
                    authority: parts.uri.to_string(),
                    detail: "only absolute http:// and https:// upstream URIs are supported"
                        .to_owned(),
                });
            }
        };
        let set_host = !parts.headers.contains_key(header::HOST);
        self.send_on(&pool, Request::from_parts(parts, body), set_host, None)
            .await
            .map_err(|f| f.error)
    }

    /// Sends `req` on a connection of `pool` and waits for the response
    /// head, at most `response_header_timeout`, or `deadline` when that is
    /// shorter.
    ///
    /// A request of version HTTP/2 goes as a stream of the server's HTTP/2
    /// connection ([`h2::prepare`]: an absolute URI, the `Host` field as
    /// its authority when there is one); any other over HTTP/1.1, its URI
    /// made origin form and, with `set_host`, its `Host` field set to the
    /// server's authority.
    ///
    /// # Errors
    /// A [`SendFailure`]: what failed and, when nothing of the request was
    /// written (the connection could not be made), the request itself,
    /// intact, for another server.
    pub(crate) async fn send_on(
        &self,
        pool: &Arc<ServerPool>,
        req: Request<RequestBody>,
        set_host: bool,
        deadline: Option<std::time::Duration>,
    ) -> Result<Response<PooledBody>, SendFailure> {
        let (mut parts, body) = req.into_parts();
        let configured = self.settings.response_header_timeout;
        let deadline = deadline.map_or(configured, |d| d.min(configured));
        if parts.version == Version::HTTP_2 {
            h2::prepare(&mut parts, pool.scheme(), pool.authority());
            let req = Request::from_parts(parts, body);
            let sent = async {
                let sent = pool
                    .h2()
                    .exchange(pool.authority(), || pool.counted_h2_socket(), req);
                Ok(sent.await?.map(PooledBody::unpooled))
            };
            return within(deadline, pool, sent).await;
        }
        if set_host {
            parts
                .headers
                .insert(header::HOST, pool.host_field().clone());
        }
        if parts.uri.scheme().is_some() {
            parts.uri = origin_form(std::mem::take(&mut parts.uri));
        }
        let req = Request::from_parts(parts, body);
        within(deadline, pool, exchange(pool, req)).await
    }

    /// The pool of `authority` of a `scheme` URL, made on first use and
    /// kept: the servers of upstream groups resolve theirs once, with their
    /// upstream's `tls` settings (config validation gives an `https://`
    /// server one set of settings). A pool made here for an `https://`
    /// server no upstream lists, or with `tls` of `None`, verifies against
    /// the system roots.
    ///
    /// # Errors
    /// A [`TlsSetupError`] when the TLS client cannot be made for the host.
    pub(crate) fn pool(
        &self,
        scheme: &Scheme,
        authority: &Authority,
        tls: Option<&UpstreamTls>,
    ) -> Result<Arc<ServerPool>, TlsSetupError> {
        let key = format!("{scheme}://{authority}");
        if let Some(pool) = self
            .pools
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&key)
            .filter(|p| p.made_with(tls))
        {
            return Ok(Arc::clone(pool));
        }
        let mut pools = self.pools.write().unwrap_or_else(PoisonError::into_inner);
        if let Some(pool) = pools.get(&key).filter(|p| p.made_with(tls)) {
            return Ok(Arc::clone(pool));
        }
        // None yet, or one made with other TLS settings (a reload changed
        // them): the groups that hold the old pool keep it until they go.
        let pool = ServerPool::new(scheme, authority, tls, &self.settings, &self.counts)?;
        pools.insert(key, Arc::clone(&pool));
        Ok(pool)
    }
}

impl UpstreamClient {
    /// Sends `req`, a request to switch protocols (RFC 9110 §7.8), on a
    /// new connection of `pool`'s server of its own (counted, never
    /// pooled), and waits for the response head, at most
    /// `response_header_timeout`. The URI is made origin form; with
    /// `set_host`, `Host` is the server's authority. A `101` answer keeps
    /// the connection for `hyper::upgrade::on`; any other answer closes it
    /// once its body was read.
    ///
    /// # Cancel safety
    /// Dropping the future closes the connection.
    ///
    /// # Errors
    /// What failed: the connect, the exchange, or the deadline.
    pub(crate) async fn send_upgrade(
        &self,
        pool: &Arc<ServerPool>,
        req: Request<RequestBody>,
        set_host: bool,
    ) -> Result<Response<hyper::body::Incoming>, UpstreamError> {
        let (mut parts, body) = req.into_parts();
        if set_host {
            parts
                .headers
                .insert(header::HOST, pool.host_field().clone());
        }
        parts.uri = origin_form(std::mem::take(&mut parts.uri));
        let req = Request::from_parts(parts, body);
        let deadline = self.settings.response_header_timeout;
        let exchange = async {
            let mut sender = pool.connect_upgradable().await?;
            sender
                .send_request(req)
                .await
                .map_err(|e| request_error(&e, pool))
        };
        match tokio::time::timeout(deadline, exchange).await {
            Ok(sent) => sent,
            Err(_) => Err(UpstreamError::ResponseHeaderTimeout {
                authority: pool.authority().to_owned(),
                ms: deadline.as_millis() as u64,
            }),
        }
    }
}

/// `sent`, unless the response head takes longer than `deadline`.
async fn within(
    deadline: std::time::Duration,
    pool: &ServerPool,
    sent: impl Future<Output = Result<Response<PooledBody>, SendFailure>>,
) -> Result<Response<PooledBody>, SendFailure> {
    match tokio::time::timeout(deadline, sent).await {
        Ok(sent) => sent,
        Err(_) => Err(SendFailure {
            error: UpstreamError::ResponseHeaderTimeout {
                authority: pool.authority().to_owned(),
                ms: deadline.as_millis() as u64,
            },
            unsent: None,
        }),
    }
}

/// One exchange on `pool`: on an idle connection when one is ready, else on
/// a new one. A request an idle connection hands back unwritten (it closed
/// while idle) goes to the next.
async fn exchange(
    pool: &Arc<ServerPool>,
    mut req: Request<RequestBody>,
) -> Result<Response<PooledBody>, SendFailure> {
    loop {
        let (mut sender, reused) = match pool.take_idle() {
            Some(sender) => (sender, true),
            // Boxed: a connect's future is large and rarely needed; inline
            // it would grow every exchange's future.
            None => match Box::pin(pool.connect()).await {
                Ok(sender) => (sender, false),
                Err(error) => {
                    return Err(SendFailure {
                        error,
                        unsent: Some(req),
                    });
                }
            },
        };
        match sender.try_send_request(req).await {
            Ok(resp) => return Ok(resp.map(|body| PooledBody::new(body, pool, sender))),
            Err(mut e) => match e.take_message() {
                Some(unsent) if reused => req = unsent,
                unsent => {
                    return Err(SendFailure {
                        error: request_error(e.error(), pool),
                        unsent,
                    });
                }
            },
        }
    }
}

/// `uri` without its scheme and authority: `/path?query`.
fn origin_form(uri: Uri) -> Uri {
    let mut parts = uri.into_parts();
    parts.scheme = None;
    parts.authority = None;
    if parts.path_and_query.is_none() {
        parts.path_and_query = Some(PathAndQuery::from_static("/"));
    }
    Uri::from_parts(parts).unwrap_or_else(|_| Uri::from_static("/"))
}

/// A failure after the connection was open.
fn request_error(err: &hyper::Error, pool: &ServerPool) -> UpstreamError {
    let authority = pool.authority().to_owned();
    if caused_by_lag(err) {
        UpstreamError::BodyDetached { authority }
    } else {
        UpstreamError::Request {
            authority,
            detail: error_chain(err),
        }
    }
}

#[cfg(test)]
mod tests;
