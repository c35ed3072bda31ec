//! TLS to upstreams (`https://` URLs), end to end: a small TLS origin
//! (rustls in front of hyper, HTTP/1.1 and HTTP/2) on 127.0.0.1, Weir in
//! between, certificates made at test time with rcgen.
//!
//! Pinned: HTTP/1.1 and HTTP/2 over TLS with `ca`; SNI is the URL's host
//! (none for an IP address) or `server_name`; an expired certificate, one
//! for another name, an unknown CA and a plain-HTTP server are 502 with
//! the reason in the access log, and a failed handshake is retried on
//! another server; a client certificate for an origin that requires one;
//! health checks and a WebSocket over TLS; and config errors that name the
//! file, line and key; a reload that reads a changed CA file again.

mod common;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use common::access_log::{access_line, access_log};
use common::certs::{self, Ca, ca};
use common::*;
use http::{HeaderValue, Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

/// A leaf signed by `ca` (see `common::certs`); `expired` makes it valid
/// in 2020 only.
fn leaf(dir: &Path, ca: &Ca, file: &str, names: &[&str], expired: bool) -> (PathBuf, PathBuf) {
    if expired {
        certs::expired_leaf(dir, ca, file, names)
    } else {
        certs::leaf(dir, ca, file, names)
    }
}

/// A TLS origin on a free port of 127.0.0.1.
struct TlsOrigin {
    addr: SocketAddr,
    /// Requests answered.
    served: Arc<AtomicUsize>,
    _task: tokio::task::JoinHandle<()>,
}

/// Serves `cert`/`key` (ALPN `h2` and `http/1.1`) and, with `client_ca`,
/// requires a client certificate from that CA. Each answer says the HTTP
/// version (`x-version`) and the SNI name received (`x-sni`, `-` for none).
async fn tls_origin(cert: &Path, key: &Path, client_ca: Option<&Path>) -> TlsOrigin {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .expect("cert file")
        .collect::<Result<_, _>>()
        .expect("certs");
    let key = PrivateKeyDer::from_pem_file(key).expect("key");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .expect("versions");
    let builder = match client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for c in CertificateDer::pem_file_iter(ca).expect("ca file") {
                roots.add(c.expect("ca cert")).expect("root");
            }
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider,
            )
            .build()
            .expect("client verifier");
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder.with_single_cert(chain, key).expect("server config");
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let acceptor = TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let served = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&served);
    let task = tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (acceptor, count) = (acceptor.clone(), Arc::clone(&count));
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let sni = tls.get_ref().1.server_name().unwrap_or("-").to_owned();
                let service = service_fn(move |req: Request<Incoming>| {
                    count.fetch_add(1, Ordering::SeqCst);
                    let mut resp = Response::new(Full::new(Bytes::from_static(b"tls origin\n")));
                    let h = resp.headers_mut();
                    let version = format!("{:?}", req.version());
                    h.insert("x-version", HeaderValue::from_str(&version).expect("v"));
                    h.insert("x-sni", HeaderValue::from_str(&sni).expect("sni"));
                    std::future::ready(Ok::<_, Infallible>(resp))
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(tls), service)
                    .await;
            });
        }
    });
    TlsOrigin {
        addr,
        served,
        _task: task,
    }
}

/// A proxy to `url`, with `upstream` (more keys of the `[[upstream]]`,
/// e.g. `protocol`, then `[upstream.tls]`) after its `url`.
async fn proxy_to(url: &str, upstream: &str) -> Proxy {
    let text = format!(
        "[[listener]]\naddress = \"127.0.0.1:0\"\n\n[client]\nconnect_timeout = \"3s\"\n\n\
         [[upstream]]\nname = \"app\"\nurl = \"{url}\"\n{upstream}\n\n\
         [[route]]\nupstream = \"app\"\n"
    );
    start_proxy(&text).await
}

fn tls_table(ca: Option<&Path>, extra: &str) -> String {
    let ca = ca.map_or(String::new(), |p| format!("ca = \"{}\"\n", p.display()));
    format!("[upstream.tls]\n{ca}{extra}")
}

/// GET `path` through `proxy` over HTTP/1.1: the status and the `x-version`
/// and `x-sni` the origin answered with.
async fn get_through(proxy: &Proxy, path: &str) -> (u16, String, String) {
    let (status, headers, _) = get(&proxy.url(path), false).await;
    let field = |n: &str| {
        headers
            .get(n)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned()
    };
    (status.as_u16(), field("x-version"), field("x-sni"))
}

/// The access log's `reason` for `path`.
async fn reason_of(path: &str) -> String {
    let line = access_line(path, Duration::from_secs(5))
        .await
        .expect("access line");
    let reason = line.get("reason").cloned().unwrap_or_default();
    eprintln!("{path}: reason={reason}");
    reason
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_upstream_with_its_ca_over_http1_and_http2() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = ca(dir.path(), "one");
    let (cert, key) = leaf(dir.path(), &ca, "site", &["localhost", "127.0.0.1"], false);
    let origin = tls_origin(&cert, &key, None).await;
    let port = origin.addr.port();

    // By name: SNI is the URL's host.
    let proxy = proxy_to(
        &format!("https://localhost:{port}"),
        &tls_table(Some(&ca.pem), ""),
    )
    .await;
    let (status, version, sni) = get_through(&proxy, "/h1-by-name").await;
    assert_eq!(
        (status, version.as_str(), sni.as_str()),
        (200, "HTTP/1.1", "localhost")
    );
    let (_, _, body) = get(&proxy.url("/body"), false).await;
    assert_eq!(&body[..], b"tls origin\n");

    // By IP address: no SNI, the certificate's IP subjectAltName matches.
    let proxy = proxy_to(
        &format!("https://127.0.0.1:{port}"),
        &tls_table(Some(&ca.pem), ""),
    )
    .await;
    let (status, version, sni) = get_through(&proxy, "/h1-by-ip").await;
    assert_eq!(
        (status, version.as_str(), sni.as_str()),
        (200, "HTTP/1.1", "-")
    );

    // HTTP/2 over TLS (ALPN h2), with the "h2" alias.
    for protocol in ["h2", "h2c"] {
        let upstream = format!(
            "protocol = \"{protocol}\"\n{}",
            tls_table(Some(&ca.pem), "")
        );
        let proxy = proxy_to(&format!("https://localhost:{port}"), &upstream).await;
        let (status, version, _) = get_through(&proxy, "/h2").await;
        assert_eq!((status, version.as_str()), (200, "HTTP/2.0"), "{protocol}");
        let (status, version, _) = get_through(&proxy, "/h2-again").await;
        assert_eq!((status, version.as_str()), (200, "HTTP/2.0"), "{protocol}");
        assert_eq!(
            proxy.upstream_connections.opened(),
            1,
            "one HTTP/2 connection"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_certificate_is_a_502_whose_reason_says_expired() {
    access_log();
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = ca(dir.path(), "exp");
    let (cert, key) = leaf(dir.path(), &ca, "old", &["127.0.0.1"], true);
    let origin = tls_origin(&cert, &key, None).await;
    let url = format!("https://127.0.0.1:{}", origin.addr.port());
    let proxy = proxy_to(&url, &tls_table(Some(&ca.pem), "")).await;
    let (status, _, _) = get_through(&proxy, "/expired-cert").await;
    assert_eq!(status, 502);
    let reason = reason_of("/expired-cert").await;
    assert!(reason.contains("TLS handshake"), "{reason}");
    assert!(reason.to_lowercase().contains("expired"), "{reason}");
    assert_eq!(origin.served.load(Ordering::SeqCst), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_for_another_name_is_a_502_unless_server_name_says_that_name() {
    access_log();
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = ca(dir.path(), "other");
    let (cert, key) = leaf(dir.path(), &ca, "other", &["other.test"], false);
    let origin = tls_origin(&cert, &key, None).await;
    let url = format!("https://127.0.0.1:{}", origin.addr.port());

    let proxy = proxy_to(&url, &tls_table(Some(&ca.pem), "")).await;
    let (status, _, _) = get_through(&proxy, "/wrong-name").await;
    assert_eq!(status, 502);
    let reason = reason_of("/wrong-name").await;
    assert!(reason.contains("TLS handshake"), "{reason}");
    assert!(reason.contains("not valid for name"), "{reason}");

    let proxy = proxy_to(
        &url,
        &tls_table(Some(&ca.pem), "server_name = \"other.test\"\n"),
    )
    .await;
    let (status, _, sni) = get_through(&proxy, "/right-name").await;
    assert_eq!((status, sni.as_str()), (200, "other.test"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_ca_and_a_plain_http_server_are_502s() {
    access_log();
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = ca(dir.path(), "unknown");
    let (cert, key) = leaf(dir.path(), &ca, "site", &["127.0.0.1"], false);
    let origin = tls_origin(&cert, &key, None).await;

    // No `[upstream.tls]`: the system roots, which do not know the test CA.
    let proxy = proxy_to(&format!("https://127.0.0.1:{}", origin.addr.port()), "").await;
    let (status, _, _) = get_through(&proxy, "/unknown-ca").await;
    assert_eq!(status, 502);
    let reason = reason_of("/unknown-ca").await;
    assert!(reason.contains("UnknownIssuer"), "{reason}");

    let plain = start_origin().await;
    let proxy = proxy_to(&format!("https://{}", plain.addr), "").await;
    let (status, _, _) = get_through(&proxy, "/plain-http").await;
    assert_eq!(status, 502);
    let reason = reason_of("/plain-http").await;
    assert!(reason.contains("TLS handshake"), "{reason}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_certificate_is_shown_to_an_origin_that_requires_one() {
    access_log();
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = ca(dir.path(), "server");
    let clients = self::ca(dir.path(), "clients");
    let (cert, key) = leaf(dir.path(), &ca, "site", &["127.0.0.1"], false);
    let (client_cert, client_key) = leaf(dir.path(), &clients, "weir", &["weir.test"], false);
    let origin = tls_origin(&cert, &key, Some(&clients.pem)).await;
    let url = format!("https://127.0.0.1:{}", origin.addr.port());

    let with = format!(
        "cert = \"{}\"\nkey = \"{}\"\n",
        client_cert.display(),
        client_key.display()
    );
    let proxy = proxy_to(&url, &tls_table(Some(&ca.pem), &with)).await;
    let (status, _, _) = get_through(&proxy, "/with-client-cert").await;
    assert_eq!(status, 200);

    let proxy = proxy_to(&url, &tls_table(Some(&ca.pem), "")).await;
    let (status, _, _) = get_through(&proxy, "/without-client-cert").await;
    assert_eq!(status, 502);
    // TLS 1.3: the server's refusal comes after the client's handshake.
    let reason = reason_of("/without-client-cert").await;
    assert!(reason.contains("CertificateRequired"), "{reason}");
    assert_eq!(origin.served.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_checks_of_an_https_upstream_go_over_tls() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = ca(dir.path(), "health");
    let (cert, key) = leaf(dir.path(), &ca, "site", &["127.0.0.1"], false);
    let origin = tls_origin(&cert, &key, None).await;
    let upstream = format!(
        "[upstream.health]\npath = \"/health\"\ninterval = \"20ms\"\nfall = 1\nrise = 1\n\n{}",
        tls_table(Some(&ca.pem), "")
    );
    let proxy = proxy_to(
        &format!("https://127.0.0.1:{}", origin.addr.port()),
        &upstream,
    )
    .await;
    assert!(
        eventually(Duration::from_secs(5), || origin
            .served
            .load(Ordering::SeqCst)
            >= 3)
        .await,
        "checks reach the TLS origin"
    );
    // A failing check would have taken the one server out (503).
    let (status, _, _) = get_through(&proxy, "/after-checks").await;
    assert_eq!(status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_handshake_is_a_connect_failure_retried_on_another_server() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = ca(dir.path(), "retry");
    let (good_cert, good_key) = leaf(dir.path(), &ca, "good", &["127.0.0.1"], false);
    let (old_cert, old_key) = leaf(dir.path(), &ca, "old", &["127.0.0.1"], true);
    let good = tls_origin(&good_cert, &good_key, None).await;
    let expired = tls_origin(&old_cert, &old_key, None).await;
    let text = format!(
        "[[listener]]\naddress = \"127.0.0.1:0\"\n\n\
         [[upstream]]\nname = \"app\"\nservers = [\"https://{}\", \"https://{}\"]\n{}\n\n\
         [[route]]\nupstream = \"app\"\n",
        expired.addr,
        good.addr,
        tls_table(Some(&ca.pem), "")
    );
    let proxy = start_proxy(&text).await;
    for n in 0..4 {
        let (status, _, _) = get_through(&proxy, &format!("/retry-{n}")).await;
        assert_eq!(status, 200, "request {n}");
    }
    assert_eq!(good.served.load(Ordering::SeqCst), 4);
    let metrics = proxy.metrics.encode().expect("metrics");
    let failed = format!(
        "weir_upstream_attempts_total{{upstream=\"app\",server=\"{}\",result=\"connect_failed\"}}",
        expired.addr
    );
    assert!(
        metrics.contains(&failed),
        "{failed} missing from\n{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_websocket_goes_through_to_an_https_upstream() {
    use futures_util::{SinkExt as _, StreamExt as _};
    use tokio_tungstenite::tungstenite::Message;

    let dir = tempfile::tempdir().expect("tempdir");
    let ca = ca(dir.path(), "ws");
    let (cert, key) = leaf(dir.path(), &ca, "ws", &["127.0.0.1"], false);
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&cert)
        .expect("cert file")
        .collect::<Result<_, _>>()
        .expect("certs");
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("versions")
    .with_no_client_auth()
    .with_single_cert(chain, PrivateKeyDer::from_pem_file(&key).expect("key"))
    .expect("server config");
    let acceptor = TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let _echo = tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let Ok(mut ws) = tokio_tungstenite::accept_async(tls).await else {
                    return;
                };
                while let Some(Ok(msg)) = ws.next().await {
                    if msg.is_text() && ws.send(msg).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    let text = format!(
        "[[listener]]\naddress = \"127.0.0.1:0\"\n\n\
         [[upstream]]\nname = \"app\"\nurl = \"https://{addr}\"\n{}\n\n\
         [[route]]\nupstream = \"app\"\nupgrade = [\"websocket\"]\n",
        tls_table(Some(&ca.pem), "")
    );
    let proxy = start_proxy(&text).await;
    let tcp = tokio::net::TcpStream::connect(proxy.addr)
        .await
        .expect("connect");
    let (mut ws, resp) = tokio_tungstenite::client_async(format!("ws://{}/ws", proxy.addr), tcp)
        .await
        .expect("handshake through Weir");
    assert_eq!(resp.status().as_u16(), 101);
    ws.send(Message::text("over tls")).await.expect("send");
    let echoed = ws.next().await.expect("a message").expect("ok");
    assert_eq!(echoed.into_text().expect("text").as_str(), "over tls");
}

/// `weir check` of `upstream` (keys after an `https://` or `http://` url,
/// and tables), in `dir`: its status and stderr.
fn check(dir: &Path, url: &str, upstream: &str) -> (bool, String, PathBuf) {
    let path = dir.join("weir.toml");
    std::fs::write(
        &path,
        format!(
            "[[upstream]]\nname = \"app\"\nurl = \"{url}\"\n{upstream}\n\n[[route]]\nupstream = \"app\"\n"
        ),
    )
    .expect("write config");
    let out = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["check", "--config"])
        .arg(&path)
        .output()
        .expect("run weir check");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text, path)
}

#[test]
fn check_refuses_bad_upstream_tls_naming_file_line_and_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = ca(dir.path(), "check");
    let (cert, _) = leaf(dir.path(), &ca, "client", &["weir.test"], false);
    let cert = cert.display().to_string();
    for (url, upstream, line, key) in [
        (
            "http://127.0.0.1:8080",
            "[upstream.tls]\nca = \"check-ca.pem\"\n".to_owned(),
            4,
            "upstream[0].tls",
        ),
        (
            "https://127.0.0.1:8443",
            format!("[upstream.tls]\ncert = \"{cert}\"\n"),
            5,
            "upstream[0].tls.key",
        ),
        (
            "https://127.0.0.1:8443",
            "[upstream.tls]\nca = \"missing.pem\"\n".to_owned(),
            5,
            "upstream[0].tls.ca",
        ),
        (
            "https://127.0.0.1:8443",
            "[upstream.tls]\ninsecure_skip_verify = true\n".to_owned(),
            5,
            "insecure_skip_verify",
        ),
    ] {
        let (ok, text, path) = check(dir.path(), url, &upstream);
        assert!(!ok, "{upstream}: {text}");
        assert!(
            text.contains(&format!("{}:{line}:", path.display())),
            "{upstream}: {text}"
        );
        assert!(text.contains(key), "{upstream}: {text}");
    }
}

#[test]
fn check_prints_an_upstreams_tls_settings() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = ca(dir.path(), "print");
    let (cert, key) = leaf(dir.path(), &ca, "client", &["weir.test"], false);
    let upstream = format!(
        "[upstream.tls]\nca = \"print-ca.pem\"\nserver_name = \"api.test\"\ncert = \"{}\"\nkey = \"{}\"\n",
        cert.display(),
        key.display()
    );
    let (ok, text, _) = check(dir.path(), "https://127.0.0.1:8443", &upstream);
    assert!(ok, "{text}");
    assert!(text.contains("https://127.0.0.1:8443"), "{text}");
    assert!(
        text.contains(&format!("ca={}", dir.path().join("print-ca.pem").display())),
        "{text}"
    );
    assert!(text.contains("server_name=api.test"), "{text}");
    assert!(
        text.contains(&format!("client_cert={}", cert.display())),
        "{text}"
    );

    let (ok, text, _) = check(dir.path(), "https://example.com", "protocol = \"h2\"\n");
    assert!(ok, "{text}");
    assert!(text.contains("ca=system roots"), "{text}");
    assert!(
        text.contains("protocol h2 (HTTP/2 over TLS, ALPN h2)"),
        "{text}"
    );
}

/// A reload reads the upstream's CA file again: trusting the wrong CA is a
/// 502; after the same file is rewritten with the right CA and the config
/// reloaded, the upstream's pool is rebuilt and the request goes through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_reads_a_changed_upstream_ca_file_again() {
    let dir = tempfile::tempdir().expect("tempdir");
    let right = ca(dir.path(), "right");
    let wrong = ca(dir.path(), "wrong");
    let (cert, key) = leaf(dir.path(), &right, "site", &["127.0.0.1"], false);
    let origin = tls_origin(&cert, &key, None).await;
    let trust = dir.path().join("trust.pem");
    std::fs::copy(&wrong.pem, &trust).expect("copy CA");

    let config = format!(
        "[[listener]]\naddress = \"127.0.0.1:{{port}}\"\n\n\
         [[upstream]]\nname = \"app\"\nurl = \"https://127.0.0.1:{}\"\n{}\n\n\
         [[route]]\nupstream = \"app\"\n",
        origin.addr.port(),
        tls_table(Some(&trust), "")
    );
    let weir = WeirProcess::start(&config);
    let (status, _, _) = get(&weir.url("/before"), false).await;
    assert_eq!(status, 502);

    std::fs::copy(&right.pem, &trust).expect("copy CA");
    let raw = raw_exchange(
        weir.admin_addr(),
        b"POST /reload HTTP/1.1\r\nHost: admin\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
        Duration::from_secs(10),
    )
    .await;
    assert!(raw.starts_with("HTTP/1.1 200"), "{raw}");
    assert!(raw.contains("upstreams kept 0, new 1"), "{raw}");
    let (status, _, _) = get(&weir.url("/after"), false).await;
    assert_eq!(status, 200);
    assert_eq!(origin.served.load(Ordering::SeqCst), 1);
}
