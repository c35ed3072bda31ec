//! Response transforms through the proxy, end to end: compression
//! negotiated and round-tripped (with the codec crates and curl),
//! html-rewrite + compress streaming piece by piece, head edits, and a
//! failing stage aborting the client's transfer.

mod common;

use std::io::Write as _;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::*;
use http_body_util::{BodyExt, Full};
use hyper::Request;

const MB: usize = 1024 * 1024;

/// Deterministic incompressible bytes (xorshift64*).
fn random_bytes(len: usize, mut seed: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        seed ^= seed >> 12;
        seed ^= seed << 25;
        seed ^= seed >> 27;
        out.extend_from_slice(&seed.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes());
    }
    out.truncate(len);
    out
}

/// Deterministic text, compressible like a real page.
fn text_bytes(len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + 64);
    let mut i = 0u64;
    while out.len() < len {
        writeln!(
            out,
            "<li id=\"item-{i}\">line {i}: the quick brown fox {}</li>",
            i * 7919 % 1000
        )
        .expect("write");
        i += 1;
    }
    out.truncate(len);
    out
}

fn decode(coding: &str, data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    match coding {
        "gzip" => {
            let mut d = flate2::write::GzDecoder::new(&mut out);
            d.write_all(data).expect("gzip decode");
            d.finish().expect("gzip end");
        }
        "br" => {
            let mut d = brotli::DecompressorWriter::new(&mut out, 4096);
            d.write_all(data).expect("br decode");
            d.close().expect("br end");
        }
        "zstd" => out = zstd::stream::decode_all(data).expect("zstd decode"),
        other => panic!("unexpected coding {other}"),
    }
    out
}

/// A proxy with `transforms` (and settings tables in `extra`) on its one
/// route, in front of an origin serving `root`.
async fn proxy_with(
    root: Option<&std::path::Path>,
    extra: &str,
) -> (Proxy, weir_origin::OriginHandle) {
    let root = root.map_or_else(fixtures, std::path::Path::to_path_buf);
    let origin = weir_origin::spawn(
        "127.0.0.1:0".parse().expect("addr"),
        weir_origin::OriginConfig::new(root),
    )
    .await
    .expect("origin");
    let text = config_text(&format!("http://{}", origin.local_addr()), "", "", extra);
    (start_proxy(&text).await, origin)
}

async fn get_with(
    url: &str,
    headers: &[(&str, &str)],
    h2: bool,
) -> (http::StatusCode, http::HeaderMap, Bytes) {
    let mut req = Request::get(url);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = client(h2)
        .request(req.body(Full::new(Bytes::new())).expect("request"))
        .await
        .expect("response");
    let (parts, body) = resp.into_parts();
    let body = body.collect().await.expect("body").to_bytes();
    (parts.status, parts.headers, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_coding_round_trips_0b_1b_1mb_10mb_random_and_text() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut files = Vec::new();
    for (len, label) in [(0, "0b"), (1, "1b"), (MB, "1mb"), (10 * MB, "10mb")] {
        for (kind, data) in [
            ("random", random_bytes(len, 7 + len as u64)),
            ("text", text_bytes(len)),
        ] {
            let name = format!("{kind}-{label}.txt");
            std::fs::write(dir.path().join(&name), &data).expect("write");
            files.push((name, data));
        }
    }
    let (proxy, _origin) = proxy_with(
        Some(dir.path()),
        "transforms = [\"coalesce\", \"compress\"]\n[route.compress]\nmin_length = 0\n",
    )
    .await;
    for (name, data) in &files {
        for coding in ["gzip", "br", "zstd"] {
            for h2 in [false, true] {
                let (status, headers, body) = get_with(
                    &proxy.url(&format!("/{name}")),
                    &[("accept-encoding", coding)],
                    h2,
                )
                .await;
                assert_eq!(status, 200, "{name} {coding}");
                if data.is_empty() {
                    // An empty body is forwarded as it is: nothing to encode.
                    assert!(
                        headers.get("content-encoding").is_none(),
                        "{name}: {headers:?}"
                    );
                    assert!(body.is_empty());
                    continue;
                }
                assert_eq!(
                    headers
                        .get("content-encoding")
                        .map(|v| v.to_str().expect("ascii")),
                    Some(coding),
                    "{name}: {headers:?}"
                );
                assert!(
                    headers.get("content-length").is_none(),
                    "{name}: stale length"
                );
                let decoded = decode(coding, &body);
                assert!(
                    decoded == *data,
                    "{name} {coding} h2={h2}: decoded body differs"
                );
            }
        }
        // curl decodes what it asked for with --compressed.
        let out = curl(&["--compressed", &proxy.url(&format!("/{name}"))]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.stdout == *data,
            "{name}: curl --compressed body differs"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn negotiation_and_head_edits_through_the_proxy() {
    let (proxy, _origin) = proxy_with(
        None,
        "transforms = [\"compress\"]\n[route.compress]\ncodings = [\"br\", \"gzip\"]\n",
    )
    .await;
    let url = proxy.url("/index.html");
    let cases: &[(&str, Option<&str>)] = &[
        ("gzip, br", Some("br")),
        ("gzip;q=1, br;q=0.5", Some("gzip")),
        ("br;q=0, gzip", Some("gzip")),
        ("*", Some("br")),
        ("zstd", None),
        ("identity", None),
    ];
    for (accept, want) in cases {
        let (status, headers, body) = get_with(&url, &[("accept-encoding", accept)], false).await;
        assert_eq!(status, 200);
        let got = headers
            .get("content-encoding")
            .map(|v| v.to_str().expect("ascii"));
        assert_eq!(got, *want, "Accept-Encoding: {accept}");
        let vary = headers
            .get("vary")
            .map(|v| v.to_str().expect("ascii").to_ascii_lowercase());
        assert!(
            vary.as_deref()
                .is_some_and(|v| v.contains("accept-encoding")),
            "Vary missing for {accept}: {headers:?}"
        );
        let plain = std::fs::read(fixtures().join("index.html")).expect("fixture");
        match want {
            Some(coding) => {
                assert!(headers.get("content-length").is_none());
                assert!(headers.get("accept-ranges").is_none());
                if let Some(etag) = headers.get("etag") {
                    assert!(
                        etag.as_bytes().starts_with(b"W/"),
                        "strong ETag kept: {etag:?}"
                    );
                }
                assert_eq!(decode(coding, &body), plain);
            }
            None => assert_eq!(body, plain),
        }
    }
    // No Accept-Encoding: no compression.
    let (_, headers, _) = get_with(&url, &[], false).await;
    assert!(headers.get("content-encoding").is_none());
    // A range passes untouched, Content-Range intact.
    let (status, headers, body) = get_with(
        &url,
        &[("accept-encoding", "gzip"), ("range", "bytes=0-99")],
        false,
    )
    .await;
    assert_eq!(status, 206);
    assert!(headers.get("content-encoding").is_none(), "{headers:?}");
    assert!(headers.get("content-range").is_some(), "{headers:?}");
    assert_eq!(body.len(), 100);
    // Images are not compressed.
    let (_, headers, _) = get_with(
        &proxy.url("/logo.png"),
        &[("accept-encoding", "gzip")],
        false,
    )
    .await;
    assert!(headers.get("content-encoding").is_none(), "{headers:?}");
    // HEAD: the head a GET would get (RFC 9110 §9.3.2), no body.
    let resp = client(false)
        .request(
            Request::head(&url)
                .header("accept-encoding", "gzip")
                .body(Full::new(Bytes::new()))
                .expect("request"),
        )
        .await
        .expect("response");
    assert_eq!(
        resp.headers().get("content-encoding").map(|v| v.as_bytes()),
        Some(&b"gzip"[..])
    );
    assert!(resp.headers().get("vary").is_some());
    let body = resp.into_body().collect().await.expect("body").to_bytes();
    assert!(body.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn html_rewrite_then_compress_streams_piece_by_piece() {
    let (proxy, _origin) = proxy_with(
        None,
        "transforms = [\"html-rewrite\", \"compress\"]\n\
         [route.html_rewrite]\ninject_body_end = \"<script>/*weir*/</script>\"\n\
         [route.compress]\ncodings = [\"gzip\"]\n",
    )
    .await;
    // 20 chunks, 50 ms apart: the origin needs ~950 ms to write them all.
    let url = proxy.url("/page?chunks=20&delay_ms=50");
    let start = Instant::now();
    let resp = client(false)
        .request(
            Request::get(&url)
                .header("accept-encoding", "gzip")
                .body(Full::new(Bytes::new()))
                .expect("request"),
        )
        .await
        .expect("response");
    assert_eq!(
        resp.headers().get("content-encoding").map(|v| v.as_bytes()),
        Some(&b"gzip"[..])
    );
    let mut body = resp.into_body();
    let mut decoder = flate2::write::GzDecoder::new(Vec::new());
    let mut first_at = None;
    let mut growing_reads = 0;
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame.expect("frame").into_data() else {
            continue;
        };
        first_at.get_or_insert_with(|| start.elapsed());
        let before = decoder.get_ref().len();
        decoder.write_all(&data).expect("decode");
        decoder.flush().expect("flush");
        // Each read must decode on its own: a sync flush, not a held block.
        if decoder.get_ref().len() > before {
            growing_reads += 1;
        }
    }
    let page = String::from_utf8(decoder.finish().expect("gzip end")).expect("utf-8");
    let first_at = first_at.expect("no data");
    assert!(
        growing_reads >= 10,
        "only {growing_reads} decodable reads: the page was held"
    );
    assert!(
        first_at < Duration::from_millis(100),
        "first read after {first_at:?}"
    );
    assert_eq!(
        page.matches("<script>/*weir*/</script>").count(),
        1,
        "{page}"
    );
    assert!(page.contains("<script>/*weir*/</script></body>"), "{page}");
    assert!(page.contains("chunk 19 of 20"), "{page}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_sent_events_are_flushed_one_by_one_through_coalesce_and_compress() {
    let (proxy, _origin) = proxy_with(None, "transforms = [\"coalesce\", \"compress\"]\n").await;
    let resp = client(false)
        .request(
            Request::get(proxy.url("/sse?count=5&interval_ms=300"))
                .header("accept-encoding", "gzip")
                .body(Full::new(Bytes::new()))
                .expect("request"),
        )
        .await
        .expect("response");
    assert_eq!(
        resp.headers().get("content-encoding").map(|v| v.as_bytes()),
        Some(&b"gzip"[..])
    );
    let mut body = resp.into_body();
    let mut decoder = flate2::write::GzDecoder::new(Vec::new());
    let mut seen = Vec::new();
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame.expect("frame").into_data() else {
            continue;
        };
        decoder.write_all(&data).expect("decode");
        decoder.flush().expect("flush");
        let text = String::from_utf8_lossy(decoder.get_ref()).into_owned();
        seen.push(text.matches("data: event").count());
    }
    // Each event was readable before the next one was sent (300 ms later):
    // the decoded count went 1, 2, 3, 4, 5, never skipping one.
    let mut distinct = seen.clone();
    distinct.dedup();
    assert!(
        distinct.ends_with(&[1, 2, 3, 4, 5]),
        "events were held and arrived together: {seen:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_route_without_transforms_forwards_the_body_untouched() {
    let (proxy, _origin) = proxy_with(None, "").await;
    let (_, headers, body) = get_with(
        &proxy.url("/index.html"),
        &[("accept-encoding", "gzip, br")],
        false,
    )
    .await;
    assert!(headers.get("content-encoding").is_none());
    assert!(headers.get("content-length").is_some());
    assert_eq!(
        body,
        std::fs::read(fixtures().join("index.html")).expect("fixture")
    );
}

#[test]
fn a_failing_stage_aborts_the_transfer_and_the_log_names_it() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    // The value 1, then an array header that promises two items and
    // delivers one: the stage emits "1\n", then fails at the end.
    let upstream = rt.block_on(RawUpstream::start(
        b"HTTP/1.1 200 OK\r\ncontent-type: application/msgpack\r\ncontent-length: 3\r\n\r\n\x01\x92\x01",
    ));
    let config = format!(
        "[[listener]]\naddress = \"127.0.0.1:{{port}}\"\n\n[[upstream]]\nname = \"raw\"\nurl = \"http://{}\"\n\n\
         [[route]]\nupstream = \"raw\"\ntransforms = [\"msgpack-json\"]\n",
        upstream.addr
    );
    let weir = WeirProcess::start(&config);
    let out = curl(&["--http1.1", &weir.url("/values")]);
    // Never a clean end: curl 18 (closed without the final chunk) or, when
    // the failure comes in the same write round as the head (hyper then
    // drops its unflushed buffer and closes), 52 (empty reply).
    assert!(
        matches!(out.status.code(), Some(18 | 52)),
        "curl exit {:?}: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    std::thread::sleep(Duration::from_millis(300));
    let log = weir.log_text();
    let line = log
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["target"] == "weir::access")
        .unwrap_or_else(|| panic!("no access line in {log}"));
    assert_eq!(line["outcome"], "transform_error", "{line}");
    assert!(
        line["reason"]
            .as_str()
            .is_some_and(|r| r.contains("msgpack-json")),
        "{line}"
    );
    drop(upstream);
}
