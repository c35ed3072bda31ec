//! Tests of a listener's `tls` table: files read and checked at load.

use std::path::Path;

use rcgen::{CertificateParams, KeyPair, SanType};

use super::*;

const ROUTE: &str = "[[upstream]]\nname = \"app\"\nurl = \"http://127.0.0.1:3000\"\n[[route]]\nupstream = \"app\"\n";

/// A self-signed certificate for `names` as `{file}.pem` and `{file}.key` in `dir`.
fn cert(dir: &Path, file: &str, names: &[&str]) {
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
    params.subject_alt_names = names
        .iter()
        .map(|n| match n.parse() {
            Ok(ip) => SanType::IpAddress(ip),
            Err(_) => SanType::DnsName((*n).try_into().expect("dns name")),
        })
        .collect();
    let key = KeyPair::generate().expect("key");
    let cert = params.self_signed(&key).expect("cert");
    std::fs::write(dir.join(format!("{file}.pem")), cert.pem()).expect("write");
    std::fs::write(dir.join(format!("{file}.key")), key.serialize_pem()).expect("write");
}

fn parse(dir: &Path, listener: &str) -> Result<Config, ConfigError> {
    Config::parse(
        &format!("[[listener]]\naddress = \"127.0.0.1:8443\"\n{listener}\n{ROUTE}"),
        "test.toml",
        dir,
    )
}

fn err(dir: &Path, listener: &str) -> String {
    match parse(dir, listener) {
        Ok(_) => panic!("accepted:\n{listener}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn certificates_load_with_san_names_by_default_and_the_first_is_the_default() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    cert(d, "a", &["A.test", "*.a.test", "127.0.0.1"]);
    cert(d, "b", &["b.test"]);
    let c = parse(
        d,
        "[listener.tls]\ncert = \"a.pem\"\nkey = \"a.key\"\n\
         [[listener.tls.certificates]]\ncert = \"b.pem\"\nkey = \"b.key\"\nserver_names = [\"B.example.\", \"*.b.example\"]\n",
    )
    .expect("valid");
    let tls = c.listeners[0].tls.as_ref().expect("tls");
    assert_eq!(tls.certificates.len(), 2);
    let (a, b) = (&tls.certificates[0], &tls.certificates[1]);
    assert_eq!(a.cert_path, d.join("a.pem"));
    assert_eq!(a.key_path, d.join("a.key"));
    assert!(a.names_from_san);
    // DNS names only, lower-cased; the IP address is no SNI name.
    assert_eq!(a.server_names, ["a.test", "*.a.test"]);
    assert!(!b.names_from_san);
    assert_eq!(b.server_names, ["b.example", "*.b.example"]);
    assert!(a.key.keys_match().is_ok());
    // The acceptor config builds from it.
    let server = crate::tls::server_config(tls).expect("server config");
    assert_eq!(
        server.alpn_protocols,
        [b"h2".to_vec(), b"http/1.1".to_vec()]
    );
}

#[test]
fn bad_certificate_files_name_the_file_line_and_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    cert(d, "a", &["a.test"]);
    cert(d, "b", &["b.test"]);
    cert(d, "ip", &["127.0.0.1"]);
    std::fs::write(d.join("empty.pem"), "# no PEM here\n").expect("write");
    std::fs::write(
        d.join("odd.key"),
        "-----BEGIN PRIVATE KEY-----\nAAECAwQFBgcICQ==\n-----END PRIVATE KEY-----\n",
    )
    .expect("write");
    let cases: &[(&str, &str, &str)] = &[
        (
            "tls = { cert = \"missing.pem\", key = \"a.key\" }",
            "test.toml:3:16: key `listener[0].tls.cert`",
            "cannot read",
        ),
        (
            "tls = { cert = \"a.pem\", key = \"missing.key\" }",
            "key `listener[0].tls.key`",
            "missing.key",
        ),
        (
            "tls = { cert = \"empty.pem\", key = \"a.key\" }",
            "key `listener[0].tls.cert`",
            "no certificate",
        ),
        (
            "tls = { cert = \"a.pem\", key = \"a.pem\" }",
            "key `listener[0].tls.key`",
            "no private key",
        ),
        (
            "tls = { cert = \"a.pem\", key = \"odd.key\" }",
            "key `listener[0].tls.key`",
            "unsupported private key",
        ),
        (
            "tls = { cert = \"a.pem\", key = \"b.key\" }",
            "test.toml:3:",
            "does not match the certificate",
        ),
        (
            "tls = { cert = \"a.pem\" }",
            "key `listener[0].tls.key`",
            "needs a `key`",
        ),
        ("tls = {}", "key `listener[0].tls`", "no certificate"),
        (
            "tls = { cert = \"a.pem\", key = \"a.key\", server_names = [] }",
            "listener[0].tls.server_names",
            "empty",
        ),
        (
            "tls = { cert = \"a.pem\", key = \"a.key\", server_names = [\"10.0.0.1\"] }",
            "listener[0].tls.server_names[0]",
            "not a DNS name",
        ),
        (
            "tls = { cert = \"a.pem\", key = \"a.key\", server_names = [\"a.*.test\"] }",
            "listener[0].tls.server_names[0]",
            "not a DNS name",
        ),
        (
            "[listener.tls]\ncert = \"a.pem\"\nkey = \"a.key\"\nserver_names = [\"x.test\"]\n\
             [[listener.tls.certificates]]\ncert = \"b.pem\"\nkey = \"b.key\"\nserver_names = [\"X.test\"]",
            "test.toml:10:17: key `listener[0].tls.certificates[0].server_names[0]`",
            "already the server name",
        ),
        (
            "[[listener.tls.certificates]]\ncert = \"a.pem\"\nkey = \"a.key\"\n\
             [[listener.tls.certificates]]\ncert = \"ip.pem\"\nkey = \"ip.key\"",
            "listener[0].tls.certificates[1].server_names",
            "no DNS host",
        ),
        (
            "tls = { cert = \"a.pem\", key = \"a.key\", alpn = [\"h2\"] }",
            "listener[0].tls",
            "unknown field",
        ),
    ];
    for (listener, location, message) in cases {
        let e = err(d, listener);
        assert!(e.contains(location), "{listener}: {e}");
        assert!(e.contains(message), "{listener}: {e}");
    }
}
