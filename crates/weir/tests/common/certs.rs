//! Certificates made at test time with rcgen: a CA, and leaves it signs.

use std::path::{Path, PathBuf};

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, SanType};

/// A test CA: its certificate on disk, and the issuer that signs leaves.
pub struct Ca {
    pub pem: PathBuf,
    pub issuer: CertifiedIssuer<'static, KeyPair>,
}

/// Makes a CA named `name` in `dir` (`{name}-ca.pem`).
pub fn ca(dir: &Path, name: &str) -> Ca {
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(DnType::CommonName, format!("Weir test CA {name}"));
    let issuer =
        CertifiedIssuer::self_signed(params, KeyPair::generate().expect("key")).expect("CA");
    let pem = dir.join(format!("{name}-ca.pem"));
    std::fs::write(&pem, issuer.pem()).expect("write CA");
    Ca { pem, issuer }
}

/// A leaf for `names` (DNS names, or IP addresses) signed by `ca`, written
/// as `{file}.pem` (the leaf, then the CA) and `{file}.key`.
pub fn leaf(dir: &Path, ca: &Ca, file: &str, names: &[&str]) -> (PathBuf, PathBuf) {
    signed_leaf(dir, ca, file, names, false)
}

/// [`leaf`], valid in 2020 only: expired.
pub fn expired_leaf(dir: &Path, ca: &Ca, file: &str, names: &[&str]) -> (PathBuf, PathBuf) {
    signed_leaf(dir, ca, file, names, true)
}

fn signed_leaf(
    dir: &Path,
    ca: &Ca,
    file: &str,
    names: &[&str],
    expired: bool,
) -> (PathBuf, PathBuf) {
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
    params.distinguished_name.push(DnType::CommonName, names[0]);
    params.subject_alt_names = names
        .iter()
        .map(|n| match n.parse() {
            Ok(ip) => SanType::IpAddress(ip),
            Err(_) => SanType::DnsName((*n).try_into().expect("dns name")),
        })
        .collect();
    if expired {
        params.not_before = rcgen::date_time_ymd(2020, 1, 1);
        params.not_after = rcgen::date_time_ymd(2020, 12, 31);
    }
    let key = KeyPair::generate().expect("key");
    let cert = params.signed_by(&key, &ca.issuer).expect("sign");
    let cert_path = dir.join(format!("{file}.pem"));
    let key_path = dir.join(format!("{file}.key"));
    std::fs::write(&cert_path, format!("{}{}", cert.pem(), ca.issuer.pem())).expect("write");
    std::fs::write(&key_path, key.serialize_pem()).expect("write");
    (cert_path, key_path)
}
