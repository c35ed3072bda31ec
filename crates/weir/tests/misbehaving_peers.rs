//! Clients and upstreams that misbehave on purpose, against real sockets.

mod common;

use std::time::{Duration, Instant};

use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const SHORT: &str = "header_read_timeout = \"300ms\"\nbody_idle_timeout = \"300ms\"";
const SHORT_CLIENT: &str = "response_header_timeout = \"300ms\"";

async fn short_timeouts_proxy() -> (Proxy, Origin) {
    let origin = start_origin().await;
    let proxy = start_proxy(&config_text(
        &format!("http://{}", origin.addr),
        SHORT,
        SHORT_CLIENT,
        "",
    ))
    .await;
    (proxy, origin)
}

/// Waits until the peer closes the connection; returns how long that took.
async fn time_until_closed(s: &mut tokio::net::TcpStream, limit: Duration) -> Option<Duration> {
    let start = Instant::now();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match tokio::time::timeout(limit.saturating_sub(start.elapsed()), s.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return Some(start.elapsed()),
            Ok(Ok(_)) => {}
            Err(_) => return None,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_byte_of_the_http2_preface_does_not_hold_a_connection() {
    let (proxy, _origin) = short_timeouts_proxy().await;
    for partial in [&b"P"[..], b"PRI * HTTP/2.0\r\n"] {
        let mut s = tokio::net::TcpStream::connect(proxy.addr)
            .await
            .expect("connect");
        s.write_all(partial).await.expect("write");
        let closed = time_until_closed(&mut s, Duration::from_secs(5)).await;
        assert!(closed.is_some(), "still open after 5 s with {partial:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_http2_connection_is_closed() {
    let (proxy, _origin) = short_timeouts_proxy().await;
    let mut s = tokio::net::TcpStream::connect(proxy.addr)
        .await
        .expect("connect");
    // Preface, then an empty SETTINGS frame, then silence.
    s.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")
        .await
        .expect("write");
    let closed = time_until_closed(&mut s, Duration::from_secs(5)).await;
    assert!(
        closed.is_some(),
        "an idle HTTP/2 connection stayed open for 5 s"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_that_stops_reading_is_cut_off() {
    let (proxy, _origin) = short_timeouts_proxy().await;
    let mut s = tokio::net::TcpStream::connect(proxy.addr)
        .await
        .expect("connect");
    let n = 500_000_000u64;
    s.write_all(format!("GET /bytes/{n} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
        .await
        .expect("write");
    // Read nothing for 2 s: the socket buffers fill and the proxy's writes stall.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut total = 0u64;
    let mut buf = vec![0u8; 256 * 1024];
    let start = Instant::now();
    loop {
        match tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => break,
            Ok(Ok(k)) => total += k as u64,
            Err(_) => panic!("connection still open 5 s after the buffers drained"),
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "still reading after 20 s"
        );
    }
    assert!(
        total < n / 2,
        "the stalled client got {total} bytes: it was never cut off"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dot_segments_behind_encoded_slashes_are_refused() {
    let (proxy, _origin) = proxy_to_origin().await;
    for path in [
        "/public/..%2fadmin/",
        "/public/%2e%2e%2Fadmin",
        "/x/..;/echo",
    ] {
        let out = curl(&[
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "--path-as-is",
            &proxy.url(path),
        ]);
        assert_eq!(String::from_utf8_lossy(&out.stdout), "400", "{path}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_host_fields_get_a_400() {
    let (proxy, _origin) = proxy_to_origin().await;
    for request in [
        &b"GET /echo HTTP/1.1\r\nConnection: close\r\nHost: a\r\nHost: b\r\n\r\n"[..],
        b"GET /echo HTTP/1.1\r\nConnection: close\r\n\r\n",
        b"GET /echo HTTP/1.1\r\nConnection: close\r\nHost: a b\r\n\r\n",
        b"GET /echo HTTP/1.1\r\nConnection: close\r\nHost: user@a\r\n\r\n",
        b"GET /echo HTTP/1.1\r\nConnection: close\r\nHost: a:99999\r\n\r\n",
        b"GET http://user:pw@a/echo HTTP/1.1\r\nConnection: close\r\nHost: a\r\n\r\n",
    ] {
        let text = raw_exchange(proxy.addr, request, Duration::from_secs(5)).await;
        assert!(
            text.starts_with("HTTP/1.1 400"),
            "{:?} -> {text:?}",
            String::from_utf8_lossy(request)
        );
    }
    // HTTP/1.0 may omit Host.
    let text = raw_exchange(
        proxy.addr,
        b"GET /echo HTTP/1.0\r\nConnection: close\r\n\r\n",
        Duration::from_secs(5),
    )
    .await;
    assert!(text.starts_with("HTTP/1.0 200"), "{text:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_transfer_coding_gets_a_501() {
    let (proxy, _origin) = proxy_to_origin().await;
    let text = raw_exchange(
        proxy.addr,
        b"POST /echo HTTP/1.1\r\nConnection: close\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
        Duration::from_secs(5),
    )
    .await;
    assert!(text.starts_with("HTTP/1.1 501"), "{text:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_with_a_chunked_body_forwards_the_body() {
    let (proxy, _origin) = proxy_to_origin().await;
    let text = raw_exchange(
        proxy.addr,
        b"GET /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
        Duration::from_secs(5),
    )
    .await;
    assert!(text.contains("\"body_len\":5"), "{text:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodiless_request_reaches_upstream_without_content_length() {
    let (proxy, _origin) = proxy_to_origin().await;
    for h2 in [false, true] {
        let (_, _, body) = get(&proxy.url("/echo"), h2).await;
        let text = String::from_utf8_lossy(&body);
        assert!(!text.contains("content-length"), "h2={h2}: {text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_request_body_is_a_400_not_a_502() {
    let (proxy, _origin) = short_timeouts_proxy().await;
    let text = raw_exchange(
        proxy.addr,
        b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n",
        Duration::from_secs(5),
    )
    .await;
    assert!(!text.starts_with("HTTP/1.1 502"), "{text:?}");
    assert!(text.starts_with("HTTP/1.1 400"), "{text:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_request_body_is_a_408() {
    let origin = start_origin().await;
    let proxy = start_proxy(&config_text(
        &format!("http://{}", origin.addr),
        "body_idle_timeout = \"300ms\"",
        "response_header_timeout = \"10s\"",
        "",
    ))
    .await;
    let mut s = tokio::net::TcpStream::connect(proxy.addr)
        .await
        .expect("connect");
    s.write_all(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nonly-a-bit")
        .await
        .expect("write");
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut buf)).await;
    let text = String::from_utf8_lossy(&buf);
    assert!(text.starts_with("HTTP/1.1 408"), "{text:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_trailers_cannot_forge_forwarding_fields() {
    let (proxy, _origin) = proxy_to_origin().await;
    let text = raw_exchange(
        proxy.addr,
        b"POST /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\nTransfer-Encoding: chunked\r\nTrailer: x-forwarded-for, x-sum\r\n\r\n\
          5\r\nhello\r\n0\r\nx-forwarded-for: 6.6.6.6\r\nx-sum: 1\r\n\r\n",
        Duration::from_secs(5),
    )
    .await;
    assert!(text.contains("\"body_len\":5"), "{text:?}");
    assert!(
        !text.contains("6.6.6.6"),
        "a trailer forged X-Forwarded-For: {text:?}"
    );
}

async fn through_raw_upstream(
    response: &'static [u8],
    h2: bool,
) -> (u16, http::HeaderMap, Result<bytes::Bytes, String>) {
    use http_body_util::BodyExt;
    let upstream = RawUpstream::start(response).await;
    let proxy = start_proxy(&config_text(
        &format!("http://{}", upstream.addr),
        "",
        "",
        "",
    ))
    .await;
    let resp = client(h2)
        .get(proxy.url("/").parse().expect("url"))
        .await
        .expect("response head");
    let (parts, body) = resp.into_parts();
    let body = body
        .collect()
        .await
        .map(|c| c.to_bytes())
        .map_err(|e| e.to_string());
    (parts.status.as_u16(), parts.headers, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_content_length_next_to_chunked_is_dropped() {
    for h2 in [false, true] {
        let (status, headers, body) = through_raw_upstream(
            b"HTTP/1.1 200 OK\r\nContent-Length: 50\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
            h2,
        )
        .await;
        assert_eq!(status, 200);
        assert!(
            headers.get("content-length").is_none(),
            "h2={h2}: {headers:?}"
        );
        assert_eq!(body.as_deref(), Ok(&b"ok"[..]), "h2={h2}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_101_or_unknown_transfer_coding_is_a_502() {
    for response in [
        &b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n"[..],
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\nConnection: close\r\n\r\nnot-really-gzip",
    ] {
        let (status, _, _) = through_raw_upstream(response, false).await;
        assert_eq!(status, 502, "{:?}", String::from_utf8_lossy(response));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_204_loses_its_content_length() {
    let (status, headers, body) = through_raw_upstream(
        b"HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n",
        false,
    )
    .await;
    assert_eq!(status, 204);
    assert!(headers.get("content-length").is_none(), "{headers:?}");
    assert_eq!(body.map(|b| b.len()), Ok(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_body_that_fails_before_its_first_byte_is_a_502() {
    for h2 in [false, true] {
        for response in [
            &b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n"[..],
            b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n",
        ] {
            let (status, _, body) = through_raw_upstream(response, h2).await;
            assert_eq!(
                status,
                502,
                "h2={h2} {:?}: {body:?}",
                String::from_utf8_lossy(response)
            );
            assert_eq!(body.as_deref(), Ok(&b"502 Bad Gateway\n"[..]), "h2={h2}");
        }
    }
}
