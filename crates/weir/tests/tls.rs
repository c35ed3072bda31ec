//! TLS termination on a listener, end to end: curl (OpenSSL) as the client,
//! the built-in origin behind, certificates made at test time with rcgen.
//!
//! Pinned: HTTP/1.1 and HTTP/2 by ALPN, `X-Forwarded-Proto: https`, the
//! certificate chosen by SNI (and the default without SNI), TLS 1.1
//! refused, plain HTTP and silent clients closed without harm (before and
//! after the handshake), graceful shutdown of an in-flight TLS request, a
//! WebSocket over TLS, and config errors that name the file, line and key.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::certs::{Ca, ca, leaf};
use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A proxy whose one listener is TLS with `tls` (a TOML fragment under
/// `[[listener]]`), in front of a fresh built-in origin.
async fn tls_proxy(tls: &str, server: &str) -> (Proxy, Origin) {
    let origin = start_origin().await;
    let text = format!(
        "[[listener]]\naddress = \"127.0.0.1:0\"\n{tls}\n\n[server]\n{server}\n\n\
         [[upstream]]\nname = \"app\"\nurl = \"http://{}\"\n\n[[route]]\nupstream = \"app\"\n",
        origin.addr
    );
    (start_proxy(&text).await, origin)
}

/// `--resolve` for `name` to the proxy, and its `https://name:port` + `path`.
fn resolve(proxy: &Proxy, name: &str, path: &str) -> (String, String) {
    let port = proxy.addr.port();
    (
        format!("{name}:{port}:127.0.0.1"),
        format!("https://{name}:{port}{path}"),
    )
}

fn one_cert(dir: &Path) -> (Ca, String) {
    let ca = ca(dir, "one");
    let (cert, key) = leaf(dir, &ca, "site", &["a.test", "127.0.0.1"]);
    let tls = format!(
        "tls = {{ cert = \"{}\", key = \"{}\" }}",
        cert.display(),
        key.display()
    );
    (ca, tls)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_over_http1_and_h2_by_alpn_reaches_the_origin_as_https() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (ca, tls) = one_cert(dir.path());
    let (proxy, _origin) = tls_proxy(&tls, "").await;
    let (res, url) = resolve(&proxy, "a.test", "/echo");
    let cacert = ca.pem.display().to_string();
    for (flag, version) in [("--http1.1", "1.1"), ("--http2", "2")] {
        let out = curl(&[
            flag,
            "--cacert",
            &cacert,
            "--resolve",
            &res,
            "-w",
            "\n%{http_code} %{http_version}",
            &url,
        ]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{flag}: {text} {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let (body, tail) = text.rsplit_once('\n').expect("write-out line");
        assert_eq!(tail, format!("200 {version}"), "{flag}");
        let echo: serde_json::Value = serde_json::from_str(body).expect("echo JSON");
        let proto: Vec<&str> = echo["headers"]
            .as_array()
            .expect("headers")
            .iter()
            .filter(|h| h[0] == "x-forwarded-proto")
            .filter_map(|h| h[1].as_str())
            .collect();
        assert_eq!(proto, ["https"], "{flag}: {body}");
    }
    // A static file through the same listener, by IP (no SNI: the default).
    let out = curl(&[
        "--cacert",
        &cacert,
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        &format!("https://127.0.0.1:{}/", proxy.addr.port()),
    ]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "200");
    assert_eq!(proxy.metrics.tls_handshake_error_count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sni_chooses_the_certificate_and_a_client_without_sni_gets_the_first() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let (ca_a, ca_b) = (ca(d, "a"), ca(d, "b"));
    let (a_cert, a_key) = leaf(d, &ca_a, "a", &["a.test", "127.0.0.1"]);
    let (b_cert, b_key) = leaf(d, &ca_b, "b", &["b.test", "other.test"]);
    let tls = format!(
        "[[listener.tls.certificates]]\ncert = \"{}\"\nkey = \"{}\"\n\
         [[listener.tls.certificates]]\ncert = \"{}\"\nkey = \"{}\"\nserver_names = [\"b.test\"]\n",
        a_cert.display(),
        a_key.display(),
        b_cert.display(),
        b_key.display()
    );
    let (proxy, _origin) = tls_proxy(&tls, "").await;
    let get = |name: &str, ca: &Ca| {
        let (res, url) = resolve(&proxy, name, "/status/204");
        let out = curl(&[
            "--cacert",
            &ca.pem.display().to_string(),
            "--resolve",
            &res,
            "-w",
            "%{http_code}",
            &url,
        ]);
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    assert_eq!(get("a.test", &ca_a), (true, "204".to_owned()));
    assert_eq!(get("b.test", &ca_b), (true, "204".to_owned()));
    // Each name gets its own certificate: the other CA does not verify it.
    assert!(!get("a.test", &ca_b).0, "a.test was served b's certificate");
    assert!(!get("b.test", &ca_a).0, "b.test was served a's certificate");
    // `server_names` replaced b's SAN names: other.test is unknown, so it
    // gets the default (a's), which does not name it.
    let (res, url) = resolve(&proxy, "other.test", "/status/204");
    let out = curl(&["-k", "--resolve", &res, "-w", "%{certs}", &url]);
    let certs = String::from_utf8_lossy(&out.stdout);
    assert!(
        certs.contains("a.test") && !certs.contains("b.test"),
        "{certs}"
    );
    // By IP address curl sends no SNI: the first certificate, which has the IP.
    let out = curl(&[
        "--cacert",
        &ca_a.pem.display().to_string(),
        "-w",
        "%{http_code}",
        &format!("https://127.0.0.1:{}/status/204", proxy.addr.port()),
    ]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "204");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_1_1_client_is_refused_and_counted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (ca, tls) = one_cert(dir.path());
    let (proxy, _origin) = tls_proxy(&tls, "").await;
    let (res, url) = resolve(&proxy, "a.test", "/");
    // SECLEVEL=0 so that OpenSSL 3 sends a TLS 1.0/1.1 hello at all.
    let out = curl(&[
        "--cacert",
        &ca.pem.display().to_string(),
        "--resolve",
        &res,
        "--tlsv1.0",
        "--tls-max",
        "1.1",
        "--ciphers",
        "DEFAULT@SECLEVEL=0",
        &url,
    ]);
    assert!(!out.status.success(), "a TLS 1.1 client was served");
    assert!(
        eventually(Duration::from_secs(5), || proxy
            .metrics
            .tls_handshake_error_count()
            == 1)
        .await,
        "handshake errors: {}; curl said {}",
        proxy.metrics.tls_handshake_error_count(),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_http_to_a_tls_listener_is_closed_and_the_listener_keeps_serving() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (ca, tls) = one_cert(dir.path());
    let (proxy, _origin) = tls_proxy(&tls, "").await;
    let mut conn = TcpStream::connect(proxy.addr).await.expect("connect");
    conn.write_all(b"GET / HTTP/1.1\r\nHost: a.test\r\n\r\n")
        .await
        .expect("write");
    let mut got = Vec::new();
    // A plain-text 400 that says why, then the close.
    let read = tokio::time::timeout(Duration::from_secs(5), conn.read_to_end(&mut got)).await;
    assert!(read.is_ok(), "the connection was not closed");
    let got = String::from_utf8_lossy(&got);
    assert!(got.starts_with("HTTP/1.1 400 "), "{got}");
    assert!(got.ends_with("expects HTTPS, not plain HTTP\n"), "{got}");
    // Weir waits for the client's close (or the deadline) before counting.
    drop(conn);
    let out = curl(&[
        "-w",
        "%{http_code}",
        &format!("http://127.0.0.1:{}/", proxy.addr.port()),
    ]);
    assert!(String::from_utf8_lossy(&out.stdout).ends_with("400"));
    // Bytes that are neither TLS nor HTTP: the handshake fails, closed.
    let mut conn = TcpStream::connect(proxy.addr).await.expect("connect");
    conn.write_all(b"\x00\x01garbage\r\n").await.expect("write");
    let mut got = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), conn.read_to_end(&mut got)).await;
    assert!(read.is_ok(), "the connection was not closed");
    assert!(
        eventually(Duration::from_secs(5), || proxy
            .metrics
            .tls_handshake_error_count()
            == 3)
        .await
    );
    let (res, url) = resolve(&proxy, "a.test", "/status/204");
    let out = curl(&[
        "--cacert",
        &ca.pem.display().to_string(),
        "--resolve",
        &res,
        "-w",
        "%{http_code}",
        &url,
    ]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "204");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_sends_a_client_hello_is_closed_at_the_deadline() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_ca, tls) = one_cert(dir.path());
    let (proxy, _origin) = tls_proxy(&tls, "header_read_timeout = \"300ms\"").await;
    let start = Instant::now();
    let mut conn = TcpStream::connect(proxy.addr).await.expect("connect");
    let mut buf = [0u8; 64];
    let n = tokio::time::timeout(Duration::from_secs(5), conn.read(&mut buf))
        .await
        .expect("closed within 5 s")
        .unwrap_or(0);
    let elapsed = start.elapsed();
    assert_eq!(n, 0, "sent bytes to a silent client");
    assert!(
        elapsed >= Duration::from_millis(250) && elapsed < Duration::from_secs(3),
        "closed after {elapsed:?}"
    );
    assert_eq!(proxy.metrics.tls_handshake_error_count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_in_flight_https_request_finishes_during_graceful_shutdown() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (ca, tls) = one_cert(dir.path());
    let (proxy, _origin) = tls_proxy(&tls, "shutdown_grace = \"5s\"").await;
    let (res, url) = resolve(&proxy, "a.test", "/delay/700");
    let cacert = ca.pem.display().to_string();
    let request = std::thread::spawn(move || {
        curl(&[
            "--http2",
            "--cacert",
            &cacert,
            "--resolve",
            &res,
            "-w",
            "%{http_code} %{http_version}",
            "-o",
            "/dev/null",
            &url,
        ])
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    proxy.stop().await;
    let out = request.join().expect("curl thread");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "200 2");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_websocket_upgrade_works_over_tls() {
    use futures_util::{SinkExt as _, StreamExt as _};
    use tokio_tungstenite::tungstenite::Message;

    // An echo WebSocket upstream.
    let upstream = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let upstream_addr = upstream.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((stream, _)) = upstream.accept().await {
            tokio::spawn(async move {
                let Ok(mut ws) = tokio_tungstenite::accept_async(stream).await else {
                    return;
                };
                while let Some(Ok(msg)) = ws.next().await {
                    if msg.is_text() && ws.send(msg).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
    let dir = tempfile::tempdir().expect("tempdir");
    let (ca, tls) = one_cert(dir.path());
    let text = format!(
        "[[listener]]\naddress = \"127.0.0.1:0\"\n{tls}\n\n[[upstream]]\nname = \"ws\"\n\
         url = \"http://{upstream_addr}\"\n\n[[route]]\nupstream = \"ws\"\nupgrade = [\"websocket\"]\n"
    );
    let proxy = start_proxy(&text).await;

    let stream = tls_connect(&proxy, &ca, b"http/1.1").await;
    let (mut ws, response) =
        tokio_tungstenite::client_async(format!("wss://a.test:{}/ws", proxy.addr.port()), stream)
            .await
            .expect("WebSocket handshake through the proxy");
    assert_eq!(response.status(), 101);
    ws.send(Message::text("over tls")).await.expect("send");
    let echoed = tokio::time::timeout(Duration::from_secs(5), ws.next())
        .await
        .expect("echo within 5 s")
        .expect("a message")
        .expect("not an error");
    assert_eq!(echoed, Message::text("over tls"));
}

/// A rustls client connection to the proxy as `a.test`, trusting `ca`,
/// offering ALPN `alpn`.
async fn tls_connect(
    proxy: &Proxy,
    ca: &Ca,
    alpn: &[u8],
) -> tokio_rustls::client::TlsStream<TcpStream> {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(ca.issuer.der().clone())
        .expect("CA into the root store");
    let mut client = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("versions")
    .with_root_certificates(roots)
    .with_no_client_auth();
    client.alpn_protocols = vec![alpn.to_vec()];
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(client));
    let tcp = TcpStream::connect(proxy.addr).await.expect("connect");
    let name = rustls::pki_types::ServerName::try_from("a.test").expect("name");
    connector.connect(name, tcp).await.expect("TLS handshake")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_client_that_sends_no_request_is_closed_at_the_header_deadline() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (ca, tls) = one_cert(dir.path());
    let (proxy, _origin) = tls_proxy(&tls, "header_read_timeout = \"300ms\"").await;
    for alpn in [&b"http/1.1"[..], b"h2"] {
        let mut stream = tls_connect(&proxy, &ca, alpn).await;
        let start = Instant::now();
        let mut buf = Vec::new();
        // HTTP/2 sends its SETTINGS first; then nothing until the close.
        let read = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut buf)).await;
        let elapsed = start.elapsed();
        assert!(read.is_ok(), "{alpn:?}: not closed within 5 s");
        assert!(
            elapsed >= Duration::from_millis(250) && elapsed < Duration::from_secs(4),
            "{alpn:?}: closed after {elapsed:?}"
        );
    }
    assert_eq!(proxy.metrics.tls_handshake_error_count(), 0);
}

/// `weir check` on `text` written beside the certificates in `dir`.
fn check(dir: &Path, text: &str) -> (bool, String, String) {
    let path = dir.join("weir.toml");
    std::fs::write(&path, text).expect("write config");
    let out = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["check", "--config"])
        .arg(&path)
        .output()
        .expect("run weir check");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

const ROUTE: &str = "[[upstream]]\nname = \"app\"\nurl = \"http://127.0.0.1:3000\"\n[[route]]\nupstream = \"app\"\n";

#[test]
fn weir_check_prints_tls_listeners_and_names_the_file_line_and_key_of_bad_certificates() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let ca = ca(d, "check");
    leaf(d, &ca, "site", &["a.test", "*.a.test"]);
    leaf(d, &ca, "other", &["b.test"]);

    // Relative paths are relative to the config file's directory.
    let (ok, out, err) = check(
        d,
        &format!(
            "[[listener]]\naddress = \"127.0.0.1:8443\"\ntls = {{ cert = \"site.pem\", key = \"site.key\" }}\n{ROUTE}"
        ),
    );
    assert!(ok, "{err}");
    assert!(
        out.contains("listener  https://127.0.0.1:8443 tls"),
        "{out}"
    );
    assert!(
        out.contains("site.pem names=a.test,*.a.test (from SAN) default"),
        "{out}"
    );

    let (ok, _, err) = check(
        d,
        &format!(
            "[[listener]]\naddress = \"127.0.0.1:8443\"\ntls = {{ cert = \"missing.pem\", key = \"site.key\" }}\n{ROUTE}"
        ),
    );
    assert!(!ok);
    assert!(
        err.contains("weir.toml:3:") && err.contains("listener[0].tls.cert"),
        "{err}"
    );
    assert!(err.contains("missing.pem"), "{err}");

    let (ok, _, err) = check(
        d,
        &format!(
            "[[listener]]\naddress = \"127.0.0.1:8443\"\n\n[[listener.tls.certificates]]\ncert = \"site.pem\"\nkey = \"site.key\"\n\n\
             [[listener.tls.certificates]]\ncert = \"other.pem\"\nkey = \"site.key\"\n{ROUTE}"
        ),
    );
    assert!(!ok);
    assert!(
        err.contains("weir.toml:10:") && err.contains("listener[0].tls.certificates[1].key"),
        "{err}"
    );
    assert!(err.contains("does not match"), "{err}");
}
