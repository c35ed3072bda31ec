//! Opening one upstream connection: name resolution, TCP connect and, to an
//! `https://` server, the TLS handshake ([`super::tls`]) under the connect
//! deadline, `TCP_NODELAY`, the connection counted, the HTTP/1.1 handshake
//! (HTTP/2's is in [`super::h2`]), and the connection's task spawned.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use super::error::UpstreamError;
use super::stream::UpstreamStream;
use super::tls::{Alpn, TlsConnect};
use crate::body::request::RequestBody;
use crate::counted::Counted;

/// The sending half of one HTTP/1.1 upstream connection.
pub(crate) type Sender = http1::SendRequest<RequestBody>;

/// A new socket to a server: TCP, or TLS over TCP.
pub(crate) type Socket = TokioIo<UpstreamStream>;

/// Where a pool connects: the host and port of its authority, and TLS for
/// an `https://` server.
#[derive(Debug)]
pub(crate) struct Dial {
    /// The host as the URI gives it (brackets of an IPv6 literal removed).
    pub host: String,
    /// The port (80, or 443 for `https`, when the URI gives none).
    pub port: u16,
    /// The whole connect deadline (resolution, every address tried, and
    /// the TLS handshake).
    pub timeout: Duration,
    /// The TLS client of an `https://` server; `None`: cleartext.
    pub tls: Option<TlsConnect>,
}

impl Dial {
    /// Resolves, connects and handshakes HTTP/1.1; `counted` wraps the
    /// socket so the connection is counted for as long as it lives.
    ///
    /// # Errors
    /// [`UpstreamError::ConnectRefused`], [`UpstreamError::ConnectTimeout`]
    /// [`UpstreamError::Connect`] or [`UpstreamError::Tls`], naming `authority`.
    pub async fn open(
        &self,
        authority: &str,
        counted: impl FnOnce(Socket) -> Counted<Socket>,
    ) -> Result<Sender, UpstreamError> {
        self.open_with(authority, counted, false).await
    }

    /// [`Dial::open`] for a connection that may switch protocols
    /// (`101`, RFC 9110 §7.8): its connection task hands the socket over
    /// to `hyper::upgrade::on` instead of closing it.
    ///
    /// # Errors
    /// As [`Dial::open`].
    pub async fn open_upgradable(
        &self,
        authority: &str,
        counted: impl FnOnce(Socket) -> Counted<Socket>,
    ) -> Result<Sender, UpstreamError> {
        self.open_with(authority, counted, true).await
    }

    async fn open_with(
        &self,
        authority: &str,
        counted: impl FnOnce(Socket) -> Counted<Socket>,
        upgrades: bool,
    ) -> Result<Sender, UpstreamError> {
        let io = counted(self.socket(authority, Alpn::Http1).await?);
        let (sender, conn) = http1::Builder::new()
            .handshake(io)
            .await
            .map_err(|e| handshake_error(&e, authority))?;
        tokio::spawn(async move {
            let ended = if upgrades {
                conn.with_upgrades().await
            } else {
                conn.await
            };
            if let Err(e) = ended {
                tracing::debug!(target: "weir::upstream", "upstream connection ended: {e}");
            }
        });
        Ok(sender)
    }

    /// Resolves and connects, with `TCP_NODELAY`, then handshakes TLS
    /// offering `alpn` when the server is `https://`, all under the
    /// connect deadline: the socket every protocol's handshake starts from.
    ///
    /// # Errors
    /// [`UpstreamError::ConnectRefused`], [`UpstreamError::ConnectTimeout`],
    /// [`UpstreamError::Connect`] or [`UpstreamError::Tls`], naming
    /// `authority`.
    pub async fn socket(&self, authority: &str, alpn: Alpn) -> Result<Socket, UpstreamError> {
        let connect = async {
            let tcp = self
                .tcp()
                .await
                .map_err(|e| self.connect_error(&e, authority))?;
            // Small requests and responses must not wait for Nagle.
            let _ = tcp.set_nodelay(true);
            match &self.tls {
                None => Ok(UpstreamStream::Plain(tcp)),
                Some(tls) => {
                    let session = tls.handshake(tcp, alpn, authority).await?;
                    Ok(UpstreamStream::Tls(Box::new(session)))
                }
            }
        };
        match tokio::time::timeout(self.timeout, connect).await {
            Ok(stream) => stream.map(TokioIo::new),
            Err(_) => Err(UpstreamError::ConnectTimeout {
                authority: authority.to_owned(),
                ms: self.timeout.as_millis() as u64,
            }),
        }
    }

    /// The first address that accepts, in resolution order.
    async fn tcp(&self) -> io::Result<TcpStream> {
        if let Ok(ip) = self.host.parse::<IpAddr>() {
            return TcpStream::connect(SocketAddr::new(ip, self.port)).await;
        }
        let mut last = None;
        for addr in tokio::net::lookup_host((self.host.as_str(), self.port)).await? {
            match TcpStream::connect(addr).await {
                Ok(stream) => return Ok(stream),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| {
            io::Error::new(io::ErrorKind::NotFound, "the name resolved to no address")
        }))
    }

    fn connect_error(&self, err: &io::Error, authority: &str) -> UpstreamError {
        let authority = authority.to_owned();
        match err.kind() {
            io::ErrorKind::ConnectionRefused => UpstreamError::ConnectRefused { authority },
            // The kernel's own deadline (SYN retries) ran out first.
            io::ErrorKind::TimedOut => UpstreamError::ConnectTimeout {
                authority,
                ms: self.timeout.as_millis() as u64,
            },
            _ => UpstreamError::Connect {
                authority,
                detail: err.to_string(),
            },
        }
    }
}

/// A handshake that failed on an open socket: a connect failure.
pub(crate) fn handshake_error(err: &hyper::Error, authority: &str) -> UpstreamError {
    UpstreamError::Connect {
        authority: authority.to_owned(),
        detail: super::error::error_chain(err),
    }
}
