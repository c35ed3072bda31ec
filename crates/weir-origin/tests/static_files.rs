//! Static files from the fixtures root, and the fixtures themselves.

mod common;

use http::Request;
use http_body_util::Full;
use weir_origin::pattern;

use common::{
    both_clients, fixtures_dir, get, h1_client, header, raw_exchange, raw_status, read_body,
    read_text, send, sha256_hex, url,
};

#[tokio::test]
async fn root_serves_index_html() {
    let origin = common::start().await;
    for (proto, client) in both_clients() {
        let response = get(&client, &url(&origin, "/")).await;
        assert_eq!(response.status(), 200, "{proto}");
        assert_eq!(
            header(response.headers(), "content-type"),
            Some("text/html")
        );
        let html = read_text(response).await;
        assert!(html.contains("<title>Weir"), "{proto}");
        assert!(html.contains("/style.css") && html.contains("/logo.png"));
    }
    origin.shutdown().await;
}

#[tokio::test]
async fn files_have_content_types_and_exact_bytes() {
    let origin = common::start().await;
    let client = h1_client();
    for (path, content_type) in [
        ("/index.html", "text/html"),
        ("/style.css", "text/css"),
        ("/logo.png", "image/png"),
        ("/data.json", "application/json"),
        ("/blob-64k.bin", "application/octet-stream"),
    ] {
        let response = get(&client, &url(&origin, path)).await;
        assert_eq!(response.status(), 200, "{path}");
        assert_eq!(
            header(response.headers(), "content-type"),
            Some(content_type),
            "{path}"
        );
        let on_disk = std::fs::read(fixtures_dir().join(&path[1..])).expect("fixture file");
        assert_eq!(
            header(response.headers(), "content-length"),
            Some(on_disk.len().to_string().as_str())
        );
        assert_eq!(read_body(response).await.data, on_disk, "{path}");
    }
    origin.shutdown().await;
}

#[tokio::test]
async fn blob_is_served_with_hash_from_sha256sums() {
    let origin = common::start().await;
    let sums = std::fs::read_to_string(fixtures_dir().join("SHA256SUMS")).expect("SHA256SUMS");
    for (proto, client) in both_clients() {
        for line in sums.lines() {
            let (hash, name) = line.split_once("  ").expect("sha256sum line");
            let body = read_body(get(&client, &url(&origin, &format!("/{name}"))).await).await;
            assert_eq!(sha256_hex(&body.data), hash, "{proto} {name}");
        }
    }
    origin.shutdown().await;
}

#[tokio::test]
async fn range_request_gets_partial_content() {
    let origin = common::start().await;
    let request = Request::get(url(&origin, "/blob-1m.bin"))
        .header("range", "bytes=1000-1099")
        .body(Full::default())
        .expect("request");
    let response = send(&h1_client(), request).await;
    assert_eq!(response.status(), 206);
    assert_eq!(
        header(response.headers(), "content-range"),
        Some("bytes 1000-1099/1048576")
    );
    assert_eq!(read_body(response).await.data, pattern::bytes(1000, 100));
    origin.shutdown().await;
}

#[tokio::test]
async fn unsatisfiable_range_is_416() {
    let origin = common::start().await;
    let request = Request::get(url(&origin, "/blob-64k.bin"))
        .header("range", "bytes=70000-70010")
        .body(Full::default())
        .expect("request");
    let response = send(&h1_client(), request).await;
    assert_eq!(response.status(), 416);
    origin.shutdown().await;
}

#[tokio::test]
async fn conditional_request_gets_304() {
    let origin = common::start().await;
    let client = h1_client();
    let first = get(&client, &url(&origin, "/style.css")).await;
    let last_modified = header(first.headers(), "last-modified")
        .expect("last-modified")
        .to_owned();
    drop(read_body(first).await);
    let request = Request::get(url(&origin, "/style.css"))
        .header("if-modified-since", last_modified)
        .body(Full::default())
        .expect("request");
    let response = send(&client, request).await;
    assert_eq!(response.status(), 304);
    assert!(read_body(response).await.data.is_empty());
    origin.shutdown().await;
}

#[tokio::test]
async fn unknown_path_is_404() {
    let origin = common::start().await;
    for (proto, client) in both_clients() {
        for path in [
            "/no-such-file.txt",
            "/bytes",
            "/bytes/1/2",
            "/echo/extra",
            "/nested/dir/",
        ] {
            let response = get(&client, &url(&origin, path)).await;
            assert_eq!(response.status(), 404, "{proto} {path}");
        }
    }
    origin.shutdown().await;
}

#[tokio::test]
async fn post_to_a_file_is_405() {
    let origin = common::start().await;
    let request = Request::post(url(&origin, "/index.html"))
        .body(Full::default())
        .expect("request");
    assert_eq!(send(&h1_client(), request).await.status(), 405);
    origin.shutdown().await;
}

/// Requests written raw (clients would normalise the dots away) that try
/// to leave the root; `fixtures/../Cargo.toml` is the workspace manifest.
#[tokio::test]
async fn path_traversal_never_leaves_the_root() {
    let origin = common::start().await;
    let attempts = [
        "/../Cargo.toml",
        "/%2e%2e/Cargo.toml",
        "/%2E%2E/Cargo.toml",
        "/..%2fCargo.toml",
        "/%2e%2e%2fCargo.toml",
        "/data.json/../../Cargo.toml",
        "/.%2e/Cargo.toml",
        "//etc/passwd",
        "/%2fetc%2fpasswd",
        "/../../../../../../etc/passwd",
    ];
    for path in attempts {
        let request = format!("GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
        let reply = raw_exchange(origin.local_addr(), request.as_bytes()).await;
        let status = raw_status(&reply);
        assert!(status == 404 || status == 400, "{path}: status {status}");
        let text = String::from_utf8_lossy(&reply);
        assert!(!text.contains("[workspace]"), "{path} leaked Cargo.toml");
        assert!(!text.contains("root:"), "{path} leaked /etc/passwd");
    }
    origin.shutdown().await;
}

/// The fixture blobs are the first bytes of the pattern, and SHA256SUMS
/// lists exactly their hashes.
#[test]
fn fixture_blobs_are_pattern_prefixes_listed_in_sha256sums() {
    let sums = std::fs::read_to_string(fixtures_dir().join("SHA256SUMS")).expect("SHA256SUMS");
    let expected = [("blob-64k.bin", 65_536_usize), ("blob-1m.bin", 1_048_576)];
    assert_eq!(sums.lines().count(), expected.len());
    for (name, len) in expected {
        let on_disk = std::fs::read(fixtures_dir().join(name)).expect("blob");
        assert_eq!(on_disk.len(), len, "{name}");
        assert_eq!(on_disk, pattern::bytes(0, len), "{name}");
        let line = format!("{}  {name}", pattern::sha256_hex(len as u64));
        assert!(sums.lines().any(|l| l == line), "SHA256SUMS lacks {line:?}");
    }
}

#[test]
fn fixture_data_json_is_valid_and_matches_blobs() {
    let text = std::fs::read_to_string(fixtures_dir().join("data.json")).expect("data.json");
    let json: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");
    for blob in json["blobs"].as_array().expect("blobs") {
        let len = blob["bytes"].as_u64().expect("bytes");
        assert_eq!(blob["sha256"], pattern::sha256_hex(len));
    }
}

#[test]
fn fixture_logo_is_a_small_png() {
    let png = std::fs::read(fixtures_dir().join("logo.png")).expect("logo.png");
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"));
    assert!(png.len() < 20 * 1024, "{} bytes", png.len());
}

/// A small file is kept in memory after its first request, with the same
/// head `ServeDir` gave it; an edit is served within the one-second recheck.
#[tokio::test]
async fn a_kept_small_file_is_the_same_answer_and_an_edit_shows_within_a_second() {
    let root = std::env::temp_dir().join(format!("weir-origin-kept-{}", std::process::id()));
    std::fs::create_dir_all(&root).expect("root");
    let file = root.join("note.txt");
    std::fs::write(&file, b"first version\n").expect("write");
    let origin = weir_origin::spawn(
        "127.0.0.1:0".parse().expect("addr"),
        weir_origin::OriginConfig::new(root.clone()),
    )
    .await
    .expect("origin");
    let client = h1_client();
    let first = get(&client, &url(&origin, "/note.txt")).await;
    let first_head = first.headers().clone();
    assert_eq!(read_body(first).await.data, &b"first version\n"[..]);
    let second = get(&client, &url(&origin, "/note.txt")).await;
    for name in [
        "content-type",
        "content-length",
        "last-modified",
        "etag",
        "accept-ranges",
    ] {
        assert_eq!(
            header(second.headers(), name),
            header(&first_head, name),
            "{name} of the kept answer"
        );
    }
    assert_eq!(read_body(second).await.data, &b"first version\n"[..]);
    // A HEAD from memory has the head and no body.
    let head = send(
        &client,
        Request::head(url(&origin, "/note.txt"))
            .body(Full::default())
            .expect("request"),
    )
    .await;
    assert_eq!(header(head.headers(), "content-length"), Some("14"));
    assert!(read_body(head).await.data.is_empty());

    std::fs::write(&file, b"second, longer version\n").expect("edit");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
    loop {
        let response = get(&client, &url(&origin, "/note.txt")).await;
        let body = read_body(response).await.data;
        if body == b"second, longer version\n"[..] {
            break;
        }
        assert_eq!(body, &b"first version\n"[..]);
        assert!(
            std::time::Instant::now() < deadline,
            "the edit never showed"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    origin.shutdown().await;
    std::fs::remove_dir_all(&root).ok();
}
