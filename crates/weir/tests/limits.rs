//! Request limits on real sockets: each one hit exactly at its boundary
//! (the limit passes, one more fails with its status) over HTTP/1.1 and
//! HTTP/2 (curl with prior knowledge), a body trickled slower than the
//! minimum rate while 1,000 idle connections are held, `max_connections`
//! and `max_concurrent_requests`.

mod common;

use std::time::{Duration, Instant};

use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

async fn proxy_with(server: &str, route: &str) -> (Proxy, Origin) {
    let origin = start_origin().await;
    let text = format!(
        "[[listener]]\naddress = \"127.0.0.1:0\"\n\n[server]\n{server}\n\n\
         [[upstream]]\nname = \"app\"\nurl = \"http://{}\"\n\n\
         [[route]]\npath_prefix = \"/\"\nupstream = \"app\"\n{route}\n",
        origin.addr
    );
    (start_proxy(&text).await, origin)
}

/// The status line's code of a raw HTTP/1.1 exchange.
async fn raw_status(proxy: &Proxy, request: &[u8]) -> String {
    let text = raw_exchange(proxy.addr, request, Duration::from_secs(5)).await;
    text.split(' ').nth(1).unwrap_or("none").to_owned()
}

/// curl's status for `args` over HTTP/2 with prior knowledge, with its
/// default `User-Agent` and `Accept` removed so the sizes are ours.
fn curl_h2_status(args: &[&str]) -> String {
    let mut all = vec![
        "-sS",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        "--http2-prior-knowledge",
        "-H",
        "User-Agent:",
        "-H",
        "Accept:",
    ];
    all.extend_from_slice(args);
    let out = curl(&all);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A GET of `/` whose HTTP/1.1 head is exactly `size` bytes.
fn head_of(size: usize) -> Vec<u8> {
    let fixed = "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-Pad: \r\n\r\n".len();
    let pad = "p".repeat(size - fixed);
    let head = format!("GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-Pad: {pad}\r\n\r\n");
    assert_eq!(head.len(), size);
    head.into_bytes()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_head_size_limit_passes_at_the_limit_and_431s_past_it() {
    let (proxy, _origin) = proxy_with("max_request_head_bytes = 9000", "").await;
    assert_eq!(raw_status(&proxy, &head_of(9000)).await, "200");
    assert_eq!(raw_status(&proxy, &head_of(9001)).await, "431");
    // HTTP/2 counts the header list as RFC 9113 §6.5.2 does: name, value
    // and 32 bytes per field, the pseudo-fields included.
    let authority = proxy.addr.to_string();
    let fixed = (7 + 3 + 32) + (7 + 4 + 32) + (10 + authority.len() + 32) + (5 + 1 + 32) + (5 + 32);
    let at = format!("x-pad: {}", "p".repeat(9000 - fixed));
    let over = format!("x-pad: {}", "p".repeat(9001 - fixed));
    let url = proxy.url("/");
    assert_eq!(curl_h2_status(&["-H", &at, &url]), "200");
    assert_eq!(curl_h2_status(&["-H", &over, &url]), "431");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_field_count_limit_passes_at_the_limit_and_431s_past_it() {
    let (proxy, _origin) = proxy_with("max_request_headers = 20", "").await;
    let request = |n: usize| {
        // Host and Connection, then n - 2 more.
        let mut r = String::from("GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n");
        for i in 0..n - 2 {
            r += &format!("X-F{i}: v\r\n");
        }
        r += "\r\n";
        r.into_bytes()
    };
    assert_eq!(raw_status(&proxy, &request(20)).await, "200");
    assert_eq!(raw_status(&proxy, &request(21)).await, "431");
    let url = proxy.url("/");
    let fields = |n: usize| -> Vec<String> { (0..n).map(|i| format!("x-f{i}: v")).collect() };
    for (n, want) in [(20, "200"), (21, "431")] {
        let list = fields(n);
        let mut args: Vec<&str> = Vec::new();
        for f in &list {
            args.extend(["-H", f.as_str()]);
        }
        args.push(&url);
        assert_eq!(curl_h2_status(&args), want, "{n} fields over HTTP/2");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_uri_length_limit_passes_at_the_limit_and_414s_past_it() {
    let (proxy, _origin) = proxy_with("max_uri_bytes = 1024", "").await;
    // `/echo?` and padding: the path and query are the request target.
    let target = |len: usize| format!("/echo?{}", "q".repeat(len - 6));
    for (len, want) in [(1024, "200"), (1025, "414")] {
        let t = target(len);
        assert_eq!(t.len(), len);
        let req = format!("GET {t} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        assert_eq!(
            raw_status(&proxy, req.as_bytes()).await,
            want,
            "HTTP/1.1, {len}"
        );
        assert_eq!(curl_h2_status(&[&proxy.url(&t)]), want, "HTTP/2, {len}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_body_size_limit_passes_at_the_limit_and_413s_past_it_declared_or_streamed() {
    let (proxy, _origin) = proxy_with("", "max_request_body_bytes = 1000").await;
    let dir = tempfile::tempdir().expect("tempdir");
    let url = proxy.url("/echo");
    for (len, want) in [(1000, "200"), (1001, "413")] {
        let file = dir.path().join(format!("body-{len}"));
        std::fs::write(&file, vec![b'b'; len]).expect("write body");
        let data = format!("@{}", file.display());
        let out = curl(&[
            "-sS",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "--http1.1",
            "--data-binary",
            &data,
            &url,
        ]);
        assert_eq!(String::from_utf8_lossy(&out.stdout), want, "HTTP/1.1 {len}");
        // HTTP/2 through hyper's client: Weir answers the 413 without
        // reading the body and resets the stream (NO_ERROR, RFC 9113
        // §8.1), which curl 7.88 sometimes reports as a failed transfer
        // instead of the response it got.
        let req = http::Request::post(url.as_str())
            .header("content-length", len)
            .body(http_body_util::Full::new(bytes::Bytes::from(vec![
                b'b';
                len
            ])))
            .expect("request");
        let status = client(true)
            .request(req)
            .await
            .expect("HTTP/2 response")
            .status();
        assert_eq!(status.as_str(), want, "HTTP/2 {len}");
        // Chunked: no length to check up front; the limit holds as it streams.
        let out = curl(&[
            "-sS",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "--http1.1",
            "-H",
            "Transfer-Encoding: chunked",
            "--data-binary",
            &data,
            &url,
        ]);
        assert_eq!(String::from_utf8_lossy(&out.stdout), want, "chunked {len}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_trickled_at_a_byte_a_second_ends_in_408_while_1000_idle_connections_wait() {
    let (proxy, _origin) = proxy_with(
        "request_body_min_rate = 100\nrequest_body_rate_grace = \"2s\"",
        "",
    )
    .await;
    let mut idle = Vec::with_capacity(1000);
    for _ in 0..1000 {
        idle.push(
            tokio::net::TcpStream::connect(proxy.addr)
                .await
                .expect("idle connection"),
        );
    }
    let addr = proxy.addr;
    let trickle = tokio::spawn(async move {
        let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
        s.write_all(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n")
            .await
            .expect("head");
        let start = Instant::now();
        let mut answer = Vec::new();
        // One byte a second, for at most 10 s, until Weir answers.
        for _ in 0..10 {
            if s.write_all(b"x").await.is_err() {
                break;
            }
            let mut buf = [0u8; 1024];
            match tokio::time::timeout(Duration::from_secs(1), s.read(&mut buf)).await {
                Ok(Ok(n)) if n > 0 => {
                    answer.extend_from_slice(&buf[..n]);
                    break;
                }
                Ok(_) => break,
                Err(_) => {}
            }
        }
        (
            start.elapsed(),
            String::from_utf8_lossy(&answer).into_owned(),
        )
    });
    // Normal requests keep being served meanwhile.
    for _ in 0..20 {
        let (status, _, _) = get(&proxy.url("/bytes/10"), false).await;
        assert_eq!(status, 200);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (took, answer) = trickle.await.expect("trickle task");
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer:?}");
    // The rate is checked once 2 s of waiting passed: the byte after that.
    assert!(took < Duration::from_secs(5), "ended after {took:?}");
    drop(idle);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_max_connections_a_new_connection_waits_until_one_closes() {
    let (proxy, _origin) = proxy_with("max_connections = 5", "").await;
    let mut held = Vec::new();
    for _ in 0..5 {
        let mut s = tokio::net::TcpStream::connect(proxy.addr)
            .await
            .expect("connect");
        // Served: each one answers, so each holds a slot.
        s.write_all(b"GET /bytes/1 HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .expect("write");
        let mut buf = [0u8; 512];
        let n = s.read(&mut buf).await.expect("read");
        assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
        held.push(s);
    }
    let mut sixth = tokio::net::TcpStream::connect(proxy.addr)
        .await
        .expect("backlog");
    sixth
        .write_all(b"GET /bytes/1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .expect("write");
    let mut buf = [0u8; 512];
    let early = tokio::time::timeout(Duration::from_millis(500), sixth.read(&mut buf)).await;
    assert!(early.is_err(), "the sixth connection was served at once");
    assert!(
        proxy
            .metrics
            .encode()
            .expect("metrics")
            .contains("weir_downstream_connection_waits_total 1"),
        "{}",
        proxy.metrics.encode().expect("metrics")
    );
    drop(held.pop());
    let n = tokio::time::timeout(Duration::from_secs(5), sixth.read(&mut buf))
        .await
        .expect("served once a slot freed")
        .expect("read");
    assert!(
        buf[..n].starts_with(b"HTTP/1.1 200"),
        "{:?}",
        String::from_utf8_lossy(&buf[..n])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_max_concurrent_requests_a_route_answers_503_at_once() {
    let (proxy, _origin) = proxy_with("", "max_concurrent_requests = 2").await;
    let slow: Vec<_> = (0..2)
        .map(|_| {
            let url = proxy.url("/delay/1000");
            tokio::spawn(async move { get(&url, false).await.0 })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let start = Instant::now();
    let (status, _, body) = get(&proxy.url("/bytes/1"), true).await;
    assert_eq!(status, 503, "{body:?}");
    assert!(start.elapsed() < Duration::from_millis(500));
    for s in slow {
        assert_eq!(s.await.expect("task"), 200);
    }
    // The slots are free again.
    assert_eq!(get(&proxy.url("/bytes/1"), false).await.0, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limit_admits_its_rate_over_ten_seconds_and_429s_the_rest_with_retry_after() {
    let (proxy, _origin) = proxy_with(
        "",
        "[route.rate_limit]\nrequests_per_second = 50\nburst = 10\nkey = \"header:x-tenant\"",
    )
    .await;
    let client = client(false);
    let url: http::Uri = proxy.url("/bytes/1").parse().expect("url");
    let send = |tenant: &'static str| {
        let req = http::Request::get(url.clone())
            .header("x-tenant", tenant)
            .body(http_body_util::Full::<bytes::Bytes>::default())
            .expect("request");
        client.request(req)
    };
    // Another tenant has a bucket of its own.
    assert_eq!(send("b").await.expect("response").status(), 200);
    let start = Instant::now();
    let (mut ok, mut limited) = (0u32, 0u32);
    let mut retry_after = None;
    while start.elapsed() < Duration::from_secs(10) {
        let resp = send("a").await.expect("response");
        match resp.status().as_u16() {
            200 => ok += 1,
            429 => {
                limited += 1;
                retry_after = resp.headers().get("retry-after").cloned();
            }
            other => panic!("status {other}"),
        }
    }
    let elapsed = start.elapsed().as_secs_f64();
    let want = 50.0 * elapsed + 10.0;
    assert!(
        (f64::from(ok) - want).abs() <= want * 0.1,
        "{ok} admitted in {elapsed:.2} s, want {want:.0} ± 10 %"
    );
    assert!(limited > 0, "nothing was limited");
    assert_eq!(retry_after.as_ref().map(|v| v.as_bytes()), Some(&b"1"[..]));
    let text = proxy.metrics.encode().expect("metrics");
    assert!(
        text.contains(&format!("status=\"429\",outcome=\"limited\"}} {limited}")),
        "{text}"
    );
}
