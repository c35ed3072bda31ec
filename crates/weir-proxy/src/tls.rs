//! TLS termination on a listener: the acceptor built from a listener's
//! [`TlsSettings`], certificate choice by SNI, and the handshake under a
//! deadline.
//!
//! - **Versions.** TLS 1.3 and TLS 1.2, rustls' default set (which is
//!   exactly those two; rustls has no TLS 1.1 or older), with its default
//!   cipher suites, from the `ring` crypto provider.
//! - **ALPN** (RFC 7301): Weir offers `h2` and `http/1.1`, in that order of
//!   preference; a connection that chose `h2` is served as HTTP/2, any other
//!   (`http/1.1`, or a client that sent no ALPN) as HTTP/1.1.
//! - **SNI** (RFC 6066 §3): the certificate is chosen by the client's
//!   server name: an exact name first, then a `*.` wildcard for the name's
//!   parent (one label); a client without SNI, or with a name no
//!   certificate has, gets the listener's first certificate.
//!
//! [`server_config`] is the one place a [`rustls::ServerConfig`] is made
//! from config, so a reload that has read the files again calls it again.

use std::collections::HashMap;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use rustls::ServerConfig;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio::net::TcpStream;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

use crate::config::TlsSettings;

/// The ALPN protocol id of HTTP/2 (RFC 9113 §3.2).
const ALPN_H2: &[u8] = b"h2";
/// The ALPN protocol id of HTTP/1.1 (RFC 7301 §6).
const ALPN_HTTP1: &[u8] = b"http/1.1";

/// The rustls server config of a listener: its certificates behind an SNI
/// resolver, ALPN `h2` and `http/1.1`, TLS 1.3 and 1.2, the `ring` provider.
///
/// Cheap next to reading the files (which [`crate::config`] did at load):
/// a reload builds a new one from the new config and swaps the acceptor.
///
/// # Errors
/// A `rustls` error if the provider refuses the protocol versions (it does
/// not with `ring`; kept so that a provider change cannot panic).
pub fn server_config(settings: &TlsSettings) -> Result<Arc<ServerConfig>, rustls::Error> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(SniResolver::new(settings)));
    config.alpn_protocols = vec![ALPN_H2.to_vec(), ALPN_HTTP1.to_vec()];
    Ok(Arc::new(config))
}

/// Picks a listener's certificate by the ClientHello's server name.
#[derive(Debug)]
struct SniResolver {
    /// Exact names (lower-case).
    exact: HashMap<String, Arc<CertifiedKey>>,
    /// `*.example.com` entries, by `example.com`.
    wildcard: HashMap<String, Arc<CertifiedKey>>,
    /// The first certificate: no SNI, or a name no certificate has. (Config
    /// validation makes sure there is one; without, handshakes fail.)
    default: Option<Arc<CertifiedKey>>,
}

impl SniResolver {
    /// Indexes `settings`' certificates; a name given to several goes to the
    /// first (config validation refuses that for explicit `server_names`).
    fn new(settings: &TlsSettings) -> SniResolver {
        let mut exact = HashMap::new();
        let mut wildcard = HashMap::new();
        for cert in &settings.certificates {
            for name in &cert.server_names {
                let map = match name.strip_prefix("*.") {
                    Some(parent) => wildcard.entry(parent.to_owned()),
                    None => exact.entry(name.clone()),
                };
                map.or_insert_with(|| Arc::clone(&cert.key));
            }
        }
        let default = settings.certificates.first().map(|c| Arc::clone(&c.key));
        SniResolver {
            exact,
            wildcard,
            default,
        }
    }

    /// The certificate for SNI `name` (as sent: any case, maybe a trailing dot).
    fn lookup(&self, name: &str) -> Option<&Arc<CertifiedKey>> {
        let name = name.trim_end_matches('.');
        let lower;
        let name = if name.bytes().any(|b| b.is_ascii_uppercase()) {
            lower = name.to_ascii_lowercase();
            lower.as_str()
        } else {
            name
        };
        self.exact
            .get(name)
            .or_else(|| {
                let (_, parent) = name.split_once('.')?;
                self.wildcard.get(parent)
            })
            .or(self.default.as_ref())
    }
}

impl ResolvesServerCert for SniResolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        match hello.server_name() {
            Some(name) => self.lookup(name),
            None => self.default.as_ref(),
        }
        .cloned()
    }
}

/// Why a TLS handshake failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HandshakeError {
    /// The client did not finish the handshake within the deadline
    /// (`header_read_timeout`).
    #[error("no TLS handshake within {limit_ms} ms")]
    Timeout {
        /// The deadline.
        limit_ms: u64,
    },
    /// The client left, or sent what TLS refuses (plain HTTP, an old
    /// protocol version, no cipher suite in common, ...).
    #[error("TLS handshake failed: {0}")]
    Failed(#[source] io::Error),
}

impl HandshakeError {
    /// Whether the peer just went away (closed or reset) rather than sent
    /// something TLS refused: worth a debug line, not an info one.
    pub fn peer_left(&self) -> bool {
        match self {
            HandshakeError::Timeout { .. } => true,
            HandshakeError::Failed(e) => matches!(
                e.kind(),
                io::ErrorKind::UnexpectedEof
                    | io::ErrorKind::ConnectionReset
                    | io::ErrorKind::ConnectionAborted
                    | io::ErrorKind::BrokenPipe
            ),
        }
    }
}

/// Runs the server side of the TLS handshake on `stream`, for at most
/// `deadline`.
///
/// # Errors
/// [`HandshakeError::Timeout`] past the deadline, [`HandshakeError::Failed`]
/// when the handshake fails or the peer leaves.
///
/// # Cancel safety
/// Dropping the future drops the connection.
pub async fn handshake(
    acceptor: &TlsAcceptor,
    stream: TcpStream,
    deadline: Duration,
) -> Result<TlsStream<TcpStream>, HandshakeError> {
    match tokio::time::timeout(deadline, acceptor.accept(stream)).await {
        Ok(Ok(stream)) => Ok(stream),
        Ok(Err(e)) => Err(HandshakeError::Failed(e)),
        Err(_) => Err(HandshakeError::Timeout {
            limit_ms: u64::try_from(deadline.as_millis()).unwrap_or(u64::MAX),
        }),
    }
}

/// Whether the client chose HTTP/2 by ALPN.
pub fn negotiated_h2(stream: &TlsStream<TcpStream>) -> bool {
    stream.get_ref().1.alpn_protocol() == Some(ALPN_H2)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::TlsCertificate;

    /// A signing key that signs nothing: enough for resolver tests.
    fn no_key() -> Arc<dyn rustls::sign::SigningKey> {
        #[derive(Debug)]
        struct NoKey;
        impl rustls::sign::SigningKey for NoKey {
            fn choose_scheme(
                &self,
                _offered: &[rustls::SignatureScheme],
            ) -> Option<Box<dyn rustls::sign::Signer>> {
                None
            }
            fn algorithm(&self) -> rustls::SignatureAlgorithm {
                rustls::SignatureAlgorithm::Anonymous
            }
        }
        Arc::new(NoKey)
    }

    fn key() -> Arc<CertifiedKey> {
        Arc::new(CertifiedKey::new(Vec::new(), no_key()))
    }

    fn cert(names: &[&str], key: &Arc<CertifiedKey>) -> TlsCertificate {
        TlsCertificate {
            cert_path: "c.pem".into(),
            key_path: "k.pem".into(),
            server_names: names.iter().map(|n| (*n).to_owned()).collect(),
            names_from_san: false,
            key: Arc::clone(key),
        }
    }

    #[test]
    fn sni_picks_exact_then_wildcard_then_the_first_certificate() {
        let (a, b, c) = (key(), key(), key());
        let settings = TlsSettings {
            certificates: vec![
                cert(&["a.test"], &a),
                cert(&["*.b.test", "b.test"], &b),
                cert(&["x.b.test"], &c),
            ],
        };
        let r = SniResolver::new(&settings);
        assert!(Arc::ptr_eq(r.lookup("a.test").expect("a certificate"), &a));
        assert!(Arc::ptr_eq(r.lookup("A.Test.").expect("a certificate"), &a));
        assert!(Arc::ptr_eq(r.lookup("b.test").expect("a certificate"), &b));
        assert!(Arc::ptr_eq(
            r.lookup("y.b.test").expect("a certificate"),
            &b
        ));
        assert!(
            Arc::ptr_eq(r.lookup("x.b.test").expect("a certificate"), &c),
            "exact beats wildcard"
        );
        assert!(
            Arc::ptr_eq(r.lookup("z.y.b.test").expect("a certificate"), &a),
            "a wildcard covers one label"
        );
        assert!(Arc::ptr_eq(
            r.lookup("unknown.test").expect("a certificate"),
            &a
        ));
    }
}
