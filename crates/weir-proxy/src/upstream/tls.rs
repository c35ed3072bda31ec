//! TLS to an `https://` upstream server: the rustls client configs built
//! from the upstream's [`UpstreamTls`], and the handshake on a new socket.
//!
//! - **Versions.** TLS 1.3 and TLS 1.2 (rustls' default set), the `ring`
//!   provider's default cipher suites.
//! - **Verification.** The server's chain must lead to one of the roots
//!   (`ca`, else the system roots) and name the server: the URL's host, or
//!   `server_name` when given. An IP address is matched against the
//!   certificate's IP subjectAltNames and sends no SNI (RFC 6066 §3).
//! - **ALPN** (RFC 7301). A connection opened for HTTP/1.1 offers
//!   `http/1.1`; one opened for HTTP/2 offers `h2` only and fails unless
//!   the server chose it (RFC 9113 §3.2). Which version a request goes
//!   over is the upstream's `protocol`, as over cleartext.
//! - **Client certificate.** Shown when the server asks and `cert`/`key`
//!   are set. A server that requires one and got none may fail the
//!   connection only after the client's side of a TLS 1.3 handshake is
//!   done, so that shows as a failed request rather than a failed handshake.

use std::sync::Arc;

use rustls::ClientConfig;
use rustls::sign::SingleCertAndKey;
use rustls_pki_types::ServerName;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

use super::error::{UpstreamError, error_chain};
use crate::config::UpstreamTls;

/// The ALPN protocol id of HTTP/2 (RFC 9113 §3.2).
const ALPN_H2: &[u8] = b"h2";
/// The ALPN protocol id of HTTP/1.1 (RFC 7301 §6).
const ALPN_HTTP1: &[u8] = b"http/1.1";

/// The HTTP version a connection is opened for, offered by ALPN over TLS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Alpn {
    /// `http/1.1`.
    Http1,
    /// `h2`.
    H2,
}

/// Why the TLS client of an `https://` upstream server could not be set up.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum TlsSetupError {
    /// The name to verify is neither a DNS name nor an IP address.
    #[error(
        "{name:?} is not a name a certificate can be verified for (a DNS name or an IP address)"
    )]
    ServerName {
        /// The URL's host, or `server_name`.
        name: String,
    },
    /// rustls refused the settings (not with the `ring` provider's
    /// defaults; kept so that a provider change cannot panic).
    #[error("cannot set up TLS: {0}")]
    Rustls(#[from] rustls::Error),
}

/// How one `https://` server is reached: a client config per ALPN offer,
/// and the name its certificate is verified for.
#[derive(Clone)]
pub(crate) struct TlsConnect {
    http1: TlsConnector,
    h2: TlsConnector,
    server_name: ServerName<'static>,
}

impl std::fmt::Debug for TlsConnect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsConnect")
            .field("server_name", &self.server_name)
            .finish_non_exhaustive()
    }
}

impl TlsConnect {
    /// The TLS client for server `host` (an IPv6 literal without brackets)
    /// of an upstream with `settings`.
    ///
    /// # Errors
    /// [`TlsSetupError::ServerName`] when the name to verify (`host`, or
    /// `server_name`) is not a DNS name or an IP address;
    /// [`TlsSetupError::Rustls`] when rustls refuses the config.
    pub fn new(settings: &UpstreamTls, host: &str) -> Result<TlsConnect, TlsSetupError> {
        let name = settings.server_name.as_deref().unwrap_or(host);
        let server_name =
            ServerName::try_from(name.to_owned()).map_err(|_| TlsSetupError::ServerName {
                name: name.to_owned(),
            })?;
        Ok(TlsConnect {
            http1: TlsConnector::from(client_config(settings, ALPN_HTTP1)?),
            h2: TlsConnector::from(client_config(settings, ALPN_H2)?),
            server_name,
        })
    }

    /// The client's handshake on `tcp`, offering `alpn`.
    ///
    /// # Errors
    /// [`UpstreamError::Tls`], naming `authority`: the handshake failed (a
    /// certificate that is expired, for another name or from an unknown
    /// CA; a peer that does not speak TLS), or, for [`Alpn::H2`], the
    /// server did not choose `h2`.
    pub async fn handshake(
        &self,
        tcp: TcpStream,
        alpn: Alpn,
        authority: &str,
    ) -> Result<TlsStream<TcpStream>, UpstreamError> {
        let connector = match alpn {
            Alpn::Http1 => &self.http1,
            Alpn::H2 => &self.h2,
        };
        let failed = |reason: String| UpstreamError::Tls {
            authority: authority.to_owned(),
            reason,
        };
        let stream = connector
            .connect(self.server_name.clone(), tcp)
            .await
            .map_err(|e| failed(error_chain(&e)))?;
        if alpn == Alpn::H2 && stream.get_ref().1.alpn_protocol() != Some(ALPN_H2) {
            return Err(failed(
                "the server did not choose HTTP/2 (ALPN \"h2\"); use protocol = \"http1\" for it"
                    .to_owned(),
            ));
        }
        Ok(stream)
    }
}

/// A client config of `settings` offering the one ALPN protocol `alpn`.
fn client_config(settings: &UpstreamTls, alpn: &[u8]) -> Result<Arc<ClientConfig>, rustls::Error> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(Arc::clone(&settings.roots));
    let mut config = match &settings.client_cert {
        Some(cert) => builder
            .with_client_cert_resolver(Arc::new(SingleCertAndKey::from(Arc::clone(&cert.key)))),
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![alpn.to_vec()];
    Ok(Arc::new(config))
}
