//! Plain HTTP/2 upstreams (h2c, prior knowledge) on 127.0.0.1: trailers
//! both ways, `protocol = "auto"`, and a refused stream retried on another
//! server.

mod common;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use common::*;
use http::{HeaderMap, HeaderValue, Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;

/// An upstream that reads the whole request and answers with its body
/// length, the HTTP version it was spoken to in (`x-version`), and the
/// trailers `x-sum: <length>` and `x-echo: <the request's x-req trailer>`.
async fn echo(req: Request<Incoming>) -> Result<Response<EchoBody>, Infallible> {
    let version = format!("{:?}", req.version());
    let collected = req.into_body().collect().await.ok();
    let request_trailer = collected
        .as_ref()
        .and_then(|c| c.trailers())
        .and_then(|t| t.get("x-req"))
        .cloned()
        .unwrap_or(HeaderValue::from_static("none"));
    let len = collected.map_or(0, |c| c.to_bytes().len());
    let mut trailers = HeaderMap::new();
    trailers.insert("x-sum", HeaderValue::from(len));
    trailers.insert("x-echo", request_trailer);
    let body = Full::new(Bytes::from(format!("{len} bytes\n")))
        .with_trailers(std::future::ready(Some(Ok(trailers))));
    let mut resp = Response::new(body);
    resp.headers_mut()
        .insert("x-version", HeaderValue::from_str(&version).expect("value"));
    Ok(resp)
}

type EchoBody = http_body_util::combinators::WithTrailers<
    Full<Bytes>,
    std::future::Ready<Option<Result<HeaderMap, Infallible>>>,
>;

/// A server on a free port: HTTP/2 only (`h2_only`) or HTTP/1.1 and
/// HTTP/2 (hyper-util's auto).
async fn upstream(h2_only: bool) -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let task = tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut builder =
                    hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
                if h2_only {
                    builder = builder.http2_only();
                }
                let _ = builder
                    .serve_connection(TokioIo::new(stream), service_fn(echo))
                    .await;
            });
        }
    });
    (addr, task)
}

fn weir_config(servers: &[SocketAddr], protocol: &str) -> String {
    let list: Vec<String> = servers.iter().map(|a| format!("\"http://{a}\"")).collect();
    format!(
        "[[listener]]\naddress = \"127.0.0.1:0\"\n\n\
         [[upstream]]\nname = \"app\"\nservers = [{}]\nprotocol = \"{protocol}\"\n\n\
         [[route]]\npath_prefix = \"/\"\nupstream = \"app\"\n",
        list.join(", ")
    )
}

type TrailerBody = EchoBody;

/// A body of `data` followed by the trailer `x-req: <req>`.
fn with_trailer(data: &'static [u8], req: &'static str) -> TrailerBody {
    let mut t = HeaderMap::new();
    t.insert("x-req", HeaderValue::from_static(req));
    Full::new(Bytes::from_static(data)).with_trailers(std::future::ready(Some(Ok(t))))
}

/// A client that sends bodies with trailers: HTTP/2 prior knowledge, or
/// HTTP/1.1.
fn trailer_client(
    h2: bool,
) -> Client<hyper_util::client::legacy::connect::HttpConnector, TrailerBody> {
    let mut b = Client::builder(TokioExecutor::new());
    if h2 {
        b.http2_only(true);
    }
    b.build_http()
}

#[tokio::test]
async fn trailers_go_both_ways_through_an_h2c_upstream() {
    let (addr, _task) = upstream(true).await;
    let proxy = start_proxy(&weir_config(&[addr], "h2c")).await;
    let req = Request::post(proxy.url("/upload"))
        .body(with_trailer(b"twelve bytes", "from-the-client"))
        .expect("request");
    let resp = trailer_client(true).request(req).await.expect("response");
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["x-version"], "HTTP/2.0", "spoken h2c");
    let body = resp.into_body().collect().await.expect("body");
    let trailers = body.trailers().cloned().expect("response trailers arrived");
    assert_eq!(body.to_bytes(), "12 bytes\n");
    assert_eq!(trailers["x-sum"], "12");
    assert_eq!(
        trailers["x-echo"], "from-the-client",
        "the request trailer reached the upstream"
    );
}

#[tokio::test]
async fn curl_over_h2_prior_knowledge_reaches_an_h2c_upstream() {
    let (addr, _task) = upstream(true).await;
    let proxy = start_proxy(&weir_config(&[addr], "h2c")).await;
    let url = proxy.url("/x");
    let out = tokio::task::spawn_blocking(move || {
        curl(&["--http2-prior-knowledge", "-v", "-d", "hello", &url])
    })
    .await
    .expect("curl");
    let body = String::from_utf8_lossy(&out.stdout);
    let trace = String::from_utf8_lossy(&out.stderr).to_lowercase();
    assert!(out.status.success(), "{trace}");
    assert_eq!(body, "5 bytes\n");
    assert!(trace.contains("< http/2 200"), "{trace}");
    assert!(trace.contains("< x-version: http/2.0"), "{trace}");
    assert!(trace.contains("< via: 2 weir"), "{trace}");
    // curl 7.88 shows no HTTP/2 trailer fields, not even straight from the
    // upstream: trailers are checked with hyper's client above.
}

#[tokio::test]
async fn auto_speaks_h2c_to_http2_and_grpc_requests_and_http1_to_the_rest() {
    let (addr, _task) = upstream(false).await;
    let proxy = start_proxy(&weir_config(&[addr], "auto")).await;
    let (_, h2, _) = get(&proxy.url("/a"), true).await;
    assert_eq!(h2["x-version"], "HTTP/2.0");
    let (_, h1, _) = get(&proxy.url("/a"), false).await;
    assert_eq!(h1["x-version"], "HTTP/1.1");
    let grpc = Request::post(proxy.url("/svc/Method"))
        .header("content-type", "application/grpc+proto")
        .body(Full::new(Bytes::from_static(b"\0\0\0\0\0")))
        .expect("request");
    let resp = client(false).request(grpc).await.expect("response");
    assert_eq!(
        resp.headers()["x-version"],
        "HTTP/2.0",
        "gRPC over an HTTP/1.1 hop goes h2c"
    );
}

/// An HTTP/2 server that refuses every stream (`RST_STREAM` with
/// `REFUSED_STREAM`), counting them.
async fn refusing() -> (SocketAddr, Arc<AtomicUsize>, tokio::task::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let refused = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&refused);
    let task = tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let count = Arc::clone(&count);
            tokio::spawn(async move {
                let Ok(mut conn) = h2::server::handshake(stream).await else {
                    return;
                };
                while let Some(Ok((_req, mut respond))) = conn.accept().await {
                    count.fetch_add(1, Ordering::SeqCst);
                    respond.send_reset(h2::Reason::REFUSED_STREAM);
                }
            });
        }
    });
    (addr, refused, task)
}

#[tokio::test]
async fn a_refused_post_is_retried_on_another_server() {
    let (refuser, refused, _t1) = refusing().await;
    let (good, _t2) = upstream(true).await;
    let proxy = start_proxy(&weir_config(&[refuser, good], "h2c")).await;
    for i in 0..4 {
        let req = Request::post(proxy.url("/order"))
            .body(Full::new(Bytes::from_static(b"not idempotent")))
            .expect("request");
        let resp = client(true).request(req).await.expect("response");
        assert_eq!(resp.status(), 200, "request {i}");
        let body = resp.into_body().collect().await.expect("body").to_bytes();
        assert_eq!(
            body, "14 bytes\n",
            "the body went whole to the second server"
        );
    }
    assert!(
        refused.load(Ordering::SeqCst) >= 1,
        "round robin sent some requests to the refusing server first"
    );
}

#[tokio::test]
async fn health_checks_of_an_h2c_upstream_speak_http2() {
    let (addr, _task) = upstream(true).await;
    let config = weir_config(&[addr], "h2c")
        .replace(
            "[[route]]",
            "[upstream.health]\npath = \"/health\"\ninterval = \"20ms\"\nfall = 1\nrise = 1\n\n[[route]]",
        );
    let proxy = start_proxy(&config).await;
    // Several checks have run: an HTTP/1.1 check would have failed against
    // this HTTP/2-only server and taken it out (503).
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let (status, headers, _) = get(&proxy.url("/a"), false).await;
    assert_eq!(status, 200);
    assert_eq!(headers["x-version"], "HTTP/2.0");
    assert_eq!(
        proxy.upstream_connections.opened(),
        1,
        "checks and requests share the one HTTP/2 connection"
    );
}

#[tokio::test]
async fn a_mirror_copy_to_an_h2c_upstream_goes_over_http2() {
    let (primary, _t1) = upstream(false).await;
    let (shadow, _t2) = upstream(true).await;
    let config = format!(
        "[[listener]]\naddress = \"127.0.0.1:0\"\n\n\
         [[upstream]]\nname = \"app\"\nurl = \"http://{primary}\"\n\n\
         [[upstream]]\nname = \"shadow\"\nurl = \"http://{shadow}\"\nprotocol = \"h2c\"\n\n\
         [[route]]\npath_prefix = \"/\"\nupstream = \"app\"\n\n\
         [route.mirror]\nupstream = \"shadow\"\n"
    );
    let proxy = start_proxy(&config).await;
    let (status, headers, _) = get(&proxy.url("/a"), false).await;
    assert_eq!(
        (status.as_u16(), &headers["x-version"]),
        (200, &HeaderValue::from_static("HTTP/1.1"))
    );
    let stats = proxy.metrics.clone();
    // An HTTP/1.1 copy would fail against the HTTP/2-only shadow.
    assert!(
        eventually(std::time::Duration::from_secs(5), || stats
            .mirror_request_count(weir_proxy::outcome::MirrorOutcome::Ok)
            == 1)
        .await,
        "the copy was answered"
    );
}

/// An HTTP/2 server that answers the client preface with an empty
/// `SETTINGS` and a graceful `GOAWAY` (`NO_ERROR`, last stream id 0): it
/// processes no stream at all. Frames written by hand (RFC 9113 §6.5, §6.8).
async fn going_away() -> (SocketAddr, tokio::task::JoinHandle<()>) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let task = tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let settings = [0, 0, 0, 4, 0, 0, 0, 0, 0];
                let goaway = [0, 0, 8, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
                if stream.write_all(&settings).await.is_err()
                    || stream.write_all(&goaway).await.is_err()
                {
                    return;
                }
                // Read (and drop) whatever the client sends until it closes.
                let mut buf = [0u8; 4096];
                while matches!(stream.read(&mut buf).await, Ok(n) if n > 0) {}
            });
        }
    });
    (addr, task)
}

#[tokio::test]
async fn a_post_to_a_server_going_away_is_retried_on_another_server() {
    let (leaving, _t1) = going_away().await;
    let (good, _t2) = upstream(true).await;
    let proxy = start_proxy(&weir_config(&[leaving, good], "h2c")).await;
    for i in 0..4 {
        let req = Request::post(proxy.url("/order"))
            .body(Full::new(Bytes::from_static(b"not idempotent")))
            .expect("request");
        let resp = client(true).request(req).await.expect("response");
        assert_eq!(resp.status(), 200, "request {i}");
        let body = resp.into_body().collect().await.expect("body").to_bytes();
        assert_eq!(body, "14 bytes\n");
    }
    let attempts = proxy.metrics.encode().expect("metrics");
    assert!(
        attempts
            .lines()
            .any(|l| l.starts_with("weir_upstream_attempts_total")
                && l.contains(&leaving.to_string())
                && l.contains("result=\"connect_failed\"")
                && !l.ends_with(" 0")),
        "the leaving server was tried and counted as not having taken the request:\n{attempts}"
    );
}
