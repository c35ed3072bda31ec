//! The pool against a real HTTP/1.1 server on 127.0.0.1: reuse, half-read
//! bodies, idle expiry, the idle cap, and an idle connection the upstream
//! closed.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Either, Empty, Full};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use super::{UpstreamClient, UpstreamError};
use crate::body::request::RequestBody;
use crate::config::ClientSettings;

/// An origin answering `/small` (5 bytes), `/big` (1 MiB), `/empty` (204);
/// with `keep_alive = false` it closes each connection after one exchange.
/// Returns its address and the count of connections it accepted.
async fn origin(keep_alive: bool) -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let accepted = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&accepted);
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            counter.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let service = service_fn(|req: Request<hyper::body::Incoming>| async move {
                    let resp = match req.uri().path() {
                        "/big" => Response::new(Full::new(Bytes::from(vec![b'x'; 1 << 20]))),
                        "/empty" => {
                            let mut r = Response::new(Full::new(Bytes::new()));
                            *r.status_mut() = StatusCode::NO_CONTENT;
                            r
                        }
                        _ => Response::new(Full::new(Bytes::from_static(b"hello"))),
                    };
                    Ok::<_, Infallible>(resp)
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .keep_alive(keep_alive)
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    (addr, accepted)
}

fn client(max_idle: usize, idle: Duration) -> UpstreamClient {
    UpstreamClient::new(&ClientSettings {
        connect_timeout: Duration::from_secs(2),
        response_header_timeout: Duration::from_secs(5),
        pool_idle_timeout: idle,
        pool_max_idle_per_host: max_idle,
    })
}

fn get(addr: SocketAddr, path: &str) -> Request<RequestBody> {
    let mut req = Request::new(Either::Right(Empty::new()));
    *req.uri_mut() = format!("http://{addr}{path}").parse().expect("uri");
    req
}

/// `GET /small`, read to the end: its status and body.
async fn small(client: &UpstreamClient, addr: SocketAddr) -> (StatusCode, Bytes) {
    let resp = client.send(get(addr, "/small")).await.expect("response");
    let status = resp.status();
    (
        status,
        resp.into_body().collect().await.expect("body").to_bytes(),
    )
}

async fn eventually(within: Duration, mut ok: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < within {
        if ok() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    ok()
}

#[tokio::test]
async fn bodies_read_to_the_end_give_their_connection_back() {
    let (addr, accepted) = origin(true).await;
    let client = client(4, Duration::from_secs(30));
    for _ in 0..20 {
        let (status, body) = small(&client, addr).await;
        assert_eq!(status, 200);
        assert_eq!(&body[..], b"hello");
    }
    // A body-less answer goes back without being polled.
    let mut head = get(addr, "/big");
    *head.method_mut() = Method::HEAD;
    let resp = client.send(head).await.expect("HEAD");
    assert_eq!(resp.status(), 200);
    drop(resp);
    let resp = client.send(get(addr, "/empty")).await.expect("204");
    assert_eq!(resp.status(), 204);
    drop(resp);
    small(&client, addr).await;
    assert_eq!(accepted.load(Ordering::SeqCst), 1, "one connection reused");
    assert_eq!(client.connections().opened(), 1);
    assert_eq!(client.connections().live(), 1);
}

#[tokio::test]
async fn a_body_dropped_half_read_closes_its_connection() {
    let (addr, accepted) = origin(true).await;
    let client = client(4, Duration::from_secs(30));
    let resp = client.send(get(addr, "/big")).await.expect("response");
    let mut body = resp.into_body();
    let first = body.frame().await.expect("a frame").expect("data");
    assert!(first.is_data());
    drop(body);
    assert!(
        eventually(Duration::from_secs(2), || client.connections().live() == 0).await,
        "live {}",
        client.connections().live()
    );
    // The next request needs a new connection.
    small(&client, addr).await;
    assert_eq!(accepted.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn idle_connections_expire_and_the_idle_cap_holds() {
    let (addr, _) = origin(true).await;
    let client = client(2, Duration::from_millis(200));
    // Five at once need five connections; two stay idle, three close.
    let mut resps = Vec::new();
    for _ in 0..5 {
        resps.push(client.send(get(addr, "/small")).await.expect("response"));
    }
    assert_eq!(client.connections().live(), 5);
    for resp in resps {
        resp.into_body().collect().await.expect("body");
    }
    assert!(eventually(Duration::from_secs(2), || client.connections().live() == 2).await);
    // After the idle timeout (and the reaper's half-timeout tick), none.
    assert!(
        eventually(Duration::from_secs(2), || client.connections().live() == 0).await,
        "live {}",
        client.connections().live()
    );
}

#[tokio::test]
async fn no_idle_connection_is_kept_when_the_cap_is_zero() {
    let (addr, accepted) = origin(true).await;
    let client = client(0, Duration::from_secs(30));
    for _ in 0..3 {
        small(&client, addr).await;
    }
    assert_eq!(accepted.load(Ordering::SeqCst), 3);
    assert!(eventually(Duration::from_secs(2), || client.connections().live() == 0).await);
}

#[tokio::test]
async fn an_idle_connection_the_upstream_closed_is_not_used() {
    let (addr, accepted) = origin(false).await;
    let client = client(4, Duration::from_secs(30));
    for i in 1..=3 {
        let (_, body) = small(&client, addr).await;
        assert_eq!(&body[..], b"hello", "request {i}");
    }
    assert_eq!(accepted.load(Ordering::SeqCst), 3);
    assert!(eventually(Duration::from_secs(2), || client.connections().live() == 0).await);
}

#[tokio::test]
async fn connect_failures_name_the_authority() {
    // A port nobody listens on: bind, note it, close.
    let addr = {
        let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        l.local_addr().expect("addr")
    };
    let client = client(4, Duration::from_secs(30));
    let err = client.send(get(addr, "/")).await.expect_err("refused");
    assert!(
        matches!(&err, UpstreamError::ConnectRefused { authority } if *authority == addr.to_string()),
        "{err}"
    );
    assert_eq!(err.status(), StatusCode::BAD_GATEWAY);
    // An https:// server that is not there fails to connect the same way.
    let mut https = get(addr, "/");
    *https.uri_mut() = format!("https://{addr}/").parse().expect("uri");
    let err = client.send(https).await.expect_err("https");
    assert!(
        matches!(&err, UpstreamError::ConnectRefused { .. }),
        "{err}"
    );
    let mut ftp = get(addr, "/");
    *ftp.uri_mut() = format!("ftp://{addr}/").parse().expect("uri");
    let err = client.send(ftp).await.expect_err("ftp");
    assert!(err.to_string().contains("https://"), "{err}");
}
