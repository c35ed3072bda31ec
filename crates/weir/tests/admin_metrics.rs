//! The admin listener: `/metrics` counts what the proxy did (requests by
//! route and status, bytes, client aborts, upstream connections),
//! `/healthz` answers, other paths and methods are refused, and `weir serve`
//! names the admin address it could not bind.

mod common;

use std::net::SocketAddr;
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use tokio::sync::oneshot;

/// A proxy started in this process, with its admin address.
struct Admin {
    addr: SocketAddr,
    admin: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl Admin {
    async fn start(text: &str) -> Admin {
        let config = weir_proxy::Config::parse(text, "test.toml", &repo_root()).expect("valid");
        let server = weir_proxy::Server::bind(&config).await.expect("bind");
        let addr = server.local_addrs()[0];
        let admin = server.admin_addr().expect("admin enabled");
        assert_ne!(admin.port(), 9901, "tests must not use the default port");
        let (tx, rx) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let _ = server
                .run(async {
                    let _ = rx.await;
                })
                .await;
        });
        Admin {
            addr,
            admin,
            stop: Some(tx),
            task,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    fn admin_url(&self, path: &str) -> String {
        format!("http://{}{path}", self.admin)
    }
}

impl Drop for Admin {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// curl on a blocking thread (the proxy runs on this runtime).
async fn curl_async(args: &[&str]) -> std::process::Output {
    let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        curl(&args)
    })
    .await
    .expect("curl thread")
}

/// The HTTP status curl saw for `args`.
async fn status_of(args: &[&str]) -> String {
    let mut all = vec!["-o", "/dev/null", "-w", "%{http_code}"];
    all.extend_from_slice(args);
    String::from_utf8_lossy(&curl_async(&all).await.stdout).into_owned()
}

async fn scrape(admin: &Admin) -> String {
    let out = curl_async(&["-f", &admin.admin_url("/metrics")]).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8 metrics")
}

/// The value of the sample written exactly as `series` (name and labels).
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
}

/// Scrapes until `series` reaches `want` (the request counters move when a
/// response body ends, a moment after the client has it), at most 10 s.
async fn scrape_until(admin: &Admin, series: &str, want: f64) -> String {
    let start = Instant::now();
    loop {
        let text = scrape(admin).await;
        if sample(&text, series).is_some_and(|v| v >= want) || start.elapsed().as_secs() >= 10 {
            return text;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn two_routes(origin: SocketAddr) -> String {
    config_text(
        &format!("http://{origin}"),
        "",
        "",
        "[[route]]\npath_prefix = \"/bytes\"\nupstream = \"app\"\n",
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_are_counted_by_route_status_and_outcome_with_bytes() {
    let origin = start_origin().await;
    let proxy = Admin::start(&two_routes(origin.addr)).await;
    for _ in 0..3 {
        assert_eq!(status_of(&[&proxy.url("/bytes/1000")]).await, "200");
    }
    for _ in 0..2 {
        assert_eq!(status_of(&[&proxy.url("/status/404")]).await, "404");
    }
    assert_eq!(
        status_of(&["--data-binary", "hello", &proxy.url("/echo")]).await,
        "200"
    );

    let text = scrape_until(
        &proxy,
        "weir_requests_total{route=\"/\",status=\"200\",outcome=\"ok\"}",
        1.0,
    )
    .await;
    let expect = [
        (
            "weir_requests_total{route=\"/bytes\",status=\"200\",outcome=\"ok\"}",
            3.0,
        ),
        (
            "weir_requests_total{route=\"/\",status=\"404\",outcome=\"ok\"}",
            2.0,
        ),
        (
            "weir_requests_total{route=\"/\",status=\"200\",outcome=\"ok\"}",
            1.0,
        ),
        ("weir_bytes_out_total{route=\"/bytes\"}", 3000.0),
        ("weir_bytes_in_total{route=\"/bytes\"}", 0.0),
        ("weir_bytes_in_total{route=\"/\"}", 5.0),
        ("weir_request_duration_seconds_count{route=\"/bytes\"}", 3.0),
        (
            "weir_request_duration_seconds_bucket{le=\"+Inf\",route=\"/bytes\"}",
            3.0,
        ),
    ];
    for (series, want) in expect {
        assert_eq!(sample(&text, series), Some(want), "{series}\n{text}");
    }
    // "/status/404" is served by the origin: 404 body bytes went out on "/".
    assert!(
        sample(&text, "weir_bytes_out_total{route=\"/\"}").is_some_and(|v| v > 0.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, "weir_client_aborts_total{route=\"/bytes\"}"),
        None,
        "{text}"
    );

    // The pool keeps the upstream connection: live >= 1, and idle once
    // nothing is in flight.
    let upstream = origin.addr.to_string();
    let live = sample(
        &text,
        &format!("weir_upstream_connections{{upstream=\"{upstream}\",state=\"live\"}}"),
    );
    assert!(live.is_some_and(|v| v >= 1.0), "{text}");
    let idle = sample(
        &text,
        &format!("weir_upstream_connections{{upstream=\"{upstream}\",state=\"idle\"}}"),
    );
    assert_eq!(idle, live, "{text}");
    assert_eq!(
        sample(
            &text,
            &format!("weir_upstream_requests_in_flight{{upstream=\"{upstream}\"}}")
        ),
        Some(0.0),
        "{text}"
    );
    assert!(
        sample(&text, "weir_upstream_connections_opened_total").is_some_and(|v| v >= 1.0),
        "{text}"
    );
    // Families of later features are there, at zero.
    assert_eq!(
        sample(&text, "weir_cache_requests_total{result=\"hit\"}"),
        Some(0.0)
    );
    assert_eq!(
        sample(&text, "weir_mirror_requests_total{outcome=\"ok\"}"),
        Some(0.0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unrouted_requests_are_counted_under_no_route() {
    let origin = start_origin().await;
    let text = config_text(&format!("http://{}", origin.addr), "", "", "")
        .replace("path_prefix = \"/\"", "path_prefix = \"/only\"");
    let proxy = Admin::start(&text).await;
    assert_eq!(status_of(&[&proxy.url("/elsewhere")]).await, "404");
    let series = "weir_requests_total{route=\"-\",status=\"404\",outcome=\"no_route\"}";
    let text = scrape_until(&proxy, series, 1.0).await;
    assert_eq!(sample(&text, series), Some(1.0), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_aborts_are_counted_mid_body_and_before_the_head() {
    let origin = start_origin().await;
    let proxy = Admin::start(&two_routes(origin.addr)).await;
    // Mid-body: ~4 s of streaming, cut after 0.5 s.
    let out = curl_async(&[
        "--max-time",
        "0.5",
        "-o",
        "/dev/null",
        &proxy.url("/stream/81920?chunk=1024&delay_ms=50"),
    ])
    .await;
    assert!(!out.status.success(), "the download was not cut");
    // Before the response head: the upstream waits 3 s to answer.
    let out = curl_async(&[
        "--max-time",
        "0.5",
        "-o",
        "/dev/null",
        &proxy.url("/delay/3000"),
    ])
    .await;
    assert!(!out.status.success(), "the request was not cut");

    let series = "weir_client_aborts_total{route=\"/\"}";
    let text = scrape_until(&proxy, series, 2.0).await;
    assert_eq!(sample(&text, series), Some(2.0), "{text}");
    assert_eq!(
        sample(
            &text,
            "weir_requests_total{route=\"/\",status=\"200\",outcome=\"client_aborted\"}"
        ),
        Some(1.0),
        "{text}"
    );
    // The one cut before any response head was sent has status 0.
    assert_eq!(
        sample(
            &text,
            "weir_requests_total{route=\"/\",status=\"0\",outcome=\"client_aborted\"}"
        ),
        Some(1.0),
        "{text}"
    );
    let upstream = origin.addr.to_string();
    let in_flight = format!("weir_upstream_requests_in_flight{{upstream=\"{upstream}\"}}");
    assert_eq!(sample(&text, &in_flight), Some(0.0), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_and_refused_paths_and_methods() {
    let origin = start_origin().await;
    let proxy = Admin::start(&two_routes(origin.addr)).await;
    let out = curl_async(&["-i", &proxy.admin_url("/healthz")]).await;
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(text.ends_with("\r\n\r\nok\n"), "{text}");

    let out = curl_async(&["-i", &proxy.admin_url("/metrics")]).await;
    let text = String::from_utf8_lossy(&out.stdout).to_ascii_lowercase();
    assert!(text.starts_with("http/1.1 200"), "{text}");
    assert!(
        text.contains("content-type: application/openmetrics-text; version=1.0.0"),
        "{text}"
    );
    assert!(text.ends_with("# eof\n"), "{text}");

    assert_eq!(status_of(&[&proxy.admin_url("/")]).await, "404");
    assert_eq!(status_of(&[&proxy.admin_url("/metrics/x")]).await, "404");
    assert_eq!(
        status_of(&["-X", "POST", &proxy.admin_url("/metrics")]).await,
        "405"
    );
    assert_eq!(
        status_of(&["-X", "PUT", &proxy.admin_url("/healthz")]).await,
        "405"
    );
    // The proxy's own listener does not serve the admin paths.
    assert_eq!(status_of(&[&proxy.url("/healthz")]).await, "404");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_fails_while_draining_liveness_holds_and_admin_stops_after() {
    let origin = start_origin().await;
    let mut proxy = Admin::start(&two_routes(origin.addr)).await;
    // ~2 s of streaming, still running when shutdown begins.
    let url = proxy.url("/stream/40960?chunk=1024&delay_ms=50");
    let download = tokio::spawn(async move { curl_async(&["-o", "/dev/null", &url]).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let _ = proxy.stop.take().expect("stop").send(());
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(status_of(&[&proxy.admin_url("/healthz")]).await, "503");
    // Readiness (a Kubernetes readiness probe) fails at once; liveness
    // holds, so the draining process is not restarted.
    assert_eq!(status_of(&[&proxy.admin_url("/readyz")]).await, "503");
    assert_eq!(status_of(&[&proxy.admin_url("/livez")]).await, "200");
    assert_eq!(status_of(&[&proxy.admin_url("/metrics")]).await, "200");
    let out = download.await.expect("download");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let task = std::mem::replace(&mut proxy.task, tokio::spawn(async {}));
    task.await.expect("server task");
    assert!(
        std::net::TcpStream::connect_timeout(&proxy.admin, Duration::from_millis(500)).is_err(),
        "the admin listener still accepts after shutdown"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_can_be_disabled() {
    let origin = start_origin().await;
    let text = config_text(
        &format!("http://{}", origin.addr),
        "",
        "",
        "[admin]\nenabled = false\n",
    );
    let config = weir_proxy::Config::parse(&text, "test.toml", &repo_root()).expect("valid");
    let server = weir_proxy::Server::bind(&config).await.expect("bind");
    assert_eq!(server.admin_addr(), None);
}

#[test]
fn serve_fails_naming_the_admin_address_it_cannot_bind() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = taken.local_addr().expect("addr");
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("weir.toml");
    std::fs::write(
        &path,
        format!(
            "[[listener]]\naddress = \"127.0.0.1:0\"\n[admin]\naddress = \"{addr}\"\n\
             [[upstream]]\nname = \"a\"\nurl = \"http://127.0.0.1:1\"\n[[route]]\nupstream = \"a\"\n"
        ),
    )
    .expect("write");
    let out = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["serve", "--config"])
        .arg(&path)
        .output()
        .expect("run weir serve");
    assert!(!out.status.success(), "weir serve started anyway");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!(
            "cannot serve the admin endpoint ([admin] address) on {addr}"
        )),
        "{err}"
    );
}

#[test]
fn the_binary_serves_metrics_on_the_configured_admin_address() {
    let admin_port = free_port();
    let config = format!(
        "[[listener]]\naddress = \"127.0.0.1:{{port}}\"\n[admin]\naddress = \"127.0.0.1:{admin_port}\"\n\
         [[upstream]]\nname = \"site\"\norigin = \"embedded\"\nroot = \"{}\"\n[[route]]\nupstream = \"site\"\n",
        fixtures().display()
    );
    let weir = WeirProcess::start(&config);
    let admin: SocketAddr = format!("127.0.0.1:{admin_port}").parse().expect("addr");
    wait_for_port(admin, Duration::from_secs(10));
    assert!(
        curl(&["-f", "-o", "/dev/null", &weir.url("/bytes/10")])
            .status
            .success()
    );
    let start = Instant::now();
    let series = "weir_requests_total{route=\"/\",status=\"200\",outcome=\"ok\"}";
    let text = loop {
        let out = curl(&["-f", &format!("http://{admin}/metrics")]);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        if sample(&text, series).is_some() || start.elapsed().as_secs() >= 10 {
            break text;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(sample(&text, series), Some(1.0), "{text}");
    assert!(
        weir.log_text().contains(&format!("http://{admin}/metrics")),
        "the log does not say where the admin endpoint is:\n{}",
        weir.log_text()
    );
}

#[test]
fn check_shows_the_default_admin_address() {
    let out = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["check", "--config"])
        .arg(repo_root().join("config/weir.toml"))
        .output()
        .expect("run weir check");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("admin     http://127.0.0.1:9901/"), "{text}");
}
