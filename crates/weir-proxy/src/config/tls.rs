//! A `[[listener]]`'s `tls` table: certificate and key files read, parsed
//! and checked at config load, so a bad file is a config error that names
//! the file, line and key, never a failed handshake later.
//!
//! What is checked, per certificate: the files can be read (at most
//! [`MAX_PEM_BYTES`] each); the certificate file holds at least one
//! `CERTIFICATE` block, the first of which (the end entity) parses as
//! X.509; the key file holds a private key (PKCS#8, PKCS#1 RSA or SEC1 EC)
//! of a type the `ring` provider signs with (RSA, ECDSA P-256/P-384,
//! Ed25519); and the key's public half is the certificate's. The
//! [`rustls::ServerConfig`] is built from the result by
//! `crate::tls::server_config`.

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, DnsName, PrivateKeyDer};
use serde::Deserialize;
use toml::Spanned;

use super::error::{ConfigError, Errors};

/// The most bytes read from one certificate or key file: 1 MiB.
pub const MAX_PEM_BYTES: u64 = 1 << 20;

/// `tls = { cert, key, server_names, certificates }` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTls {
    pub cert: Option<Spanned<String>>,
    pub key: Option<Spanned<String>>,
    pub server_names: Option<Spanned<Vec<Spanned<String>>>>,
    #[serde(default)]
    pub certificates: Vec<Spanned<RawCertificate>>,
}

/// One `[[listener.tls.certificates]]` entry as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCertificate {
    pub cert: Spanned<String>,
    pub key: Spanned<String>,
    pub server_names: Option<Spanned<Vec<Spanned<String>>>>,
}

/// A listener's TLS settings: the certificates it serves.
#[derive(Debug, Clone)]
pub struct TlsSettings {
    /// In file order (the top-level `cert`/`key` first, then each
    /// `[[listener.tls.certificates]]`). The first one is the default:
    /// served to a client that sends no SNI name, or one no certificate has.
    pub certificates: Vec<TlsCertificate>,
}

/// One certificate chain and its key, loaded and checked.
#[derive(Debug, Clone)]
pub struct TlsCertificate {
    /// The PEM file of the chain (end entity first), resolved against the
    /// config file's directory.
    pub cert_path: PathBuf,
    /// The PEM file of the private key, resolved likewise.
    pub key_path: PathBuf,
    /// The SNI names this certificate is chosen for, lower-case: exact
    /// names, and `*.example.com` for any one label under `example.com`.
    pub server_names: Vec<String>,
    /// Whether `server_names` are the DNS names of the certificate's
    /// subjectAltName (no `server_names` key was given).
    pub names_from_san: bool,
    /// The chain and its signing key (`ring`), checked to belong together.
    pub key: Arc<CertifiedKey>,
}

/// A certificate entry as the loader sees it, whichever way it was written.
struct Entry<'a> {
    /// The dotted key of the entry, e.g. `listener[0].tls.certificates[1]`.
    key: String,
    cert: &'a Spanned<String>,
    key_file: &'a Spanned<String>,
    server_names: Option<&'a Spanned<Vec<Spanned<String>>>>,
}

/// `listener[i].tls`, loaded: every certificate read and checked.
pub(super) fn listener_tls(
    i: usize,
    raw: &Spanned<RawTls>,
    base_dir: &Path,
    errors: &Errors<'_>,
) -> Result<TlsSettings, ConfigError> {
    let tls = raw.get_ref();
    let top = format!("listener[{i}].tls");
    let mut entries = Vec::new();
    match (&tls.cert, &tls.key) {
        (Some(cert), Some(key)) => entries.push(Entry {
            key: top.clone(),
            cert,
            key_file: key,
            server_names: tls.server_names.as_ref(),
        }),
        (None, None) => {
            if let Some(names) = &tls.server_names {
                return Err(errors.at(
                    names.span(),
                    format!("{top}.server_names"),
                    "server_names belongs with `cert` and `key`, or inside a [[listener.tls.certificates]] entry",
                ));
            }
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
    }
    for (j, c) in tls.certificates.iter().enumerate() {
        let c = c.get_ref();
        entries.push(Entry {
            key: format!("{top}.certificates[{j}]"),
            cert: &c.cert,
            key_file: &c.key,
            server_names: c.server_names.as_ref(),
        });
    }
    if entries.is_empty() {
        return Err(errors.at(
            raw.span(),
            top,
            "no certificate: give `cert` and `key`, or [[listener.tls.certificates]] entries",
        ));
    }

    let mut certificates: Vec<TlsCertificate> = Vec::with_capacity(entries.len());
    for (n, entry) in entries.iter().enumerate() {
        let loaded = load(entry, base_dir, errors)?;
        if n > 0 && loaded.server_names.is_empty() {
            return Err(errors.at(
                entry.cert.span(),
                format!("{}.server_names", entry.key),
                format!(
                    "{} names no DNS host in its subjectAltName, so no client could be given it; \
                     list the names it is for in `server_names`",
                    loaded.cert_path.display()
                ),
            ));
        }
        if !loaded.names_from_san
            && let Some(names) = entry.server_names
        {
            for (k, name) in loaded.server_names.iter().enumerate() {
                let earlier = certificates
                    .iter()
                    .find(|c| !c.names_from_san && c.server_names.contains(name));
                if earlier.is_some() {
                    return Err(errors.at(
                        names.get_ref()[k].span(),
                        format!("{}.server_names[{k}]", entry.key),
                        format!("{name:?} is already the server name of an earlier certificate"),
                    ));
                }
            }
        }
        certificates.push(loaded);
    }
    Ok(TlsSettings { certificates })
}

/// Reads and checks one certificate entry.
fn load(
    entry: &Entry<'_>,
    base_dir: &Path,
    errors: &Errors<'_>,
) -> Result<TlsCertificate, ConfigError> {
    let pair = key_pair(
        (entry.cert, &format!("{}.cert", entry.key)),
        (entry.key_file, &format!("{}.key", entry.key)),
        base_dir,
        errors,
    )?;
    let KeyPair {
        cert_path,
        key_path,
        certified,
        san_names,
    } = pair;
    let (server_names, names_from_san) = match entry.server_names {
        None => (san_names, true),
        Some(names) => (server_names(&entry.key, names, errors)?, false),
    };
    Ok(TlsCertificate {
        cert_path,
        key_path,
        server_names,
        names_from_san,
        key: Arc::new(certified),
    })
}

/// A certificate chain and its private key, read from their files and
/// checked to belong together.
pub(super) struct KeyPair {
    /// The chain's file, resolved against the config file's directory.
    pub cert_path: PathBuf,
    /// The key's file, resolved likewise.
    pub key_path: PathBuf,
    /// The chain (end entity first) and its signing key (`ring`).
    pub certified: CertifiedKey,
    /// The DNS names of the end entity's subjectAltName, lower-case.
    pub san_names: Vec<String>,
}

/// Reads the certificate file `cert` and the key file `key` (each with
/// its dotted key for errors), relative to `base_dir`, and checks them:
/// PEM, X.509, a key type `ring` signs with, the key matching the
/// certificate.
///
/// # Errors
/// [`ConfigError::Invalid`] at `cert` or `key`, saying what is wrong.
pub(super) fn key_pair(
    (cert, cert_key): (&Spanned<String>, &str),
    (key, key_key): (&Spanned<String>, &str),
    base_dir: &Path,
    errors: &Errors<'_>,
) -> Result<KeyPair, ConfigError> {
    let cert_err = |m: String| errors.at(cert.span(), cert_key, m);
    let key_err = |m: String| errors.at(key.span(), key_key, m);

    let cert_path = base_dir.join(cert.get_ref());
    let key_path = base_dir.join(key.get_ref());
    let cert_pem = read_pem(&cert_path).map_err(cert_err)?;
    let key_pem = read_pem(&key_path).map_err(key_err)?;

    let chain = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| cert_err(format!("{}: bad PEM: {e}", cert_path.display())))?;
    let Some(leaf) = chain.first() else {
        return Err(cert_err(format!(
            "{}: no certificate in it (a PEM `-----BEGIN CERTIFICATE-----` block)",
            cert_path.display()
        )));
    };
    let end_entity = webpki::EndEntityCert::try_from(leaf).map_err(|e| {
        cert_err(format!(
            "{}: the first certificate is not valid X.509 ({e})",
            cert_path.display()
        ))
    })?;
    let san_names: Vec<String> = end_entity
        .valid_dns_names()
        .map(|n| n.trim_end_matches('.').to_ascii_lowercase())
        .collect();

    let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| match e {
        rustls_pki_types::pem::Error::NoItemsFound => key_err(format!(
            "{}: no private key in it (a PEM `PRIVATE KEY`, `RSA PRIVATE KEY` or `EC PRIVATE KEY` block)",
            key_path.display()
        )),
        e => key_err(format!("{}: bad PEM: {e}", key_path.display())),
    })?;
    let signing_key = rustls::crypto::ring::sign::any_supported_type(&key).map_err(|e| {
        key_err(format!(
            "{}: unsupported private key ({e}); use RSA (2048 bits or more), ECDSA P-256 or P-384, or Ed25519",
            key_path.display()
        ))
    })?;
    let certified = CertifiedKey::new(chain, signing_key);
    match certified.keys_match() {
        Ok(()) => {}
        // The key cannot tell its public half: nothing to compare.
        Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => {}
        Err(rustls::Error::InconsistentKeys(_)) => {
            return Err(key_err(format!(
                "the key in {} does not match the certificate in {}",
                key_path.display(),
                cert_path.display()
            )));
        }
        Err(e) => {
            return Err(key_err(format!(
                "{} and {}: {e}",
                key_path.display(),
                cert_path.display()
            )));
        }
    }

    Ok(KeyPair {
        cert_path,
        key_path,
        certified,
        san_names,
    })
}

/// `server_names`, checked: DNS names or `*.` wildcards, lower-cased, each once.
fn server_names(
    entry: &str,
    names: &Spanned<Vec<Spanned<String>>>,
    errors: &Errors<'_>,
) -> Result<Vec<String>, ConfigError> {
    if names.get_ref().is_empty() {
        return Err(errors.at(
            names.span(),
            format!("{entry}.server_names"),
            "empty: leave `server_names` out to use the names in the certificate's subjectAltName",
        ));
    }
    let mut out: Vec<String> = Vec::with_capacity(names.get_ref().len());
    for (k, name) in names.get_ref().iter().enumerate() {
        let key = || format!("{entry}.server_names[{k}]");
        let text = name.get_ref().trim_end_matches('.').to_ascii_lowercase();
        let host = text.strip_prefix("*.").unwrap_or(&text);
        let valid = !host.is_empty()
            && !host.contains('*')
            && host.parse::<std::net::IpAddr>().is_err()
            && DnsName::try_from(host).is_ok();
        if !valid {
            return Err(errors.at(
                name.span(),
                key(),
                format!(
                    "{:?} is not a DNS name (an SNI name is a host name such as \"example.com\", \
                     or \"*.example.com\" for any one label under it; not an IP address)",
                    name.get_ref()
                ),
            ));
        }
        if out.contains(&text) {
            return Err(errors.at(name.span(), key(), format!("{text:?} is listed twice")));
        }
        out.push(text);
    }
    Ok(out)
}

/// The bytes of the regular file at `path`, at most [`MAX_PEM_BYTES`].
pub(super) fn read_pem(path: &Path) -> Result<Vec<u8>, String> {
    let cannot = |e: std::io::Error| format!("cannot read {}: {e}", path.display());
    let not_a_file = || format!("{} is not a regular file", path.display());
    // Checked before opening: `open` on a FIFO would wait for a writer.
    if !std::fs::metadata(path).map_err(cannot)?.is_file() {
        return Err(not_a_file());
    }
    let file = std::fs::File::open(path).map_err(cannot)?;
    if !file.metadata().map_err(cannot)?.is_file() {
        return Err(not_a_file());
    }
    let mut bytes = Vec::new();
    file.take(MAX_PEM_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(cannot)?;
    if bytes.len() as u64 > MAX_PEM_BYTES {
        return Err(format!(
            "{} is larger than {MAX_PEM_BYTES} bytes: not a PEM certificate or key",
            path.display()
        ));
    }
    Ok(bytes)
}
