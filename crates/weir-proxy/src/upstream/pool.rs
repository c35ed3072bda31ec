//! One upstream server's idle HTTP/1.1 connections (and the slot of its
//! one HTTP/2 connection, [`super::h2`]).
//!
//! A connection is checked out for one exchange and comes back only when
//! its response body was read to the end ([`super::body::PooledBody`]);
//! a body dropped half-read drops the connection with it, so hyper closes
//! it instead of pooling it mid-message. Idle connections are used last in,
//! first out, at most `pool_max_idle_per_host` are kept, and a reaper task
//! closes those idle for longer than `pool_idle_timeout`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, Instant};

use http::HeaderValue;
use http::uri::{Authority, Scheme};

use super::connect::{Dial, Sender, Socket};
use super::error::UpstreamError;
use super::h2::H2Slot;
use super::tls::{Alpn, TlsConnect, TlsSetupError};
use crate::config::ClientSettings;
use crate::counted::{ConnectionCounts, Counted, Counter};

/// The reaper never wakes more often than this.
const MIN_REAP_INTERVAL: Duration = Duration::from_millis(10);

/// One upstream server (`http://host:port` or `https://…`): its idle
/// connections and how to open new ones.
#[derive(Debug)]
pub(crate) struct ServerPool {
    /// `host:port` as the upstream URL gives it, for errors and counts.
    authority: String,
    /// `http` or `https`: the scheme of the URIs sent over HTTP/2.
    scheme: Scheme,
    /// The `Host` field sent when a request carries none (RFC 9112 §3.2:
    /// the authority, without the port when it is the scheme's default).
    host: HeaderValue,
    dial: Dial,
    counts: Arc<ConnectionCounts>,
    live: Counter,
    idle: Mutex<Vec<Idle>>,
    max_idle: usize,
    idle_timeout: Duration,
    reaper_started: AtomicBool,
    /// The server's one HTTP/2 connection, for requests sent over h2c.
    h2: H2Slot,
    /// The TLS settings the pool was made with (`None` for `http`), so a
    /// reload that changes them gets a new pool.
    tls_settings: Option<crate::config::UpstreamTls>,
}

#[derive(Debug)]
struct Idle {
    sender: Sender,
    since: Instant,
}

impl ServerPool {
    /// A pool for `authority` of a `scheme` URL (TLS with `tls` when the
    /// scheme is `https`), counting its connections into `counts`.
    ///
    /// # Errors
    /// A [`TlsSetupError`] when the TLS client cannot be made for the host.
    pub fn new(
        scheme: &Scheme,
        authority: &Authority,
        tls: Option<&crate::config::UpstreamTls>,
        settings: &ClientSettings,
        counts: &Arc<ConnectionCounts>,
    ) -> Result<Arc<ServerPool>, TlsSetupError> {
        let https = *scheme == Scheme::HTTPS;
        let default_port = if https { 443 } else { 80 };
        let port = authority.port_u16().unwrap_or(default_port);
        let host = authority.host();
        let host_field = if authority.port_u16() == Some(default_port) {
            host
        } else {
            authority.as_str()
        };
        let bare_host = host.trim_start_matches('[').trim_end_matches(']');
        let tls_settings = if https { tls.cloned() } else { None };
        let tls = match (https, tls) {
            (false, _) => None,
            (true, Some(tls)) => Some(TlsConnect::new(tls, bare_host)?),
            (true, None) => Some(TlsConnect::new(
                &crate::config::UpstreamTls::system_roots(),
                bare_host,
            )?),
        };
        Ok(Arc::new(ServerPool {
            authority: authority.as_str().to_owned(),
            scheme: scheme.clone(),
            // An `Authority` holds only bytes a field value may hold.
            host: HeaderValue::from_str(host_field)
                .unwrap_or_else(|_| HeaderValue::from_static("")),
            dial: Dial {
                host: bare_host.to_owned(),
                port,
                timeout: settings.connect_timeout,
                tls,
            },
            counts: Arc::clone(counts),
            live: counts.counter(authority.as_str()),
            idle: Mutex::new(Vec::new()),
            max_idle: settings.pool_max_idle_per_host,
            idle_timeout: settings.pool_idle_timeout,
            reaper_started: AtomicBool::new(false),
            h2: H2Slot::default(),
            tls_settings,
        }))
    }

    /// Whether the pool serves a request for TLS settings `tls`: always
    /// for `http`, and for `None` (a caller that takes the server's pool
    /// as it is: health checks, SSR and mirror requests); else when the
    /// pool was made with equal settings.
    pub(crate) fn made_with(&self, tls: Option<&crate::config::UpstreamTls>) -> bool {
        self.scheme != Scheme::HTTPS || tls.is_none_or(|t| self.tls_settings.as_ref() == Some(t))
    }

    /// `http` or `https`, as the upstream URL gives it.
    pub fn scheme(&self) -> &Scheme {
        &self.scheme
    }

    /// `host:port`, as the upstream URL gives it.
    pub fn authority(&self) -> &str {
        &self.authority
    }

    /// The `Host` field for requests that carry none.
    pub fn host_field(&self) -> &HeaderValue {
        &self.host
    }

    /// The most recently used idle connection that is still open and
    /// ready; expired and closed ones met on the way are dropped.
    pub fn take_idle(&self) -> Option<Sender> {
        let now = Instant::now();
        let mut idle = self.lock();
        while let Some(conn) = idle.pop() {
            if conn.sender.is_ready() && now.duration_since(conn.since) < self.idle_timeout {
                return Some(conn.sender);
            }
        }
        None
    }

    /// The server's HTTP/2 connection slot.
    pub(super) fn h2(&self) -> &H2Slot {
        &self.h2
    }

    /// A new socket to the server for HTTP/2 (TLS offering `h2` to an
    /// `https://` server), counted for as long as it lives.
    ///
    /// # Errors
    /// The connect failure, as [`Dial::socket`] gives it.
    pub(super) async fn counted_h2_socket(&self) -> Result<Counted<Socket>, UpstreamError> {
        let io = self.dial.socket(&self.authority, Alpn::H2).await?;
        Ok(Counted::new(io, self.counts.guard(&self.live)))
    }

    /// Opens a new HTTP/1.1 connection.
    ///
    /// # Errors
    /// The connect failure, as [`Dial::open`] gives it.
    pub async fn connect(&self) -> Result<Sender, UpstreamError> {
        let counts = &self.counts;
        let live = &self.live;
        self.dial
            .open(&self.authority, |io| Counted::new(io, counts.guard(live)))
            .await
    }

    /// Opens a connection of its own for one request that asks to switch
    /// protocols: counted like the others, never pooled.
    ///
    /// # Errors
    /// The connect failure, as [`Dial::open`] gives it.
    pub async fn connect_upgradable(&self) -> Result<Sender, UpstreamError> {
        let counts = &self.counts;
        let live = &self.live;
        self.dial
            .open_upgradable(&self.authority, |io| Counted::new(io, counts.guard(live)))
            .await
    }

    /// Takes back a connection whose exchange ended cleanly. One that is
    /// not ready yet (hyper has not finished the exchange on its side) is
    /// waited for by a small task, at most `pool_idle_timeout`.
    pub fn put_back(self: &Arc<Self>, mut sender: Sender) {
        if sender.is_closed() || self.max_idle == 0 {
            return;
        }
        if sender.is_ready() {
            self.push(sender);
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let pool = Arc::clone(self);
        runtime.spawn(async move {
            let ready = tokio::time::timeout(pool.idle_timeout, sender.ready()).await;
            if let Ok(Ok(())) = ready {
                pool.push(sender);
            }
        });
    }

    fn push(self: &Arc<Self>, sender: Sender) {
        {
            let mut idle = self.lock();
            if idle.len() >= self.max_idle {
                return;
            }
            idle.push(Idle {
                sender,
                since: Instant::now(),
            });
        }
        if !self.reaper_started.swap(true, Ordering::AcqRel)
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            let every = (self.idle_timeout / 2).max(MIN_REAP_INTERVAL);
            runtime.spawn(reap(Arc::downgrade(self), every));
        }
    }

    fn lock(&self) -> MutexGuard<'_, Vec<Idle>> {
        self.idle.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Every `every`, drops the idle connections that expired or closed, until
/// the pool itself is dropped.
async fn reap(pool: Weak<ServerPool>, every: Duration) {
    loop {
        tokio::time::sleep(every).await;
        let Some(pool) = pool.upgrade() else {
            return;
        };
        let now = Instant::now();
        let expired: Vec<Idle> = {
            let mut idle = pool.lock();
            let (keep, expired) = std::mem::take(&mut *idle).into_iter().partition(|c| {
                !c.sender.is_closed() && now.duration_since(c.since) < pool.idle_timeout
            });
            *idle = keep;
            expired
        };
        // Closed outside the lock.
        drop(expired);
    }
}
