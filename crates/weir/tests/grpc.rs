//! gRPC through Weir, end to end on 127.0.0.1: a tonic client speaks
//! HTTP/2 with prior knowledge to Weir, Weir forwards over h2c
//! (`protocol = "h2c"`) to a gRPC server (tonic's server-side call
//! handling on hyper's HTTP/2 server). Messages and services are written
//! by hand: no protoc, no build script.

mod common;

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::*;
use http::uri::PathAndQuery;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_stream::Stream;
use tokio_stream::wrappers::ReceiverStream;
use tonic::client::Grpc;
use tonic::server::{
    ClientStreamingService, ServerStreamingService, StreamingService, UnaryService,
};
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Request, Response, Status, Streaming};
use tonic_prost::ProstCodec;

/// The one message of the test service, both ways.
#[derive(Clone, PartialEq, prost::Message)]
struct Msg {
    #[prost(string, tag = "1")]
    text: String,
    #[prost(uint32, tag = "2")]
    n: u32,
}

fn msg(text: &str, n: u32) -> Msg {
    Msg {
        text: text.to_owned(),
        n,
    }
}

type Reply<T> = Pin<Box<dyn Future<Output = Result<Response<T>, Status>> + Send>>;
type Replies = Pin<Box<dyn Stream<Item = Result<Msg, Status>> + Send>>;

/// `/test.Echo/Unary`: echoes; `text = "sleep"` sleeps `n` ms first;
/// `text = "missing"` fails with NOT_FOUND.
struct Unary;

impl UnaryService<Msg> for Unary {
    type Response = Msg;
    type Future = Reply<Msg>;

    fn call(&mut self, req: Request<Msg>) -> Self::Future {
        Box::pin(async move {
            let m = req.into_inner();
            match m.text.as_str() {
                "sleep" => {
                    tokio::time::sleep(Duration::from_millis(u64::from(m.n))).await;
                    Ok(Response::new(msg("slept", m.n)))
                }
                "missing" => Err(Status::not_found("no such thing: 100% gone")),
                _ => Ok(Response::new(msg(&format!("echo {}", m.text), m.n))),
            }
        })
    }
}

/// `/test.Echo/Count`: `n` messages numbered 0..n; with `text = "fail"`,
/// two messages then NOT_FOUND with an `x-detail` trailer.
struct Count;

impl ServerStreamingService<Msg> for Count {
    type Response = Msg;
    type ResponseStream = Replies;
    type Future = Reply<Replies>;

    fn call(&mut self, req: Request<Msg>) -> Self::Future {
        Box::pin(async move {
            let m = req.into_inner();
            let stream: Replies = if m.text == "fail" {
                let mut meta = tonic::metadata::MetadataMap::new();
                meta.insert("x-detail", "kept".parse().expect("value"));
                let err = Status::with_metadata(Code::NotFound, "gone after two", meta);
                Box::pin(tokio_stream::iter(vec![
                    Ok(msg("item", 0)),
                    Ok(msg("item", 1)),
                    Err(err),
                ]))
            } else {
                Box::pin(tokio_stream::iter((0..m.n).map(|i| Ok(msg("item", i)))))
            };
            Ok(Response::new(stream))
        })
    }
}

/// `/test.Echo/Sum`: the sum of the `n` of every message sent, and how
/// many there were.
struct Sum;

impl ClientStreamingService<Msg> for Sum {
    type Response = Msg;
    type Future = Reply<Msg>;

    fn call(&mut self, req: Request<Streaming<Msg>>) -> Self::Future {
        Box::pin(async move {
            let mut stream = req.into_inner();
            let (mut sum, mut count) = (0, 0);
            while let Some(m) = stream.message().await? {
                sum += m.n;
                count += 1;
            }
            Ok(Response::new(msg(&format!("{count} messages"), sum)))
        })
    }
}

/// `/test.Echo/Chat`: answers each message as it arrives.
struct Chat;

impl StreamingService<Msg> for Chat {
    type Response = Msg;
    type ResponseStream = Replies;
    type Future = Reply<Replies>;

    fn call(&mut self, req: Request<Streaming<Msg>>) -> Self::Future {
        Box::pin(async move {
            let mut incoming = req.into_inner();
            let (tx, rx) = mpsc::channel(4);
            tokio::spawn(async move {
                while let Ok(Some(m)) = incoming.message().await {
                    let reply = msg(&format!("re: {}", m.text), m.n);
                    if tx.send(Ok(reply)).await.is_err() {
                        return;
                    }
                }
            });
            let stream: Replies = Box::pin(ReceiverStream::new(rx));
            Ok(Response::new(stream))
        })
    }
}

async fn route(
    req: http::Request<hyper::body::Incoming>,
) -> Result<http::Response<tonic::body::Body>, Infallible> {
    let mut grpc = tonic::server::Grpc::new(ProstCodec::<Msg, Msg>::default());
    Ok(match req.uri().path() {
        "/test.Echo/Unary" => grpc.unary(Unary, req).await,
        "/test.Echo/Count" => grpc.server_streaming(Count, req).await,
        "/test.Echo/Sum" => grpc.client_streaming(Sum, req).await,
        "/test.Echo/Chat" => grpc.streaming(Chat, req).await,
        _ => Status::unimplemented("no such method").into_http(),
    })
}

/// A gRPC server on a free port, and how many connections it accepted.
struct GrpcServer {
    addr: SocketAddr,
    accepted: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for GrpcServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn grpc_server() -> GrpcServer {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&accepted);
    let task = tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), service_fn(route))
                    .await;
            });
        }
    });
    GrpcServer {
        addr,
        accepted,
        task,
    }
}

/// Weir with one h2c upstream at `upstream`.
async fn weir_to(upstream: SocketAddr) -> Proxy {
    weir_with(upstream, "").await
}

/// Weir with one h2c upstream at `upstream` and `[client]` keys `client`.
async fn weir_with(upstream: SocketAddr, client: &str) -> Proxy {
    start_proxy(&format!(
        "[[listener]]\naddress = \"127.0.0.1:0\"\n\n[client]\n{client}\n\n\
         [[upstream]]\nname = \"grpc\"\nurl = \"http://{upstream}\"\nprotocol = \"h2c\"\n\n\
         [[route]]\npath_prefix = \"/\"\nupstream = \"grpc\"\n"
    ))
    .await
}

/// A tonic client to Weir (HTTP/2 with prior knowledge).
async fn client(proxy: &Proxy) -> Grpc<Channel> {
    let channel = Endpoint::from_shared(proxy.url(""))
        .expect("endpoint")
        .connect()
        .await
        .expect("connect to Weir");
    Grpc::new(channel)
}

fn codec() -> ProstCodec<Msg, Msg> {
    ProstCodec::default()
}

async fn unary(c: &mut Grpc<Channel>, req: Request<Msg>) -> Result<Response<Msg>, Status> {
    c.ready().await.expect("ready");
    c.unary(req, PathAndQuery::from_static("/test.Echo/Unary"), codec())
        .await
}

#[tokio::test]
async fn a_unary_call_goes_through_weir_over_h2c() {
    let server = grpc_server().await;
    let proxy = weir_to(server.addr).await;
    let mut c = client(&proxy).await;
    let resp = unary(&mut c, Request::new(msg("hello", 7)))
        .await
        .expect("call");
    assert_eq!(resp.get_ref(), &msg("echo hello", 7));
    assert_eq!(server.accepted.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_server_stream_of_100_messages_arrives_whole_and_in_order() {
    let server = grpc_server().await;
    let proxy = weir_to(server.addr).await;
    let mut c = client(&proxy).await;
    c.ready().await.expect("ready");
    let mut stream = c
        .server_streaming(
            Request::new(msg("", 100)),
            PathAndQuery::from_static("/test.Echo/Count"),
            codec(),
        )
        .await
        .expect("call")
        .into_inner();
    let mut got = Vec::new();
    while let Some(m) = stream.message().await.expect("message") {
        got.push(m.n);
    }
    assert_eq!(got, (0..100).collect::<Vec<u32>>());
}

#[tokio::test]
async fn a_client_stream_is_summed_by_the_server() {
    let server = grpc_server().await;
    let proxy = weir_to(server.addr).await;
    let mut c = client(&proxy).await;
    c.ready().await.expect("ready");
    let out = tokio_stream::iter((1..=50).map(|n| msg("part", n)));
    let resp = c
        .client_streaming(
            Request::new(out),
            PathAndQuery::from_static("/test.Echo/Sum"),
            codec(),
        )
        .await
        .expect("call");
    assert_eq!(resp.get_ref(), &msg("50 messages", (1..=50).sum()));
}

#[tokio::test]
async fn a_bidirectional_stream_answers_each_message_before_the_next_is_sent() {
    let server = grpc_server().await;
    let proxy = weir_to(server.addr).await;
    let mut c = client(&proxy).await;
    c.ready().await.expect("ready");
    let (tx, rx) = mpsc::channel::<Msg>(1);
    tx.send(msg("one", 1)).await.expect("send");
    let mut replies = c
        .streaming(
            Request::new(ReceiverStream::new(rx)),
            PathAndQuery::from_static("/test.Echo/Chat"),
            codec(),
        )
        .await
        .expect("call")
        .into_inner();
    for n in 1..=5u32 {
        // The reply to message n arrives while message n + 1 is not sent
        // yet: nothing on the way buffers the stream.
        let reply = tokio::time::timeout(Duration::from_secs(5), replies.message())
            .await
            .expect("the reply came before the next message was sent")
            .expect("reply")
            .expect("a message");
        assert_eq!(
            reply,
            msg(
                &format!(
                    "re: {}",
                    ["one", "two", "three", "four", "five"][n as usize - 1]
                ),
                n
            )
        );
        if n < 5 {
            let next = ["two", "three", "four", "five"][n as usize - 1];
            tx.send(msg(next, n + 1)).await.expect("send");
        }
    }
    drop(tx);
    assert!(replies.message().await.expect("clean end").is_none());
}

#[tokio::test]
async fn a_server_slower_than_weirs_deadline_is_deadline_exceeded() {
    let server = grpc_server().await;
    let proxy = weir_with(server.addr, "response_header_timeout = \"200ms\"").await;
    let mut c = client(&proxy).await;
    let mut req = Request::new(msg("sleep", 3000));
    // The client's own deadline is later than Weir's.
    req.set_timeout(Duration::from_secs(2));
    let start = Instant::now();
    let err = unary(&mut c, req).await.expect_err("deadline");
    assert_eq!(err.code(), Code::DeadlineExceeded, "{err:?}");
    assert!(
        start.elapsed() < Duration::from_millis(1500),
        "answered after {:?}: not Weir's deadline",
        start.elapsed()
    );
    assert!(
        err.message().contains("no response headers"),
        "Weir says why: {:?}",
        err.message()
    );
}

/// A unary call as raw HTTP/2 (length-prefixed message, gRPC fields), so
/// that no client-side deadline races Weir's.
async fn raw_call(
    proxy: &Proxy,
    grpc_timeout: &str,
    m: &Msg,
) -> http::Response<hyper::body::Incoming> {
    let mut frame = vec![0u8];
    let encoded = prost::Message::encode_to_vec(m);
    frame.extend_from_slice(&u32::try_from(encoded.len()).expect("small").to_be_bytes());
    frame.extend_from_slice(&encoded);
    let req = http::Request::post(proxy.url("/test.Echo/Unary"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header("grpc-timeout", grpc_timeout)
        .body(http_body_util::Full::new(bytes::Bytes::from(frame)))
        .expect("request");
    common::client(true).request(req).await.expect("response")
}

#[tokio::test]
async fn grpc_timeout_bounds_weirs_wait_for_the_response_head() {
    let server = grpc_server().await;
    let proxy = weir_to(server.addr).await;
    let start = Instant::now();
    let resp = raw_call(&proxy, "300m", &msg("sleep", 3000)).await;
    let elapsed = start.elapsed();
    assert_eq!(resp.status(), 200, "a gRPC failure is HTTP 200");
    let h = resp.headers();
    assert_eq!(h["content-type"], "application/grpc");
    assert_eq!(h["grpc-status"], "4", "DEADLINE_EXCEEDED");
    let message = h["grpc-message"].to_str().expect("percent-encoded ASCII");
    assert!(
        message.contains("no response headers") && message.contains("300 ms"),
        "{message}"
    );
    assert!(
        elapsed >= Duration::from_millis(250) && elapsed < Duration::from_millis(2000),
        "answered after {elapsed:?}, not after grpc-timeout's 300 ms"
    );
    // A call within its deadline is forwarded as usual.
    let resp = raw_call(&proxy, "5S", &msg("sleep", 10)).await;
    assert_eq!(resp.status(), 200);
    assert!(
        resp.headers().get("grpc-status").is_none(),
        "the status comes in the trailers"
    );
    let body = http_body_util::BodyExt::collect(resp.into_body())
        .await
        .expect("body");
    let trailers = body.trailers().expect("trailers").clone();
    assert_eq!(trailers["grpc-status"], "0");
}

#[tokio::test]
async fn an_error_status_from_the_server_passes_through_unchanged() {
    let server = grpc_server().await;
    let proxy = weir_to(server.addr).await;
    let mut c = client(&proxy).await;
    // Trailers-only: the status in the response head.
    let err = unary(&mut c, Request::new(msg("missing", 0)))
        .await
        .expect_err("not found");
    assert_eq!(err.code(), Code::NotFound);
    assert_eq!(err.message(), "no such thing: 100% gone");
    // After two messages: the status in the trailers, with its metadata.
    c.ready().await.expect("ready");
    let mut stream = c
        .server_streaming(
            Request::new(msg("fail", 0)),
            PathAndQuery::from_static("/test.Echo/Count"),
            codec(),
        )
        .await
        .expect("call")
        .into_inner();
    assert_eq!(stream.message().await.expect("first"), Some(msg("item", 0)));
    assert_eq!(
        stream.message().await.expect("second"),
        Some(msg("item", 1))
    );
    let err = stream.message().await.expect_err("the trailers' status");
    assert_eq!(err.code(), Code::NotFound);
    assert_eq!(err.message(), "gone after two");
    assert_eq!(
        err.metadata()
            .get("x-detail")
            .map(|v| v.to_str().expect("ascii")),
        Some("kept"),
        "trailer fields pass through"
    );
}

#[tokio::test]
async fn an_upstream_that_is_down_is_unavailable_with_a_message() {
    let down: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().expect("addr");
    let proxy = weir_to(down).await;
    let mut c = client(&proxy).await;
    let err = unary(&mut c, Request::new(msg("hello", 1)))
        .await
        .expect_err("no upstream");
    assert_eq!(err.code(), Code::Unavailable, "{err:?}");
    assert!(
        err.message().contains("connection refused") && err.message().contains(&down.to_string()),
        "{:?}",
        err.message()
    );
}

#[tokio::test]
async fn many_concurrent_calls_share_one_upstream_connection() {
    let server = grpc_server().await;
    let proxy = weir_to(server.addr).await;
    let c = client(&proxy).await;
    let calls: Vec<_> = (0..64u32)
        .map(|n| {
            let mut c = c.clone();
            tokio::spawn(async move {
                let resp = unary(&mut c, Request::new(msg("sleep", 50))).await;
                (n, resp)
            })
        })
        .collect();
    for call in calls {
        let (n, resp) = call.await.expect("task");
        assert_eq!(resp.expect("call").get_ref(), &msg("slept", 50), "call {n}");
    }
    assert_eq!(
        server.accepted.load(Ordering::SeqCst),
        1,
        "the server saw one connection"
    );
    assert_eq!(proxy.upstream_connections.opened(), 1, "Weir opened one");
    assert_eq!(proxy.upstream_connections.live(), 1, "and keeps it open");
}

#[tokio::test]
async fn an_upstream_with_no_healthy_server_is_unavailable_with_the_reason() {
    let server = grpc_server().await;
    // Every check fails (the server answers 200, the check wants 204), so
    // the one server is taken out after the first one.
    let proxy = start_proxy(&format!(
        "[[listener]]\naddress = \"127.0.0.1:0\"\n\n\
         [[upstream]]\nname = \"grpc\"\nurl = \"http://{}\"\nprotocol = \"h2c\"\n\n\
         [upstream.health]\npath = \"/health\"\ninterval = \"20ms\"\nexpect_status = \"204\"\nfall = 1\n\n\
         [[route]]\npath_prefix = \"/\"\nupstream = \"grpc\"\n",
        server.addr
    ))
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut c = client(&proxy).await;
    let err = unary(&mut c, Request::new(msg("hello", 1)))
        .await
        .expect_err("no healthy server");
    assert_eq!(err.code(), Code::Unavailable, "{err:?}");
    assert!(
        err.message()
            .contains("no server of upstream \"grpc\" is available"),
        "{:?}",
        err.message()
    );
}
