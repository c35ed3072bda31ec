//! `/fragment/{name}`: HTML fragments for SSR composition, with delays,
//! chunking, gzip, failures, includes and extra headers on request.

mod common;

use std::io::Write;
use std::time::{Duration, Instant};

use bytes::Bytes;
use flate2::write::GzDecoder;
use http::{HeaderMap, Request};
use http_body_util::{BodyExt, Full};

use common::{
    assert_bad_requests, assert_bodiless, both_clients, bounded, curl, fixtures_dir, get,
    h1_client, h2_client, header, read_body, read_text, send, url,
};

/// The filler line, as the endpoint documents it.
const UNIT: &str = "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do\n";

/// `len` bytes of filler.
fn filler(len: usize) -> String {
    UNIT.chars().cycle().take(len).collect()
}

/// The markup of a fragment that has no file.
fn div(name: &str) -> String {
    format!("<div class=\"fragment\" data-fragment=\"{name}\">{name}</div>")
}

/// `whole` cut into `chunks` parts as the endpoint documents it.
fn parts(whole: &[u8], chunks: usize) -> Vec<&[u8]> {
    let at = |k: usize| k * whole.len() / chunks;
    (0..chunks).map(|k| &whole[at(k)..at(k + 1)]).collect()
}

/// Every data frame of `response`, with its arrival time since `started`.
async fn timed_frames(
    response: http::Response<hyper::body::Incoming>,
    started: Instant,
) -> Vec<(Duration, Bytes)> {
    let mut body = response.into_body();
    let mut frames = Vec::new();
    while let Some(frame) = bounded(body.frame()).await {
        if let Ok(data) = frame.expect("frame").into_data() {
            frames.push((started.elapsed(), data));
        }
    }
    frames
}

/// Reads `response` until its body fails, returning the data seen before;
/// fails the test if the body ends cleanly.
async fn read_until_failure(
    response: http::Response<hyper::body::Incoming>,
    what: &str,
) -> Vec<u8> {
    let mut body = response.into_body();
    let mut received = Vec::new();
    loop {
        match bounded(body.frame()).await {
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    received.extend_from_slice(&data);
                }
            }
            Some(Err(_)) => return received,
            None => panic!("{what}: body ended cleanly after {} bytes", received.len()),
        }
    }
}

/// The head fields that must agree between a `GET` and a `HEAD`: all but
/// `Date` and HTTP/1.1's `Transfer-Encoding` (hyper sends no chunked
/// coding for a body it does not send; RFC 9112 §6.1 allows that).
fn comparable(headers: &HeaderMap) -> Vec<(String, String)> {
    let mut fields: Vec<(String, String)> = headers
        .iter()
        .filter(|(name, _)| *name != "date" && *name != "transfer-encoding")
        .map(|(n, v)| (n.to_string(), v.to_str().unwrap_or("?").to_owned()))
        .collect();
    fields.sort();
    fields
}

#[tokio::test]
async fn fragment_without_a_file_is_a_generated_div_with_html_headers() {
    let origin = common::start().await;
    for (proto, client) in both_clients() {
        let response = get(&client, &url(&origin, "/fragment/no-such_Fragment-9")).await;
        assert_eq!(response.status(), 200, "{proto}");
        let headers = response.headers().clone();
        let expected = div("no-such_Fragment-9");
        assert_eq!(
            header(&headers, "content-type"),
            Some("text/html; charset=utf-8")
        );
        assert_eq!(header(&headers, "cache-control"), Some("no-store"));
        assert_eq!(
            header(&headers, "content-length"),
            Some(expected.len().to_string().as_str()),
            "{proto}"
        );
        assert!(headers.get("x-weir-template").is_none());
        assert!(headers.get("content-encoding").is_none());
        assert_eq!(read_text(response).await, expected, "{proto}");
    }
    origin.shutdown().await;
}

#[tokio::test]
async fn fragment_with_a_file_serves_the_file_bytes() {
    let origin = common::start().await;
    for name in ["header", "products", "reviews-cached", "footer-static"] {
        let on_disk = std::fs::read(fixtures_dir().join(format!("fragments/{name}.html")))
            .expect("fragment fixture");
        let response = get(&h2_client(), &url(&origin, &format!("/fragment/{name}"))).await;
        assert_eq!(response.status(), 200, "{name}");
        assert_eq!(
            header(response.headers(), "content-length"),
            Some(on_disk.len().to_string().as_str())
        );
        assert_eq!(read_body(response).await.data, on_disk, "{name}");
    }
    origin.shutdown().await;
}

#[tokio::test]
async fn includes_and_filler_follow_the_markup_in_order() {
    let origin = common::start().await;
    let path = "/fragment/box?include=/fragment/a%3Fx%3D1%26y%3D%22q%22&include=/fragment/%3Cb%3E&bytes=1000";
    let text = read_text(get(&h1_client(), &url(&origin, path)).await).await;
    let expected = format!(
        "{}<fragment src=\"/fragment/a?x=1&amp;y=&quot;q&quot;\"></fragment>\
         <fragment src=\"/fragment/&lt;b&gt;\"></fragment>{}",
        div("box"),
        filler(1000)
    );
    assert_eq!(text, expected);
    origin.shutdown().await;
}

#[tokio::test]
async fn template_flag_and_nested_includes_make_a_loop_template() {
    let origin = common::start().await;
    let path = "/fragment/loop?template=1&include=/fragment/loop%3Ftemplate%3D1%26include%3D%2Ffragment%2Floop";
    let response = get(&h2_client(), &url(&origin, path)).await;
    assert_eq!(response.status(), 200);
    assert_eq!(header(response.headers(), "x-weir-template"), Some("1"));
    let text = read_text(response).await;
    assert_eq!(
        text,
        format!(
            "{}<fragment src=\"/fragment/loop?template=1&amp;include=/fragment/loop\"></fragment>",
            div("loop")
        )
    );
    let plain = get(&h2_client(), &url(&origin, "/fragment/loop?template=0")).await;
    assert!(plain.headers().get("x-weir-template").is_none());
    origin.shutdown().await;
}

#[tokio::test]
async fn delay_ms_holds_back_the_response_head() {
    let origin = common::start().await;
    for (proto, client) in both_clients() {
        let started = Instant::now();
        let response = get(&client, &url(&origin, "/fragment/slow?delay_ms=300")).await;
        let head_at = started.elapsed();
        assert_eq!(response.status(), 200, "{proto}");
        assert!(
            head_at >= Duration::from_millis(300),
            "{proto}: head after {head_at:?}"
        );
        assert_eq!(read_text(response).await, div("slow"));
    }
    origin.shutdown().await;
}

/// Three parts 400 ms apart: three data frames, the first at once, the
/// last at least 800 ms later; no `Content-Length`. Only bounds that
/// cannot flake are checked.
#[tokio::test]
async fn chunks_are_separate_frames_spaced_by_chunk_delay() {
    let origin = common::start().await;
    let whole = format!("{}{}", div("c"), filler(200));
    for (proto, client) in both_clients() {
        let started = Instant::now();
        let response = get(
            &client,
            &url(&origin, "/fragment/c?bytes=200&chunks=3&chunk_delay_ms=400"),
        )
        .await;
        assert_eq!(response.status(), 200, "{proto}");
        assert!(
            response.headers().get("content-length").is_none(),
            "{proto}"
        );
        if proto == "HTTP/1.1" {
            assert_eq!(
                header(response.headers(), "transfer-encoding"),
                Some("chunked")
            );
        }
        let frames = timed_frames(response, started).await;
        let datas: Vec<&[u8]> = frames.iter().map(|(_, d)| &d[..]).collect();
        assert_eq!(datas, parts(whole.as_bytes(), 3), "{proto}");
        let (first_at, last_at) = (frames[0].0, frames[2].0);
        assert!(
            first_at < Duration::from_millis(350),
            "{proto}: {first_at:?}"
        );
        assert!(
            last_at - first_at >= Duration::from_millis(750),
            "{proto}: {frames:?}"
        );
    }
    origin.shutdown().await;
}

#[tokio::test]
async fn status_parameter_sets_the_status_and_keeps_the_markup() {
    let origin = common::start().await;
    for (proto, client) in both_clients() {
        for code in [201_u16, 404, 500, 503, 599] {
            let response = get(
                &client,
                &url(&origin, &format!("/fragment/s?status={code}")),
            )
            .await;
            assert_eq!(response.status().as_u16(), code, "{proto}");
            assert_eq!(read_text(response).await, div("s"), "{proto} {code}");
        }
    }
    for code in [204_u16, 304] {
        assert_bodiless(
            &origin,
            &format!("/fragment/s?status={code}&bytes=100"),
            code,
        )
        .await;
    }
    origin.shutdown().await;
}

#[tokio::test]
async fn header_parameter_adds_repeats_and_overrides_fields() {
    let origin = common::start().await;
    let path = "/fragment/h?status=302\
        &header=Set-Cookie:a%3D1%3B%20Path%3D%2F&header=Set-Cookie:b%3D2\
        &header=Cache-Control:%20public,%20max-age%3D60\
        &header=Location:/elsewhere?x%3D1\
        &header=Link:%3C%2Fstyle.css%3E%3B%20rel%3Dpreload\
        &header=Vary:Accept-Language&header=content-type:text/plain";
    for (proto, client) in both_clients() {
        let response = get(&client, &url(&origin, path)).await;
        assert_eq!(response.status(), 302, "{proto}");
        let headers = response.headers();
        let cookies: Vec<_> = headers.get_all("set-cookie").iter().collect();
        assert_eq!(cookies, ["a=1; Path=/", "b=2"], "{proto}");
        let cache: Vec<_> = headers.get_all("cache-control").iter().collect();
        assert_eq!(cache, ["public, max-age=60"], "{proto}");
        assert_eq!(header(headers, "location"), Some("/elsewhere?x=1"));
        assert_eq!(header(headers, "link"), Some("</style.css>; rel=preload"));
        assert_eq!(header(headers, "vary"), Some("Accept-Language"));
        assert_eq!(header(headers, "content-type"), Some("text/plain"));
        assert_eq!(read_text(response).await, div("h"), "{proto}");
    }
    origin.shutdown().await;
}

/// Decodes gzip `frames` one by one, checking that after each frame the
/// output is exactly the plain `parts` so far; returns the whole output.
fn decode_incrementally(frames: &[Bytes], parts: &[&[u8]], what: &str) -> Vec<u8> {
    assert_eq!(frames.len(), parts.len(), "{what}: frame count");
    let mut decoder = GzDecoder::new(Vec::new());
    let mut expected = Vec::new();
    for (k, (frame, part)) in frames.iter().zip(parts).enumerate() {
        decoder.write_all(frame).expect("gzip data");
        decoder.flush().expect("gzip flush");
        expected.extend_from_slice(part);
        assert!(
            decoder.get_ref() == &expected,
            "{what}: frame {k} does not decode to its part"
        );
    }
    decoder.finish().expect("a complete gzip member")
}

#[tokio::test]
async fn gzip_frames_each_decode_to_their_part() {
    let origin = common::start().await;
    let whole = format!(
        "{}<fragment src=\"/x\"></fragment>{}",
        div("z"),
        filler(3000)
    );
    let path = "/fragment/z?gzip=1&include=/x&bytes=3000&chunks=4&chunk_delay_ms=60";
    for (proto, client) in both_clients() {
        let response = get(&client, &url(&origin, path)).await;
        assert_eq!(response.status(), 200, "{proto}");
        assert_eq!(header(response.headers(), "content-encoding"), Some("gzip"));
        assert!(
            response.headers().get("content-length").is_none(),
            "{proto}"
        );
        let frames: Vec<Bytes> = timed_frames(response, Instant::now())
            .await
            .into_iter()
            .map(|(_, d)| d)
            .collect();
        let decoded = decode_incrementally(&frames, &parts(whole.as_bytes(), 4), proto);
        assert_eq!(decoded, whole.as_bytes(), "{proto}");
    }
    origin.shutdown().await;
}

#[tokio::test]
async fn gzip_of_a_file_fragment_decodes_to_the_file_for_curl() {
    let origin = common::start().await;
    let on_disk = std::fs::read(fixtures_dir().join("fragments/products.html")).expect("fixture");
    for flag in ["--http1.1", "--http2-prior-knowledge"] {
        let output = curl(&[
            "--fail",
            "--compressed",
            flag,
            &url(&origin, "/fragment/products?gzip=1&chunks=3"),
        ])
        .await;
        assert!(
            output.status.success(),
            "{flag}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        assert_eq!(output.stdout, on_disk, "{flag}");
    }
    origin.shutdown().await;
}

/// 50 MB of filler streams through intact (compared as it arrives, never
/// held whole).
#[tokio::test]
async fn a_fifty_megabyte_fragment_streams_intact() {
    let origin = common::start().await;
    let len = 50_000_000_usize;
    let markup = div("big");
    let total = markup.len() + len;
    // Any run of filler up to 64 KiB, at any phase, is a slice of this.
    let block = UNIT.repeat(2 * 1024);
    for (proto, client) in both_clients() {
        let response = get(
            &client,
            &url(&origin, &format!("/fragment/big?bytes={len}")),
        )
        .await;
        assert_eq!(
            header(response.headers(), "content-length"),
            Some(total.to_string().as_str())
        );
        let mut body = response.into_body();
        let mut offset = 0_usize;
        while let Some(frame) = bounded(body.frame()).await {
            let Ok(data) = frame.expect("frame").into_data() else {
                continue;
            };
            let mut rest = &data[..];
            if offset < markup.len() {
                let n = rest.len().min(markup.len() - offset);
                assert_eq!(
                    &rest[..n],
                    &markup.as_bytes()[offset..offset + n],
                    "{proto}"
                );
                rest = &rest[n..];
                offset += n;
            }
            for piece in rest.chunks(64 * 1024) {
                let phase = (offset - markup.len()) % UNIT.len();
                let expected = &block.as_bytes()[phase..phase + piece.len()];
                assert!(
                    piece == expected,
                    "{proto}: filler differs at byte {offset}"
                );
                offset += piece.len();
            }
        }
        assert_eq!(offset, total, "{proto}");
    }
    origin.shutdown().await;
}

#[tokio::test]
async fn fail_after_sends_that_many_bytes_then_fails_in_hyper_clients() {
    let origin = common::start().await;
    let whole = format!("{}{}", div("f"), filler(100_000));
    for (proto, client) in both_clients() {
        for (path, sent) in [
            ("/fragment/f?bytes=100000&fail_after=1000", 1000),
            ("/fragment/f?bytes=100000&fail_after=0", 0),
            (
                "/fragment/f?bytes=100000&fail_after=70000&chunks=3&chunk_delay_ms=50",
                70_000,
            ),
            ("/fragment/f?bytes=100000&fail_after=2000000", whole.len()),
        ] {
            let response = get(&client, &url(&origin, path)).await;
            assert_eq!(response.status(), 200, "{proto} {path}");
            assert!(response.headers().get("content-length").is_none());
            let received = read_until_failure(response, &format!("{proto} {path}")).await;
            assert_eq!(received, &whole.as_bytes()[..sent], "{proto} {path}");
        }
    }
    origin.shutdown().await;
}

#[tokio::test]
async fn fail_after_with_gzip_counts_encoded_bytes() {
    let origin = common::start().await;
    for (proto, client) in both_clients() {
        let base = "/fragment/g?gzip=1&bytes=20000&chunks=4";
        let full = read_body(get(&client, &url(&origin, base)).await)
            .await
            .data;
        assert!(full.len() > 100, "{proto}: {} gzip bytes", full.len());
        let cut = full.len() / 2;
        let response = get(&client, &url(&origin, &format!("{base}&fail_after={cut}"))).await;
        assert_eq!(header(response.headers(), "content-encoding"), Some("gzip"));
        let received = read_until_failure(response, proto).await;
        assert_eq!(received, &full[..cut], "{proto}");
    }
    origin.shutdown().await;
}

#[tokio::test]
async fn fail_after_is_a_failed_transfer_for_curl_on_both_protocols() {
    let origin = common::start().await;
    let target = url(&origin, "/fragment/f?bytes=50000&fail_after=4096");
    let whole = format!("{}{}", div("f"), filler(50_000));
    for (flag, expected_code) in [("--http1.1", 18), ("--http2-prior-knowledge", 92)] {
        let output = curl(&[flag, &target]).await;
        assert_eq!(
            output.status.code(),
            Some(expected_code),
            "{flag}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        assert_eq!(output.stdout, &whole.as_bytes()[..4096], "{flag}");
    }
    origin.shutdown().await;
}

/// `HEAD` gets the fields a `GET` gets (after the same wait), and no body.
#[tokio::test]
async fn head_gets_the_get_head_without_body() {
    let origin = common::start().await;
    for (proto, client) in both_clients() {
        for path in [
            "/fragment/products?bytes=500",
            "/fragment/x?gzip=1&chunks=5&chunk_delay_ms=2000&template=1",
            "/fragment/x?status=503&header=Set-Cookie:a%3D1&fail_after=3",
        ] {
            let get_response = get(&client, &url(&origin, path)).await;
            let get_head = comparable(get_response.headers());
            let get_status = get_response.status();
            drop(get_response);
            let response = send(&client, head_request(&origin, path)).await;
            assert_eq!(response.status(), get_status, "{proto} {path}");
            assert_eq!(comparable(response.headers()), get_head, "{proto} {path}");
            assert!(read_body(response).await.data.is_empty(), "{proto} {path}");
        }
        let started = Instant::now();
        let response = send(&client, head_request(&origin, "/fragment/x?delay_ms=300")).await;
        assert_eq!(response.status(), 200);
        assert!(started.elapsed() >= Duration::from_millis(300), "{proto}");
    }
    origin.shutdown().await;
}

fn head_request(origin: &weir_origin::OriginHandle, path: &str) -> Request<Full<Bytes>> {
    Request::head(url(origin, path))
        .body(Full::default())
        .expect("request")
}

/// `(path, words the reason must contain)`.
const BAD: &[(&str, &str)] = &[
    ("/fragment/", "fragment name"),
    ("/fragment/a.b", "fragment name"),
    ("/fragment/..%2Fstyle", "fragment name"),
    ("/fragment/a%20b", "fragment name"),
    (
        "/fragment/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
        "fragment name",
    ),
    ("/fragment/a?delay_ms=60001", "out of range"),
    ("/fragment/a?delay_ms=-1", "not a decimal number"),
    ("/fragment/a?status=199", "out of range"),
    ("/fragment/a?status=600", "out of range"),
    ("/fragment/a?status=abc", "not a decimal number"),
    ("/fragment/a?bytes=1073741825", "out of range"),
    ("/fragment/a?bytes=", "not a decimal number"),
    ("/fragment/a?chunks=0", "out of range"),
    ("/fragment/a?chunks=10001", "out of range"),
    ("/fragment/a?chunk_delay_ms=60001", "out of range"),
    ("/fragment/a?fail_after=2147483649", "out of range"),
    ("/fragment/a?fail_after=x", "not a decimal number"),
    ("/fragment/a?gzip=2", "out of range"),
    ("/fragment/a?gzip=yes", "not a decimal number"),
    ("/fragment/a?template=2", "out of range"),
    ("/fragment/a?status=200&status=201", "more than once"),
    ("/fragment/a?chunk=2", "unknown query parameter"),
    ("/fragment/a?include=%FF", "not UTF-8"),
    ("/fragment/a?header=no-colon", "not a valid header field"),
    (
        "/fragment/a?header=bad%20name:1",
        "not a valid header field",
    ),
    (
        "/fragment/a?header=X-A:1%0D%0AX-B:2",
        "not a valid header field",
    ),
    ("/fragment/a?header=:v", "not a valid header field"),
    ("/fragment/a?header=Content-Length:5", "cannot be given"),
    (
        "/fragment/a?header=transfer-encoding:chunked",
        "cannot be given",
    ),
];

#[tokio::test]
async fn bad_input_is_400_with_a_one_line_reason() {
    let origin = common::start().await;
    for (proto, client) in both_clients() {
        assert_bad_requests(&client, &origin, proto, BAD).await;
    }
    origin.shutdown().await;
}

#[tokio::test]
async fn too_many_repeats_and_bad_input_are_refused_without_waiting() {
    let origin = common::start().await;
    let client = h1_client();
    let includes = "include=/a&".repeat(101);
    let response = get(&client, &url(&origin, &format!("/fragment/a?{includes}"))).await;
    assert_eq!(response.status(), 400);
    assert!(read_text(response).await.contains("more than 100 times"));
    let headers = "header=X-A:1&".repeat(101);
    let response = get(&client, &url(&origin, &format!("/fragment/a?{headers}"))).await;
    assert_eq!(response.status(), 400);
    let started = Instant::now();
    let response = get(
        &client,
        &url(&origin, "/fragment/a?delay_ms=60000&chunks=0"),
    )
    .await;
    assert_eq!(response.status(), 400);
    assert!(started.elapsed() < Duration::from_secs(2));
    origin.shutdown().await;
}

#[tokio::test]
async fn other_methods_get_405() {
    let origin = common::start().await;
    for method in ["POST", "PUT", "DELETE"] {
        let request = Request::builder()
            .method(method)
            .uri(url(&origin, "/fragment/a"))
            .body(Full::default())
            .expect("request");
        let response = send(&h1_client(), request).await;
        assert_eq!(response.status(), 405, "{method}");
        assert_eq!(header(response.headers(), "allow"), Some("GET, HEAD"));
    }
    origin.shutdown().await;
}
