//! `[upstream.tls]`, checked: how Weir verifies an `https://` upstream's
//! certificate (the roots, the name) and the client certificate it shows.
//! Every file is read and checked at config load, like a listener's, so a
//! bad one is a config error naming the file, line and key, never a failed
//! handshake later.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::RootCertStore;
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};
use serde::Deserialize;
use toml::Spanned;

use super::error::{ConfigError, Errors};
use super::tls::{KeyPair, key_pair, read_pem};

/// `[upstream.tls]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawUpstreamTls {
    pub ca: Option<Spanned<String>>,
    pub server_name: Option<Spanned<String>>,
    pub cert: Option<Spanned<String>>,
    pub key: Option<Spanned<String>>,
}

/// How Weir speaks TLS to the servers of an `https://` upstream.
#[derive(Debug, Clone)]
pub struct UpstreamTls {
    /// `ca`: the PEM bundle trusted instead of the system roots, resolved
    /// against the config file's directory; `None`: the system roots
    /// (Mozilla's CA list, compiled in).
    pub ca: Option<PathBuf>,
    /// The trust anchors a server's certificate must chain to: `ca`'s
    /// certificates, or the system roots.
    pub roots: Arc<RootCertStore>,
    /// `server_name`: the name sent as SNI and verified in the server's
    /// certificate, instead of the URL's host. A DNS name or an IP address
    /// (an IP address sends no SNI; the certificate must name the address).
    pub server_name: Option<String>,
    /// `cert` and `key`: the client certificate shown to a server that asks.
    pub client_cert: Option<ClientCert>,
}

/// A client certificate chain and its key, loaded and checked.
#[derive(Debug, Clone)]
pub struct ClientCert {
    /// The PEM file of the chain (end entity first), resolved against the
    /// config file's directory.
    pub cert_path: PathBuf,
    /// The PEM file of the private key, resolved likewise.
    pub key_path: PathBuf,
    /// The chain and its signing key (`ring`), checked to belong together.
    pub key: Arc<CertifiedKey>,
}

impl UpstreamTls {
    /// The settings of an `https://` upstream without `[upstream.tls]`:
    /// the system roots, the URL's host as the name, no client certificate.
    pub fn system_roots() -> UpstreamTls {
        UpstreamTls {
            ca: None,
            roots: Arc::new(RootCertStore {
                roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
            }),
            server_name: None,
            client_cert: None,
        }
    }

    /// Whether `self` and `other` were loaded from the same settings (the
    /// same files and name).
    pub fn same_as(&self, other: &UpstreamTls) -> bool {
        let files = |t: &UpstreamTls| {
            t.client_cert
                .as_ref()
                .map(|c| (c.cert_path.clone(), c.key_path.clone()))
        };
        self.ca == other.ca && self.server_name == other.server_name && files(self) == files(other)
    }
}

/// Equal when loaded from the same settings *and* the files held the same
/// certificates: a reload that rewrote the CA bundle or the client
/// certificate in place is a change (the upstream gets a new TLS client).
/// The private key is compared by its file and its certificate.
impl PartialEq for UpstreamTls {
    fn eq(&self, other: &UpstreamTls) -> bool {
        let chain = |t: &UpstreamTls| t.client_cert.as_ref().map(|c| c.key.cert.clone());
        self.same_as(other) && self.roots.roots == other.roots.roots && chain(self) == chain(other)
    }
}

impl Eq for UpstreamTls {}

/// `upstream[i].tls` for an upstream whose servers are `https://` when
/// `https`: the settings (the defaults when `raw` is `None`), or `None` for
/// an `http://` upstream, which may have no `[upstream.tls]`.
///
/// # Errors
/// [`ConfigError::Invalid`] naming the key: a `tls` table on an `http://`
/// upstream, an unreadable or empty `ca`, a `server_name` that is neither
/// a DNS name nor an IP address, `cert` without `key` (or the reverse), or
/// a client certificate [`key_pair`] refuses.
pub(super) fn upstream_tls(
    i: usize,
    raw: Option<&Spanned<RawUpstreamTls>>,
    https: bool,
    base_dir: &Path,
    errors: &Errors<'_>,
) -> Result<Option<UpstreamTls>, ConfigError> {
    let top = format!("upstream[{i}].tls");
    let Some(raw) = raw else {
        return Ok(https.then(UpstreamTls::system_roots));
    };
    if !https {
        return Err(errors.at(
            raw.span(),
            top,
            "`[upstream.tls]` applies only to an upstream whose servers are https:// URLs",
        ));
    }
    let tls = raw.get_ref();
    let mut settings = UpstreamTls::system_roots();
    if let Some(ca) = &tls.ca {
        let path = base_dir.join(ca.get_ref());
        let roots = roots(&path).map_err(|m| errors.at(ca.span(), format!("{top}.ca"), m))?;
        settings.roots = Arc::new(roots);
        settings.ca = Some(path);
    }
    if let Some(name) = &tls.server_name {
        if ServerName::try_from(name.get_ref().as_str()).is_err() {
            return Err(errors.at(
                name.span(),
                format!("{top}.server_name"),
                format!(
                    "{:?} is neither a DNS name nor an IP address",
                    name.get_ref()
                ),
            ));
        }
        settings.server_name = Some(name.get_ref().clone());
    }
    settings.client_cert = match (&tls.cert, &tls.key) {
        (None, None) => None,
        (Some(cert), Some(key)) => {
            let KeyPair {
                cert_path,
                key_path,
                certified,
                ..
            } = key_pair(
                (cert, &format!("{top}.cert")),
                (key, &format!("{top}.key")),
                base_dir,
                errors,
            )?;
            Some(ClientCert {
                cert_path,
                key_path,
                key: Arc::new(certified),
            })
        }
        (Some(cert), None) => {
            return Err(errors.at(
                cert.span(),
                format!("{top}.key"),
                "`cert` needs a `key` beside it",
            ));
        }
        (None, Some(key)) => {
            return Err(errors.at(
                key.span(),
                format!("{top}.cert"),
                "`key` needs a `cert` beside it",
            ));
        }
    };
    Ok(Some(settings))
}

/// The certificates of the PEM bundle at `path` as trust anchors.
fn roots(path: &Path) -> Result<RootCertStore, String> {
    let pem = read_pem(path)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{}: bad PEM: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!(
            "{}: no certificate in it (a PEM `-----BEGIN CERTIFICATE-----` block)",
            path.display()
        ));
    }
    let mut roots = RootCertStore::empty();
    for (n, cert) in certs.into_iter().enumerate() {
        roots.add(cert).map_err(|e| {
            format!(
                "{}: certificate {} is not a usable trust anchor ({e})",
                path.display(),
                n + 1
            )
        })?;
    }
    Ok(roots)
}
