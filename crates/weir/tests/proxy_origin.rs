//! The proxy in front of the built-in origin, driven by curl and hyper.

mod common;

use std::time::{Duration, Instant};

use bytes::Bytes;
use common::*;
use http_body_util::{BodyExt, Full};
use hyper::Request;

const TEN_MB: usize = 10 * 1024 * 1024;

fn header_values(echo: &serde_json::Value, name: &str) -> Vec<String> {
    echo["headers"]
        .as_array()
        .expect("headers array")
        .iter()
        .filter(|pair| {
            pair[0]
                .as_str()
                .is_some_and(|n| n.eq_ignore_ascii_case(name))
        })
        .map(|pair| pair[1].as_str().unwrap_or_default().to_owned())
        .collect()
}

async fn echo(proxy: &Proxy, req: Request<Full<Bytes>>, h2: bool) -> serde_json::Value {
    let mut req = req;
    *req.uri_mut() = proxy.url(&req.uri().to_string()).parse().expect("url");
    let resp = client(h2).request(req).await.expect("request");
    assert_eq!(resp.status(), 200);
    let body = resp.into_body().collect().await.expect("body").to_bytes();
    serde_json::from_slice(&body).expect("echo json")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn download_10mb_sha256_matches_over_http1_and_http2() {
    let (proxy, _origin) = proxy_to_origin().await;
    let expected = weir_origin::pattern::sha256_hex(TEN_MB as u64);
    for h2 in [false, true] {
        let (status, headers, body) = get(&proxy.url(&format!("/bytes/{TEN_MB}")), h2).await;
        assert_eq!(status, 200);
        assert_eq!(body.len(), TEN_MB, "h2={h2}");
        assert_eq!(sha256_hex(&body), expected, "h2={h2}");
        assert!(headers.get("via").is_some(), "Via missing, h2={h2}");
    }
    for flag in ["--http1.1", "--http2-prior-knowledge"] {
        let out = curl(&[flag, &proxy.url(&format!("/bytes/{TEN_MB}"))]);
        assert!(
            out.status.success(),
            "curl {flag}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(sha256_hex(&out.stdout), expected, "curl {flag}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upload_10mb_chunked_to_echo_sha256_matches() {
    let (proxy, _origin) = proxy_to_origin().await;
    let data = weir_origin::pattern::bytes(7, TEN_MB);
    let expected = sha256_hex(&data);
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("upload.bin");
    std::fs::write(&file, &data).expect("write");
    let at_file = format!("@{}", file.display());
    for flag in ["--http1.1", "--http2-prior-knowledge"] {
        let out = curl(&[
            flag,
            "-H",
            "Transfer-Encoding: chunked",
            "--data-binary",
            &at_file,
            &proxy.url("/echo"),
        ]);
        assert!(
            out.status.success(),
            "curl {flag}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let echo: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
        assert_eq!(echo["body_len"], TEN_MB, "{flag}");
        assert_eq!(echo["body_sha256"], expected, "{flag}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_first_chunk_reaches_client_before_origin_writes_the_last() {
    let (proxy, _origin) = proxy_to_origin().await;
    // 20 chunks, 100 ms apart: the origin needs ~1.9 s to write them all.
    let url = proxy.url("/stream/20480?chunk=1024&delay_ms=100");
    let start = Instant::now();
    let resp = client(false)
        .get(url.parse().expect("url"))
        .await
        .expect("request");
    let mut body = resp.into_body();
    let first = body.frame().await.expect("a frame").expect("frame ok");
    let first_at = start.elapsed();
    assert!(first.data_ref().is_some_and(|d| !d.is_empty()));
    let mut total = first.into_data().map(|d| d.len()).unwrap_or(0);
    while let Some(frame) = body.frame().await {
        total += frame
            .expect("frame")
            .into_data()
            .map(|d| d.len())
            .unwrap_or(0);
    }
    let last_at = start.elapsed();
    assert_eq!(total, 20480);
    // A buffering proxy would deliver the first byte only after ~1.9 s.
    assert!(
        first_at + Duration::from_millis(1000) < last_at,
        "first chunk at {first_at:?}, last at {last_at:?}: the body was buffered"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hop_by_hop_request_headers_are_stripped() {
    let (proxy, _origin) = proxy_to_origin().await;
    let req = Request::get("/echo")
        .header("connection", "x-secret, keep-alive")
        .header("x-secret", "hush")
        .header("keep-alive", "timeout=5")
        .header("proxy-connection", "keep-alive")
        .header("te", "gzip, trailers")
        .header("upgrade", "h2c")
        .header("x-kept", "yes")
        .body(Full::default())
        .expect("request");
    let echo = echo(&proxy, req, false).await;
    for name in ["x-secret", "keep-alive", "proxy-connection", "upgrade"] {
        assert!(
            header_values(&echo, name).is_empty(),
            "{name} reached the upstream: {echo}"
        );
    }
    assert_eq!(header_values(&echo, "te"), ["trailers"], "{echo}");
    assert_eq!(header_values(&echo, "x-kept"), ["yes"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hop_by_hop_response_headers_are_stripped() {
    let (proxy, _origin) = proxy_to_origin().await;
    let url = proxy.url("/response-headers?connection=x-hop&x-hop=1&keep-alive=timeout%3D5&proxy-connection=close&x-end=2");
    for h2 in [false, true] {
        let (status, headers, _) = get(&url, h2).await;
        assert_eq!(status, 200);
        for name in ["x-hop", "keep-alive", "proxy-connection"] {
            assert!(
                headers.get(name).is_none(),
                "{name} reached the client (h2={h2}): {headers:?}"
            );
        }
        assert_eq!(headers["x-end"], "2");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarded_headers_from_an_untrusted_peer_are_replaced() {
    let (proxy, _origin) = proxy_to_origin().await;
    let req = Request::get("/echo")
        .header("host", "shop.example")
        .header("x-forwarded-for", "6.6.6.6")
        .header("x-forwarded-proto", "https")
        .header("x-forwarded-host", "evil.example")
        .header("x-real-ip", "6.6.6.6")
        .header("true-client-ip", "6.6.6.6")
        .body(Full::default())
        .expect("request");
    let echo = echo(&proxy, req, false).await;
    assert_eq!(header_values(&echo, "x-real-ip"), ["127.0.0.1"], "{echo}");
    assert!(header_values(&echo, "true-client-ip").is_empty(), "{echo}");
    assert_eq!(
        header_values(&echo, "x-forwarded-for"),
        ["127.0.0.1"],
        "{echo}"
    );
    assert_eq!(header_values(&echo, "x-forwarded-proto"), ["http"]);
    assert_eq!(header_values(&echo, "x-forwarded-host"), ["shop.example"]);
    assert_eq!(
        header_values(&echo, "host"),
        ["shop.example"],
        "Host is preserved by default"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarded_for_from_a_trusted_peer_is_appended() {
    let origin = start_origin().await;
    let proxy = start_proxy(&config_text(
        &format!("http://{}", origin.addr),
        "trusted_proxies = [\"127.0.0.0/8\"]",
        "",
        "",
    ))
    .await;
    let req = Request::get("/echo")
        .header("x-forwarded-for", "203.0.113.9")
        .header("x-forwarded-proto", "https")
        .body(Full::default())
        .expect("request");
    let echo = echo(&proxy, req, false).await;
    assert_eq!(
        header_values(&echo, "x-forwarded-for"),
        ["203.0.113.9, 127.0.0.1"]
    );
    assert_eq!(header_values(&echo, "x-forwarded-proto"), ["https"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn via_is_added_both_ways() {
    let (proxy, _origin) = proxy_to_origin().await;
    for (h2, proto) in [(false, "1.1"), (true, "2")] {
        let req = Request::get("/echo")
            .body(Full::default())
            .expect("request");
        let echo = echo(&proxy, req, h2).await;
        assert_eq!(
            header_values(&echo, "via"),
            [format!("{proto} weir")],
            "{echo}"
        );
    }
    let (_, headers, _) = get(&proxy.url("/index.html"), false).await;
    assert_eq!(headers["via"], "1.1 weir");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_header_is_rewritten_when_the_route_asks() {
    let origin = start_origin().await;
    let upstream = format!("http://{}", origin.addr);
    let proxy = start_proxy(&format!(
        "[[listener]]\naddress = \"127.0.0.1:0\"\n[[upstream]]\nname = \"a\"\nurl = \"{upstream}\"\n\
         [[route]]\npath_prefix = \"/api\"\nstrip_prefix = true\nupstream = \"a\"\nhost_header = \"upstream\"\n"
    ))
    .await;
    let req = Request::get("/api/echo?x=1")
        .header("host", "shop.example")
        .body(Full::default())
        .expect("request");
    let echo = echo(&proxy, req, false).await;
    assert_eq!(header_values(&echo, "host"), [origin.addr.to_string()]);
    assert_eq!(
        echo["uri"], "/echo?x=1",
        "prefix stripped, query kept: {echo}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_route_is_a_404_from_the_proxy() {
    let origin = start_origin().await;
    let upstream = format!("http://{}", origin.addr);
    let proxy = start_proxy(&format!(
        "[[listener]]\naddress = \"127.0.0.1:0\"\n[[upstream]]\nname = \"a\"\nurl = \"{upstream}\"\n\
         [[route]]\nhost = \"only.example\"\nupstream = \"a\"\n"
    ))
    .await;
    let out = curl(&["-i", "-H", "Host: other.example", &proxy.url("/index.html")]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("HTTP/1.1 404"), "{text}");
    assert!(text.contains("no route"), "{text}");
    let out = curl(&[
        "-i",
        "-H",
        "Host: only.example:8080",
        &proxy.url("/index.html"),
    ]);
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("HTTP/1.1 200"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn absolute_form_target_never_reaches_a_host_no_route_names() {
    let (proxy, origin) = proxy_to_origin().await;
    // curl's --proxy sends `GET http://unrouted.invalid:9/echo HTTP/1.1`.
    let out = curl(&["--proxy", &proxy.url(""), "http://unrouted.invalid:9/echo"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let echo: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    // The request went to the route's upstream (the origin), not to the named host.
    assert_eq!(echo["uri"], "/echo");
    assert_ne!(origin.addr.port(), 9);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_down_is_a_502_with_a_reason_logged() {
    let port = free_port(); // nothing listens here
    let proxy = start_proxy(&config_text(
        &format!("http://127.0.0.1:{port}"),
        "",
        "",
        "",
    ))
    .await;
    let out = curl(&["-i", &proxy.url("/")]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("HTTP/1.1 502"), "{text}");
    assert!(text.contains("text/plain"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_response_headers_in_time_is_a_504() {
    let origin = start_origin().await;
    let proxy = start_proxy(&config_text(
        &format!("http://{}", origin.addr),
        "",
        "response_header_timeout = \"300ms\"",
        "",
    ))
    .await;
    let start = Instant::now();
    let (status, _, body) = get(&proxy.url("/delay/5000"), false).await;
    assert_eq!(status, 504);
    assert!(String::from_utf8_lossy(&body).contains("Gateway Timeout"));
    assert!(
        start.elapsed() < Duration::from_secs(4),
        "took {:?}",
        start.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_abort_mid_body_is_a_failed_transfer_for_curl() {
    let (proxy, _origin) = proxy_to_origin().await;
    for flag in ["--http1.1", "--http2-prior-knowledge"] {
        let out = curl(&[flag, "-o", "/dev/null", &proxy.url("/abort/100000")]);
        assert!(
            !out.status.success(),
            "curl {flag} saw a clean end of an aborted upstream body"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_abort_mid_body_is_an_error_for_hyper() {
    let (proxy, _origin) = proxy_to_origin().await;
    for h2 in [false, true] {
        let resp = client(h2)
            .get(proxy.url("/abort/100000").parse().expect("url"))
            .await
            .expect("response head");
        assert_eq!(resp.status(), 200);
        let res = resp.into_body().collect().await;
        assert!(res.is_err(), "h2={h2}: body ended cleanly");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trailers_reach_an_http2_client() {
    let (proxy, _origin) = proxy_to_origin().await;
    let resp = client(true)
        .get(proxy.url("/trailers").parse().expect("url"))
        .await
        .expect("request");
    assert_eq!(resp.status(), 200);
    let collected = resp.into_body().collect().await.expect("body");
    let trailers = collected
        .trailers()
        .cloned()
        .expect("trailers reached the client");
    let body = collected.to_bytes();
    assert_eq!(trailers["x-trailer-test"], "ok");
    assert_eq!(trailers["x-body-sha256"], sha256_hex(&body).as_str());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trailers_reach_an_http1_client_that_asks_for_them() {
    let (proxy, _origin) = proxy_to_origin().await;
    let out = curl(&[
        "--http1.1",
        "-H",
        "TE: trailers",
        "-D",
        "-",
        "-o",
        "/dev/null",
        &proxy.url("/trailers"),
    ]);
    let text = String::from_utf8_lossy(&out.stdout).to_ascii_lowercase();
    assert!(text.contains("x-trailer-test: ok"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn body_idle_timeout_aborts_a_stalled_upstream_body() {
    let origin = start_origin().await;
    let proxy = start_proxy(&config_text(
        &format!("http://{}", origin.addr),
        "body_idle_timeout = \"300ms\"",
        "",
        "",
    ))
    .await;
    // Chunks 2 s apart: the second one never comes within the idle timeout.
    let out = curl(&[
        "--http1.1",
        "-o",
        "/dev/null",
        &proxy.url("/stream/4096?chunk=1024&delay_ms=2000"),
    ]);
    assert!(!out.status.success(), "a stalled body ended cleanly");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_client_headers_are_cut_off_by_header_read_timeout() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let origin = start_origin().await;
    let proxy = start_proxy(&config_text(
        &format!("http://{}", origin.addr),
        "header_read_timeout = \"300ms\"",
        "",
        "",
    ))
    .await;
    for partial in [&b""[..], b"GET / HTTP/1.1\r\nHost: x\r\n"] {
        let mut s = tokio::net::TcpStream::connect(proxy.addr)
            .await
            .expect("connect");
        s.write_all(partial).await.expect("write");
        let mut buf = Vec::new();
        let res = tokio::time::timeout(Duration::from_secs(3), s.read_to_end(&mut buf)).await;
        assert!(
            res.is_ok(),
            "connection still open after 3 s with partial headers {partial:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_request_gets_a_400() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (proxy, _origin) = proxy_to_origin().await;
    let mut s = tokio::net::TcpStream::connect(proxy.addr)
        .await
        .expect("connect");
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n")
        .await
        .expect("write");
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(3), s.read_to_end(&mut buf)).await;
    let text = String::from_utf8_lossy(&buf);
    assert!(text.starts_with("HTTP/1.1 400"), "{text:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dot_segments_cannot_escape_a_route_prefix() {
    let origin = start_origin().await;
    let upstream = format!("http://{}", origin.addr);
    let proxy = start_proxy(&format!(
        "[[listener]]\naddress = \"127.0.0.1:0\"\n[[upstream]]\nname = \"a\"\nurl = \"{upstream}\"\n\
         [[route]]\npath_prefix = \"/public\"\nupstream = \"a\"\n"
    ))
    .await;
    let out = curl(&["-i", "--path-as-is", &proxy.url("/public/../echo")]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("HTTP/1.1 404"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn head_request_gets_headers_and_no_body() {
    let (proxy, _origin) = proxy_to_origin().await;
    let out = curl(&["-I", &proxy.url("/bytes/1000")]);
    let text = String::from_utf8_lossy(&out.stdout).to_ascii_lowercase();
    assert!(text.starts_with("http/1.1 200"), "{text}");
    assert!(text.contains("content-length: 1000"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alive_connections_serve_many_requests() {
    let (proxy, _origin) = proxy_to_origin().await;
    let url = proxy.url("/bytes/100");
    // curl reuses one connection for several URLs on one command line.
    let out = curl(&[
        "--http1.1",
        "-v",
        "-o",
        "/dev/null",
        "-o",
        "/dev/null",
        "-o",
        "/dev/null",
        &url,
        &url,
        &url,
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("Re-using existing connection") || err.contains("Reusing existing connection"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_stop_lets_an_in_flight_download_finish() {
    let (proxy, _origin) = proxy_to_origin().await;
    let url = proxy.url("/stream/65536?chunk=4096&delay_ms=50");
    let download = tokio::spawn(async move { get(&url, false).await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let addr = proxy.addr;
    proxy.stop().await;
    let (status, _, body) = download.await.expect("download task");
    assert_eq!(status, 200);
    assert_eq!(body.len(), 65536);
    assert_eq!(sha256_hex(&body), weir_origin::pattern::sha256_hex(65536));
    assert!(
        tokio::net::TcpStream::connect(addr).await.is_err(),
        "still accepting after shutdown"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn content_length_next_to_transfer_encoding_is_not_forwarded() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (proxy, _origin) = proxy_to_origin().await;
    let mut s = tokio::net::TcpStream::connect(proxy.addr)
        .await
        .expect("connect");
    s.write_all(
        b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\nb\r\nhello world\r\n0\r\n\r\n",
    )
    .await
    .expect("write");
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut buf)).await;
    let text = String::from_utf8_lossy(&buf);
    let json = &text[text.find('{').expect("a JSON body")..text.rfind('}').expect("end") + 1];
    let echo: serde_json::Value = serde_json::from_str(json).expect("echo json");
    assert_eq!(echo["body_len"], 11, "{echo}");
    assert!(header_values(&echo, "content-length").is_empty(), "{echo}");
}
