//! WebSockets and other protocol upgrades through Weir (RFC 9110 §7.8,
//! RFC 6455, RFC 8441), on real sockets of 127.0.0.1: a tungstenite
//! upstream (echo, refusing, flooding, silent or closing on purpose) behind
//! Weir, and tungstenite clients over HTTP/1.1 and over an HTTP/2 extended
//! CONNECT stream made with hyper's HTTP/2 client.

mod common;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::access_log::{access_line, access_log};
use common::{config_text, curl, eventually, start_proxy};
use futures_util::{SinkExt as _, StreamExt as _};
use http_body_util::Empty;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::Role;
use tokio_tungstenite::{WebSocketStream, accept_async, client_async};

/// What the upstream does once a WebSocket handshake came in.
#[derive(Debug, Clone, Copy)]
enum Behaviour {
    /// Echoes every message.
    Echo,
    /// Answers the handshake with `403 Forbidden`.
    Refuse,
    /// Sends 64 KiB binary messages as fast as it can, reading nothing.
    Flood,
    /// Reads until its end of stream, sends nothing.
    Silent,
    /// Closes its socket (no close frame) after the first message.
    CloseAfterFirst,
}

/// What the upstream saw.
#[derive(Default)]
struct Seen {
    /// Each request head, as received.
    heads: Mutex<Vec<String>>,
    /// Bytes of messages the flood managed to send.
    sent: AtomicU64,
    /// A WebSocket stream reached its end (EOF, close or error).
    eof: AtomicBool,
}

/// A WebSocket upstream on 127.0.0.1; plain requests get `200 plain`.
struct WsUpstream {
    addr: SocketAddr,
    seen: Arc<Seen>,
    task: tokio::task::JoinHandle<()>,
}

impl WsUpstream {
    async fn start(behaviour: Behaviour) -> WsUpstream {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let seen = Arc::new(Seen::default());
        let state = Arc::clone(&seen);
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve(stream, Arc::clone(&state), behaviour));
            }
        });
        WsUpstream { addr, seen, task }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn heads(&self) -> Vec<String> {
        self.seen.heads.lock().expect("lock").clone()
    }
}

impl Drop for WsUpstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The request head waiting on `s`, peeked (left unread for the handshake).
async fn peek_head(s: &TcpStream) -> Option<String> {
    let mut buf = vec![0u8; 16 * 1024];
    for _ in 0..1000 {
        let n = s.peek(&mut buf).await.ok()?;
        if n == 0 {
            return None;
        }
        if let Some(end) = buf[..n].windows(4).position(|w| w == b"\r\n\r\n") {
            return Some(String::from_utf8_lossy(&buf[..end + 4]).into_owned());
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    None
}

async fn serve(mut stream: TcpStream, seen: Arc<Seen>, behaviour: Behaviour) {
    let Some(head) = peek_head(&stream).await else {
        return;
    };
    seen.heads.lock().expect("lock").push(head.clone());
    let upgrade = head.to_ascii_lowercase().contains("\r\nupgrade:");
    if !upgrade || matches!(behaviour, Behaviour::Refuse) {
        let mut discard = vec![0u8; head.len()];
        let _ = stream.read_exact(&mut discard).await;
        let answer: &[u8] = if upgrade {
            b"HTTP/1.1 403 Forbidden\r\nContent-Length: 10\r\nConnection: close\r\n\r\nforbidden\n"
        } else {
            b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\nConnection: close\r\n\r\nplain\n"
        };
        let _ = stream.write_all(answer).await;
        let _ = stream.shutdown().await;
        return;
    }
    let Ok(mut ws) = accept_async(stream).await else {
        return;
    };
    match behaviour {
        Behaviour::Echo => {
            while let Some(Ok(msg)) = ws.next().await {
                if msg.is_close() {
                    break;
                }
                if ws.send(msg).await.is_err() {
                    break;
                }
            }
        }
        Behaviour::Flood => {
            let msg = Message::binary(vec![7u8; 64 * 1024]);
            while ws.send(msg.clone()).await.is_ok() {
                seen.sent.fetch_add(64 * 1024, Ordering::Relaxed);
            }
        }
        Behaviour::Silent => while let Some(Ok(_)) = ws.next().await {},
        Behaviour::CloseAfterFirst => {
            let _ = ws.next().await;
            drop(ws);
            return;
        }
        Behaviour::Refuse => {}
    }
    seen.eof.store(true, Ordering::Release);
}

/// `ws://` URL of `path` on the proxy.
fn ws_url(proxy: &common::Proxy, path: &str) -> String {
    format!("ws://{}{path}", proxy.addr)
}

/// A proxy in front of `upstream` whose one route tunnels WebSockets
/// (`upgrade = true`) or not, with `server` keys.
async fn proxy_for(upstream: &WsUpstream, upgrade: bool, server: &str) -> common::Proxy {
    let route = if upgrade {
        "upgrade = [\"WebSocket\"]"
    } else {
        ""
    };
    start_proxy(&config_text(&upstream.url(), server, "", route)).await
}

/// A WebSocket client through the proxy, over HTTP/1.1.
async fn ws_client(
    proxy: &common::Proxy,
    path: &str,
) -> Result<
    (
        WebSocketStream<TcpStream>,
        tokio_tungstenite::tungstenite::handshake::client::Response,
    ),
    tokio_tungstenite::tungstenite::Error,
> {
    let stream = TcpStream::connect(proxy.addr).await.expect("connect");
    client_async(ws_url(proxy, path), stream).await
}

/// The status of a handshake the proxy refused.
fn refused_status(err: tokio_tungstenite::tungstenite::Error) -> u16 {
    match err {
        tokio_tungstenite::tungstenite::Error::Http(resp) => resp.status().as_u16(),
        other => panic!("not an HTTP refusal: {other}"),
    }
}

#[tokio::test]
async fn text_and_binary_messages_echo_through_a_101_and_plain_requests_still_work() {
    access_log();
    let upstream = WsUpstream::start(Behaviour::Echo).await;
    let proxy = proxy_for(&upstream, true, "").await;
    let (mut ws, resp) = ws_client(&proxy, "/echo").await.expect("handshake");
    assert_eq!(resp.status().as_u16(), 101);
    assert_eq!(
        resp.headers().get("via").and_then(|v| v.to_str().ok()),
        Some("1.1 weir")
    );
    ws.send(Message::text("hello weir")).await.expect("send");
    let binary: Vec<u8> = (0..1000u32).map(|i| (i % 251) as u8).collect();
    ws.send(Message::binary(binary.clone()))
        .await
        .expect("send");
    let text = ws.next().await.expect("a message").expect("ok");
    assert_eq!(text.into_text().expect("text").as_str(), "hello weir");
    let echoed = ws.next().await.expect("a message").expect("ok");
    assert_eq!(echoed.into_data().as_ref(), &binary[..]);
    let head = upstream.heads().pop().expect("a head").to_ascii_lowercase();
    assert!(head.contains("\r\nupgrade: websocket\r\n"), "{head}");
    assert!(head.contains("\r\nconnection: upgrade\r\n"), "{head}");
    assert!(head.contains("\r\nsec-websocket-key: "), "{head}");
    ws.close(None).await.expect("close");
    while ws.next().await.is_some() {}

    // The access log line, written when the tunnel ended.
    let line = access_line("/echo", Duration::from_secs(5))
        .await
        .expect("an access log line for the tunnel");
    assert_eq!(line.get("status").map(String::as_str), Some("101"));
    assert_eq!(line.get("upgraded").map(String::as_str), Some("true"));
    assert_eq!(line.get("outcome").map(String::as_str), Some("ok"));
    let bytes = |k: &str| -> u64 { line.get(k).and_then(|v| v.parse().ok()).unwrap_or(0) };
    // Client frames are masked (6-byte header here): 16 + 1008 bytes at
    // least; the upstream's are not: 12 + 1004.
    assert!(bytes("bytes_in") >= 1024, "{line:?}");
    assert!(bytes("bytes_out") >= 1016, "{line:?}");
    assert!(
        eventually(Duration::from_secs(2), || proxy.upstream_connections.live()
            == 0)
        .await,
        "the tunnel's upstream connection is closed"
    );

    // A plain request on the same route is plain HTTP.
    let url = proxy.url("/plain");
    // curl blocks: off the runtime that serves the proxy.
    let out = tokio::task::spawn_blocking(move || curl(&["-i", &url]))
        .await
        .expect("curl");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(text.ends_with("plain\n"), "{text}");
    let head = upstream.heads().pop().expect("a head").to_ascii_lowercase();
    assert!(!head.contains("upgrade"), "{head}");
}

#[tokio::test]
async fn a_route_without_upgrade_forwards_plain_http_and_no_101() {
    let upstream = WsUpstream::start(Behaviour::Echo).await;
    let proxy = proxy_for(&upstream, false, "").await;
    let err = ws_client(&proxy, "/no-upgrade")
        .await
        .expect_err("no tunnel");
    assert_eq!(refused_status(err), 200, "the upstream's plain answer");
    let head = upstream.heads().pop().expect("a head").to_ascii_lowercase();
    assert!(!head.contains("\r\nupgrade:"), "{head}");
    assert!(!head.contains("connection: upgrade"), "{head}");
}

#[tokio::test]
async fn an_upstream_that_refuses_the_upgrade_gets_its_403_to_the_client() {
    let upstream = WsUpstream::start(Behaviour::Refuse).await;
    let proxy = proxy_for(&upstream, true, "").await;
    let err = ws_client(&proxy, "/refused").await.expect_err("no tunnel");
    assert_eq!(refused_status(err), 403);
    assert!(
        eventually(Duration::from_secs(2), || proxy.upstream_connections.live()
            == 0)
        .await,
        "the handshake's connection is not kept"
    );
}

#[tokio::test]
async fn a_client_that_stops_reading_stops_weir_reading_the_upstream() {
    let upstream = WsUpstream::start(Behaviour::Flood).await;
    let proxy = proxy_for(&upstream, true, "").await;
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket.set_recv_buffer_size(64 * 1024).expect("rcvbuf");
    let stream = socket.connect(proxy.addr).await.expect("connect");
    let (ws, resp) = client_async(ws_url(&proxy, "/flood"), stream)
        .await
        .expect("handshake");
    assert_eq!(resp.status().as_u16(), 101);
    // The client reads nothing from now on.
    let sent = || upstream.seen.sent.load(Ordering::Relaxed);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let settled = sent();
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let later = sent();
    eprintln!("flood: {settled} bytes after 1.5 s, {later} after 2.5 s");
    assert!(settled > 0, "the upstream sent something");
    // Unbounded, loopback would carry gigabytes in these 2.5 s; bounded,
    // it is the socket buffers plus Weir's two 16 KiB buffers.
    assert!(
        later < 24 << 20,
        "the upstream wrote {later} bytes to a client that reads nothing"
    );
    assert!(
        later - settled <= 256 << 10,
        "still flowing: {settled} then {later} bytes"
    );
    drop(ws);
}

#[tokio::test]
async fn an_idle_tunnel_is_closed_on_both_sides() {
    let upstream = WsUpstream::start(Behaviour::Silent).await;
    let proxy = proxy_for(&upstream, true, "upgrade_idle_timeout = \"300ms\"").await;
    let (mut ws, _) = ws_client(&proxy, "/idle").await.expect("handshake");
    let start = Instant::now();
    let end = tokio::time::timeout(Duration::from_secs(5), ws.next())
        .await
        .expect("the client side ends within 5 s");
    let elapsed = start.elapsed();
    assert!(
        !matches!(end, Some(Ok(Message::Text(_) | Message::Binary(_)))),
        "{end:?}"
    );
    assert!(elapsed >= Duration::from_millis(250), "{elapsed:?}");
    assert!(
        eventually(Duration::from_secs(2), || upstream
            .seen
            .eof
            .load(Ordering::Acquire))
        .await,
        "the upstream saw its end of stream"
    );
}

#[tokio::test]
async fn either_side_closing_ends_the_other() {
    // The upstream closes: the client's stream ends.
    let upstream = WsUpstream::start(Behaviour::CloseAfterFirst).await;
    let proxy = proxy_for(&upstream, true, "").await;
    let (mut ws, _) = ws_client(&proxy, "/upstream-closes")
        .await
        .expect("handshake");
    ws.send(Message::text("bye")).await.expect("send");
    let end = tokio::time::timeout(Duration::from_secs(3), ws.next())
        .await
        .expect("the client side ends within 3 s");
    assert!(!matches!(end, Some(Ok(Message::Text(_)))), "{end:?}");
    assert!(
        eventually(Duration::from_secs(2), || proxy.upstream_connections.live()
            == 0)
        .await,
        "the upstream connection is gone"
    );

    // The client closes its socket: the upstream sees its end of stream.
    let silent = WsUpstream::start(Behaviour::Silent).await;
    let proxy = proxy_for(&silent, true, "").await;
    let (ws, _) = ws_client(&proxy, "/client-closes")
        .await
        .expect("handshake");
    assert!(!silent.seen.eof.load(Ordering::Acquire));
    drop(ws);
    assert!(
        eventually(Duration::from_secs(3), || silent
            .seen
            .eof
            .load(Ordering::Acquire))
        .await,
        "the upstream saw the client leave"
    );
    assert!(
        eventually(Duration::from_secs(2), || proxy.upstream_connections.live()
            == 0)
        .await,
        "the upstream connection is gone"
    );
}

/// An RFC 8441 extended CONNECT for `websocket` to `path` through the
/// proxy, from hyper's HTTP/2 client: the response head.
async fn h2_extended_connect(
    proxy: &common::Proxy,
    path: &str,
) -> http::Response<hyper::body::Incoming> {
    let tcp = TcpStream::connect(proxy.addr).await.expect("connect");
    let (mut sender, conn) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
        .handshake::<_, Empty<Bytes>>(TokioIo::new(tcp))
        .await
        .expect("h2 handshake");
    tokio::spawn(conn);
    let request = || {
        http::Request::builder()
            .method(http::Method::CONNECT)
            .uri(format!("http://{}{path}", proxy.addr))
            .header("sec-websocket-version", "13")
            .header("sec-websocket-protocol", "chat")
            .extension(hyper::ext::Protocol::from_static("websocket"))
            .body(Empty::<Bytes>::new())
            .expect("request")
    };
    // The server's SETTINGS (with SETTINGS_ENABLE_CONNECT_PROTOCOL) may not
    // have arrived yet on the first try.
    let mut resp = None;
    for _ in 0..50 {
        sender.ready().await.expect("ready");
        match sender.send_request(request()).await {
            Ok(r) => {
                resp = Some(r);
                break;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
    resp.expect("the extended CONNECT was sent")
}

#[tokio::test]
async fn an_http2_extended_connect_becomes_a_websocket_to_the_upstream() {
    access_log();
    let upstream = WsUpstream::start(Behaviour::Echo).await;
    let proxy = proxy_for(&upstream, true, "").await;
    let resp = h2_extended_connect(&proxy, "/h2-chat").await;
    assert_eq!(resp.status(), http::StatusCode::OK);
    assert!(resp.headers().get("sec-websocket-accept").is_none());
    let io = hyper::upgrade::on(resp)
        .await
        .expect("the stream is a tunnel");
    let mut ws = WebSocketStream::from_raw_socket(TokioIo::new(io), Role::Client, None).await;
    ws.send(Message::text("over h2")).await.expect("send");
    let echoed = ws.next().await.expect("a message").expect("ok");
    assert_eq!(echoed.into_text().expect("text").as_str(), "over h2");
    let head = upstream.heads().pop().expect("a head").to_ascii_lowercase();
    assert!(head.starts_with("get /h2-chat http/1.1\r\n"), "{head}");
    for field in [
        "\r\nupgrade: websocket\r\n",
        "\r\nconnection: upgrade\r\n",
        "\r\nsec-websocket-version: 13\r\n",
        "\r\nsec-websocket-protocol: chat\r\n",
        "\r\nsec-websocket-key: ",
    ] {
        assert!(head.contains(field), "{field:?} missing in {head}");
    }
    ws.close(None).await.expect("close");
    while ws.next().await.is_some() {}
    let line = access_line("/h2-chat", Duration::from_secs(5))
        .await
        .expect("an access log line for the tunnel");
    assert_eq!(line.get("status").map(String::as_str), Some("200"));
    assert_eq!(line.get("upgraded").map(String::as_str), Some("true"));
}

#[tokio::test]
async fn an_http2_extended_connect_on_a_route_without_upgrade_is_501() {
    let upstream = WsUpstream::start(Behaviour::Echo).await;
    let proxy = proxy_for(&upstream, false, "").await;
    let resp = h2_extended_connect(&proxy, "/h2-refused").await;
    assert_eq!(resp.status(), http::StatusCode::NOT_IMPLEMENTED);
    assert!(upstream.heads().is_empty(), "nothing went upstream");
}

#[tokio::test]
async fn a_quiet_tunnel_outlives_the_connection_idle_deadline() {
    // Without a tunnel, this connection would be closed after 100 ms +
    // max(100 ms, 1 s) without a byte moving.
    let upstream = WsUpstream::start(Behaviour::Echo).await;
    let route = "upgrade = [\"websocket\"]";
    let server = "header_read_timeout = \"100ms\"\nbody_idle_timeout = \"100ms\"\nupgrade_idle_timeout = \"10s\"";
    let client = "response_header_timeout = \"1s\"";
    let proxy = start_proxy(&config_text(&upstream.url(), server, client, route)).await;
    let (mut ws, _) = ws_client(&proxy, "/quiet").await.expect("handshake");
    tokio::time::sleep(Duration::from_millis(1800)).await;
    ws.send(Message::text("still here")).await.expect("send");
    let echoed = tokio::time::timeout(Duration::from_secs(3), ws.next())
        .await
        .expect("an answer")
        .expect("a message")
        .expect("ok");
    assert_eq!(echoed.into_text().expect("text").as_str(), "still here");
}

#[tokio::test]
async fn shutdown_closes_tunnels_when_the_grace_period_is_over() {
    let upstream = WsUpstream::start(Behaviour::Silent).await;
    let proxy = proxy_for(&upstream, true, "shutdown_grace = \"300ms\"").await;
    let (mut ws, _) = ws_client(&proxy, "/during-shutdown")
        .await
        .expect("handshake");
    let start = Instant::now();
    tokio::time::timeout(Duration::from_secs(5), proxy.stop())
        .await
        .expect("shutdown does not wait for the tunnel past its grace");
    let took = start.elapsed();
    assert!(
        took >= Duration::from_millis(250),
        "{took:?}: the tunnel got its grace"
    );
    let end = tokio::time::timeout(Duration::from_secs(2), ws.next())
        .await
        .expect("the client side is closed");
    assert!(!matches!(end, Some(Ok(Message::Text(_)))), "{end:?}");
    assert!(
        eventually(Duration::from_secs(2), || upstream
            .seen
            .eof
            .load(Ordering::Acquire))
        .await,
        "the upstream side is closed"
    );
}

#[tokio::test]
async fn a_handshake_whose_server_refuses_the_connection_goes_to_another_server() {
    let upstream = WsUpstream::start(Behaviour::Echo).await;
    let dead = common::free_port();
    // No ejection: every other handshake meets the dead server first.
    let text = format!(
        "[[listener]]\naddress = \"127.0.0.1:0\"\n\n\
         [[upstream]]\nname = \"ws\"\nservers = [\"http://127.0.0.1:{dead}\", \"{}\"]\n\
         [upstream.outlier]\nconsecutive_failures = 0\n\n\
         [[route]]\nupstream = \"ws\"\nupgrade = [\"websocket\"]\n",
        upstream.url()
    );
    let proxy = start_proxy(&text).await;
    for i in 0..10 {
        let (mut ws, resp) = ws_client(&proxy, "/echo")
            .await
            .unwrap_or_else(|e| panic!("handshake {i}: {e}"));
        assert_eq!(resp.status().as_u16(), 101);
        ws.send(Message::text(format!("m{i}"))).await.expect("send");
        let back = ws.next().await.expect("a reply").expect("a message");
        assert_eq!(back, Message::text(format!("m{i}")));
    }
}
