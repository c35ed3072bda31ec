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
    /// The client sent a plain HTTP request; it was answered `400` and
    /// closed.
    #[error("plain HTTP request on a TLS listener (answered 400 and closed)")]
    PlainHttp,
    /// The client left, or sent what TLS refuses (not TLS, an old protocol
    /// version, no cipher suite in common, ...).
    #[error("TLS handshake failed: {0}")]
    Failed(#[source] io::Error),
}

impl HandshakeError {
    /// Whether the peer just went away (closed or reset) rather than sent
    /// something TLS refused: worth a debug line, not an info one.
    pub fn peer_left(&self) -> bool {
        match self {
            HandshakeError::Timeout { .. } => true,
            HandshakeError::PlainHttp => false,
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

/// The first byte of a TLS handshake record (RFC 8446 §5.1, `ContentType
/// handshake`): what a ClientHello starts with.
const TLS_HANDSHAKE_RECORD: u8 = 0x16;

/// What a client that sent plain HTTP to a TLS listener is told.
const PLAIN_HTTP_ANSWER: &[u8] = b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\n\
Content-Length: 40\r\nConnection: close\r\n\r\nThis port expects HTTPS, not plain HTTP\n";

/// Runs the server side of the TLS handshake on `stream`, for at most
/// `deadline` from the call.
///
/// A connection whose first byte is an upper-case ASCII letter (the start
/// of an HTTP method) is taken for plain HTTP: it is answered with a short
/// `400` in plain text and closed, as nginx and Go's server do, so that the
/// client's user sees what went wrong rather than a broken connection.
///
/// # Errors
/// [`HandshakeError::Timeout`] past the deadline,
/// [`HandshakeError::PlainHttp`] for a plain HTTP request,
/// [`HandshakeError::Failed`] when the handshake fails or the peer leaves.
///
/// # Cancel safety
/// Dropping the future drops the connection.
pub async fn handshake(
    acceptor: &TlsAcceptor,
    stream: TcpStream,
    deadline: Duration,
) -> Result<TlsStream<TcpStream>, HandshakeError> {
    let attempt = async {
        let mut first = [0u8; 1];
        let n = stream
            .peek(&mut first)
            .await
            .map_err(HandshakeError::Failed)?;
        if n == 1 && first[0] != TLS_HANDSHAKE_RECORD && first[0].is_ascii_uppercase() {
            return Err(refuse_plain_http(stream).await);
        }
        acceptor
            .accept(stream)
            .await
            .map_err(HandshakeError::Failed)
    };
    match tokio::time::timeout(deadline, attempt).await {
        Ok(result) => result,
        Err(_) => Err(HandshakeError::Timeout {
            limit_ms: u64::try_from(deadline.as_millis()).unwrap_or(u64::MAX),
        }),
    }
}

/// The most bytes of a plain HTTP client's request read (and dropped)
/// after its `400`, waiting for it to close first.
const PLAIN_HTTP_DRAIN: usize = 64 * 1024;

/// Answers a plain HTTP client `400` and closes the connection: the write
/// side first, then what the client sent is read and dropped until it
/// closes (at most [`PLAIN_HTTP_DRAIN`] bytes, within the caller's
/// deadline), so that unread request bytes do not turn the close into a
/// reset that could destroy the answer before the client reads it.
async fn refuse_plain_http(mut stream: TcpStream) -> HandshakeError {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    if let Err(e) = stream.write_all(PLAIN_HTTP_ANSWER).await {
        return HandshakeError::Failed(e);
    }
    let _ = stream.shutdown().await;
    let mut buf = [0u8; 4096];
    let mut drained = 0;
    while drained < PLAIN_HTTP_DRAIN {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => drained += n,
        }
    }
    HandshakeError::PlainHttp
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
    fn the_plain_http_answer_is_a_whole_response() {
        let text = std::str::from_utf8(PLAIN_HTTP_ANSWER).expect("ASCII");
        let (head, body) = text.split_once("\r\n\r\n").expect("head and body");
        assert!(head.starts_with("HTTP/1.1 400 "), "{head}");
        assert!(
            head.contains(&format!("Content-Length: {}", body.len())),
            "{head}"
        );
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
