//! The same proxy in front of nginx (Debian's package) serving `fixtures/`.

mod common;

use common::*;

const TEN_MB: usize = 10 * 1024 * 1024;

async fn proxy_to_nginx() -> Option<(Proxy, Nginx)> {
    let nginx = Nginx::start()?;
    let proxy = start_proxy(&config_text(&format!("http://{}", nginx.addr), "", "", "")).await;
    Some((proxy, nginx))
}

fn lines(body: &[u8]) -> std::collections::HashMap<String, String> {
    String::from_utf8_lossy(body)
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nginx_download_10mb_sha256_matches() {
    let Some((proxy, nginx)) = proxy_to_nginx().await else {
        return;
    };
    let data = weir_origin::pattern::bytes(0, TEN_MB);
    std::fs::write(nginx.gen_dir.join("ten.bin"), &data).expect("write");
    let expected = sha256_hex(&data);
    for flag in ["--http1.1", "--http2-prior-knowledge"] {
        let out = curl(&[flag, &proxy.url("/gen/ten.bin")]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(out.stdout.len(), TEN_MB);
        assert_eq!(sha256_hex(&out.stdout), expected, "{flag}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nginx_serves_the_fixture_site_through_the_proxy() {
    let Some((proxy, _nginx)) = proxy_to_nginx().await else {
        return;
    };
    for (path, file) in [
        ("/", "index.html"),
        ("/style.css", "style.css"),
        ("/logo.png", "logo.png"),
        ("/data.json", "data.json"),
    ] {
        let (status, headers, body) = get(&proxy.url(path), false).await;
        assert_eq!(status, 200, "{path}");
        assert_eq!(
            body,
            std::fs::read(fixtures().join(file)).expect("fixture"),
            "{path}"
        );
        assert_eq!(headers["via"], "1.1 weir");
        assert!(
            headers["server"]
                .to_str()
                .is_ok_and(|s| s.starts_with("nginx")),
            "{path}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nginx_sees_no_hop_by_hop_headers_and_forwarded_ones_replaced() {
    let Some((proxy, _nginx)) = proxy_to_nginx().await else {
        return;
    };
    let out = curl(&[
        "--http1.1",
        "-H",
        "Connection: x-secret",
        "-H",
        "X-Secret: hush",
        "-H",
        "Keep-Alive: timeout=5",
        "-H",
        "Proxy-Connection: keep-alive",
        "-H",
        "TE: gzip",
        "-H",
        "X-Forwarded-For: 6.6.6.6",
        "-H",
        "X-Forwarded-Proto: https",
        "-H",
        "Host: shop.example",
        &proxy.url("/headers"),
    ]);
    assert!(out.status.success());
    let seen = lines(&out.stdout);
    assert_eq!(seen["x-secret"], "", "{seen:?}");
    assert_eq!(seen["keep-alive"], "");
    assert_eq!(seen["proxy-connection"], "");
    assert_eq!(seen["te"], "");
    assert_eq!(seen["xff"], "127.0.0.1");
    assert_eq!(seen["xfp"], "http");
    assert_eq!(seen["xfh"], "shop.example");
    assert_eq!(seen["via"], "1.1 weir");
    assert_eq!(seen["host"], "shop.example");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nginx_404_passes_through_and_missing_route_is_weirs_404() {
    let Some((proxy, _nginx)) = proxy_to_nginx().await else {
        return;
    };
    let (status, headers, _) = get(&proxy.url("/no-such-file"), false).await;
    assert_eq!(status, 404);
    assert!(
        headers["server"]
            .to_str()
            .is_ok_and(|s| s.starts_with("nginx"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nginx_range_and_conditional_requests_pass_through() {
    let Some((proxy, _nginx)) = proxy_to_nginx().await else {
        return;
    };
    let out = curl(&["-i", "-r", "0-99", &proxy.url("/blob-64k.bin")]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("HTTP/1.1 206"), "{text}");
    let (_, headers, _) = get(&proxy.url("/blob-64k.bin"), false).await;
    let etag = headers["etag"].to_str().expect("etag").to_owned();
    let out = curl(&[
        "-i",
        "-H",
        &format!("If-None-Match: {etag}"),
        &proxy.url("/blob-64k.bin"),
    ]);
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("HTTP/1.1 304"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nginx_upstream_pool_reuses_connections() {
    let Some((proxy, _nginx)) = proxy_to_nginx().await else {
        return;
    };
    for _ in 0..50 {
        let (status, _, body) = get(&proxy.url("/blob-64k.bin"), false).await;
        assert_eq!(status, 200);
        assert_eq!(body.len(), 65536);
    }
}
