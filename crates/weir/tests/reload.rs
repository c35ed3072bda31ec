//! Hot reload of `weir serve`, end to end on real sockets: SIGHUP and the
//! admin listener's `POST /reload` re-read the config file and swap it in.
//!
//! Pinned: a changed route and a new one served after SIGHUP; bad configs
//! refused with the old one still serving (400, the error in the body and
//! the log, counted); no failed request and no reconnect storm under load;
//! an in-flight request outliving its route; listeners opened and closed;
//! health checks of a removed upstream stopping; certificates read again;
//! embedded origins keeping the settings they started with.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::certs::{ca, leaf};
use common::*;
use http_body_util::{BodyExt as _, Full};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;

/// A test upstream that names itself in every answer and counts what it
/// sees: TCP connections accepted and `/health` checks. `/slow` answers
/// after one second.
struct TestOrigin {
    addr: SocketAddr,
    accepts: Arc<AtomicUsize>,
    health: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for TestOrigin {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl TestOrigin {
    async fn start(name: &'static str) -> TestOrigin {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let accepts = Arc::new(AtomicUsize::new(0));
        let health = Arc::new(AtomicUsize::new(0));
        let (a, h) = (Arc::clone(&accepts), Arc::clone(&health));
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                a.fetch_add(1, Ordering::Relaxed);
                let h = Arc::clone(&h);
                tokio::spawn(async move {
                    let service = service_fn(move |req: http::Request<hyper::body::Incoming>| {
                        let h = Arc::clone(&h);
                        async move {
                            let path = req.uri().path().to_owned();
                            if path == "/health" {
                                h.fetch_add(1, Ordering::Relaxed);
                            }
                            if path.ends_with("/slow") {
                                tokio::time::sleep(Duration::from_secs(1)).await;
                            }
                            let body = format!("{name} {path}");
                            Ok::<_, std::convert::Infallible>(http::Response::new(Full::new(
                                Bytes::from(body),
                            )))
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        TestOrigin {
            addr,
            accepts,
            health,
            task,
        }
    }
}

/// `[[upstream]] name` → `addr`, as TOML.
fn upstream(name: &str, addr: SocketAddr) -> String {
    format!("[[upstream]]\nname = \"{name}\"\nurl = \"http://{addr}\"\n\n")
}

/// A route from `prefix` to `upstream`, as TOML.
fn route(prefix: &str, upstream: &str) -> String {
    format!("[[route]]\npath_prefix = \"{prefix}\"\nupstream = \"{upstream}\"\n\n")
}

const LISTENER: &str = "[[listener]]\naddress = \"127.0.0.1:{port}\"\n\n";

/// `POST /reload` on the admin listener: status and body.
async fn post_reload(admin: SocketAddr) -> (u16, String) {
    let raw = raw_exchange(
        admin,
        b"POST /reload HTTP/1.1\r\nHost: admin\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
        Duration::from_secs(10),
    )
    .await;
    let status = raw
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = raw.split_once("\r\n\r\n").map_or("", |(_, b)| b).to_owned();
    (status, body)
}

/// A sample of `/metrics` on the admin listener (the whole line's value).
async fn metric(admin: SocketAddr, sample: &str) -> Option<String> {
    let (_, _, body) = get(&format!("http://{admin}/metrics"), false).await;
    String::from_utf8_lossy(&body).lines().find_map(|l| {
        l.strip_prefix(sample)
            .and_then(|rest| rest.strip_prefix(' '))
            .map(str::to_owned)
    })
}

/// GET `url`: status and body, or `None` when the request failed.
async fn try_get(url: &str) -> Option<(u16, String)> {
    let client = client(false);
    let uri: http::Uri = url.parse().ok()?;
    let resp = tokio::time::timeout(Duration::from_secs(5), client.get(uri))
        .await
        .ok()?
        .ok()?;
    let status = resp.status().as_u16();
    let body = resp.into_body().collect().await.ok()?.to_bytes();
    Some((status, String::from_utf8_lossy(&body).into_owned()))
}

/// Polls `url` (every 50 ms, up to 10 s) until `want` holds for its answer.
async fn until(url: &str, want: impl Fn(&Option<(u16, String)>) -> bool) -> Option<(u16, String)> {
    let start = Instant::now();
    loop {
        let got = try_get(url).await;
        if want(&got) || start.elapsed() > Duration::from_secs(10) {
            return got;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_swaps_routes_and_upstreams() {
    let (a, b) = (TestOrigin::start("A").await, TestOrigin::start("B").await);
    let weir = WeirProcess::start(&format!(
        "{LISTENER}{}{}",
        upstream("a", a.addr),
        route("/a", "a")
    ));
    assert_eq!(try_get(&weir.url("/a")).await, Some((200, "A /a".into())));
    assert_eq!(try_get(&weir.url("/b")).await.map(|r| r.0), Some(404));

    weir.rewrite_config(&format!(
        "{LISTENER}{}{}{}",
        upstream("b", b.addr),
        route("/a", "b"),
        route("/b", "b")
    ));
    weir.signal("HUP");
    let got = until(&weir.url("/b"), |r| matches!(r, Some((200, _)))).await;
    assert_eq!(got, Some((200, "B /b".into())), "{}", weir.log_text());
    assert_eq!(try_get(&weir.url("/a")).await, Some((200, "B /a".into())));
    let log = weir.log_text();
    assert!(log.contains("config reloaded"), "{log}");
    assert!(log.contains("SIGHUP received"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_config_is_refused_and_the_old_one_serves() {
    let a = TestOrigin::start("A").await;
    let good = format!("{LISTENER}{}{}", upstream("a", a.addr), route("/a", "a"));
    let weir = WeirProcess::start(&good);
    let admin = weir.admin_addr();

    // A TOML syntax error.
    weir.rewrite_config(&format!("{good}[[route]\npath_prefix = \"/x\"\n"));
    let (status, body) = post_reload(admin).await;
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("weir.toml:"), "{body}");
    assert_eq!(
        metric(admin, "weir_config_reloads_total{result=\"error\"}").await,
        Some("1".into())
    );
    assert_eq!(try_get(&weir.url("/a")).await, Some((200, "A /a".into())));

    // An unknown key.
    weir.rewrite_config(&format!("{good}[server]\nno_such_key = 1\n"));
    let (status, body) = post_reload(admin).await;
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("weir.toml:"), "{body}");
    assert!(body.contains("no_such_key"), "{body}");
    let log = weir.log_text();
    assert!(log.contains("config reload refused"), "{log}");
    assert!(log.contains("no_such_key"), "{log}");
    assert_eq!(
        metric(admin, "weir_config_reloads_total{result=\"error\"}").await,
        Some("2".into())
    );
    assert_eq!(
        metric(admin, "weir_config_reloads_total{result=\"ok\"}").await,
        Some("0".into())
    );
    assert_eq!(try_get(&weir.url("/a")).await, Some((200, "A /a".into())));

    // GET is not a reload; a good config then is.
    let (_, _, body) = get(&format!("http://{admin}/reload"), false).await;
    assert!(String::from_utf8_lossy(&body).contains("405"));
    // A key that needs a restart is named in a WARN; the rest applies.
    weir.rewrite_config(&format!("{good}[server]\naccess_log = \"off\"\n"));
    let (status, body) = post_reload(admin).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.starts_with("config reloaded: 1 routes"), "{body}");
    let log = weir.log_text();
    assert!(
        log.contains("[server] access_log changed, which needs a restart"),
        "{log}"
    );
    assert_eq!(
        metric(admin, "weir_config_reloads_total{result=\"ok\"}").await,
        Some("1".into())
    );
    let stamp = metric(admin, "weir_config_last_reload_success_timestamp_seconds").await;
    assert!(stamp.as_deref().is_some_and(|s| s != "0"), "{stamp:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reloads_under_load_fail_nothing_and_keep_the_pool() {
    const CLIENTS: usize = 4;
    let a = TestOrigin::start("A").await;
    let one = format!("{LISTENER}{}{}", upstream("a", a.addr), route("/a", "a"));
    let two = format!("{one}{}", route("/other", "a"));
    let weir = WeirProcess::start(&one);
    let admin = weir.admin_addr();

    let deadline = Instant::now() + Duration::from_secs(3);
    let mut tasks = Vec::new();
    for _ in 0..CLIENTS {
        let url: http::Uri = weir.url("/a").parse().expect("uri");
        tasks.push(tokio::spawn(async move {
            // One client each: one keep-alive connection, reused.
            let client = client(false);
            let (mut ok, mut failed) = (0usize, Vec::new());
            while Instant::now() < deadline {
                match client.get(url.clone()).await {
                    Ok(resp) if resp.status() == 200 => {
                        let _ = resp.into_body().collect().await;
                        ok += 1;
                    }
                    Ok(resp) => failed.push(resp.status().to_string()),
                    Err(e) => failed.push(e.to_string()),
                }
            }
            (ok, failed)
        }));
    }
    for i in 0..10 {
        tokio::time::sleep(Duration::from_millis(250)).await;
        weir.rewrite_config(if i % 2 == 0 { &two } else { &one });
        let (status, body) = post_reload(admin).await;
        assert_eq!(status, 200, "{body}");
        assert!(
            body.contains("upstreams kept 1, new 0, removed 0"),
            "{body}"
        );
    }
    let mut total = 0;
    for t in tasks {
        let (ok, failed) = t.await.expect("client task");
        assert!(failed.is_empty(), "failed requests: {failed:?}");
        total += ok;
    }
    let accepts = a.accepts.load(Ordering::Relaxed);
    assert!(total > 100, "only {total} requests in 3 s");
    assert!(
        accepts <= CLIENTS * 2,
        "{accepts} upstream connections for {total} requests"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_in_flight_outlives_its_removed_route() {
    let a = TestOrigin::start("A").await;
    let weir = WeirProcess::start(&format!(
        "{LISTENER}{}{}{}",
        upstream("a", a.addr),
        route("/a", "a"),
        route("/gone", "a")
    ));
    let admin = weir.admin_addr();
    let slow = tokio::spawn(try_get_owned(weir.url("/gone/slow")));
    // Let the request reach the origin (which holds it for 1 s).
    tokio::time::sleep(Duration::from_millis(300)).await;
    weir.rewrite_config(&format!(
        "{LISTENER}{}{}",
        upstream("a", a.addr),
        route("/a", "a")
    ));
    let (status, body) = post_reload(admin).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(try_get(&weir.url("/gone/x")).await.map(|r| r.0), Some(404));
    assert_eq!(
        slow.await.expect("task"),
        Some((200, "A /gone/slow".into()))
    );
}

async fn try_get_owned(url: String) -> Option<(u16, String)> {
    try_get(&url).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listeners_open_and_close_on_reload() {
    let a = TestOrigin::start("A").await;
    let base = format!("{LISTENER}{}{}", upstream("a", a.addr), route("/", "a"));
    let weir = WeirProcess::start(&base);
    let admin = weir.admin_addr();
    let extra: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().expect("addr");
    let url = format!("http://{extra}/x");
    assert_eq!(try_get(&url).await, None);

    weir.rewrite_config(&format!("{base}[[listener]]\naddress = \"{extra}\"\n"));
    let (status, body) = post_reload(admin).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("listeners opened 1, closed 0"), "{body}");
    assert_eq!(try_get(&url).await, Some((200, "A /x".into())));

    weir.rewrite_config(&base);
    let (status, body) = post_reload(admin).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("listeners opened 0, closed 1"), "{body}");
    let refused = tokio::net::TcpStream::connect(extra).await;
    assert!(refused.is_err(), "the removed listener still accepts");
    // The listener that stayed kept serving.
    assert_eq!(try_get(&weir.url("/y")).await, Some((200, "A /y".into())));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_checks_of_a_removed_upstream_stop() {
    let (a, h) = (TestOrigin::start("A").await, TestOrigin::start("H").await);
    let checked = format!(
        "{}[upstream.health]\npath = \"/health\"\ninterval = \"50ms\"\n\n",
        upstream("h", h.addr)
    );
    let weir = WeirProcess::start(&format!(
        "{LISTENER}{}{checked}{}{}",
        upstream("a", a.addr),
        route("/a", "a"),
        route("/h", "h")
    ));
    let admin = weir.admin_addr();
    let start = Instant::now();
    while h.health.load(Ordering::Relaxed) < 3 {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "no health checks"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    weir.rewrite_config(&format!(
        "{LISTENER}{}{}",
        upstream("a", a.addr),
        route("/a", "a")
    ));
    let (status, body) = post_reload(admin).await;
    assert_eq!(status, 200, "{body}");
    assert!(
        body.contains("upstreams kept 1, new 0, removed 1"),
        "{body}"
    );
    // A check already on its way may still land.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let after = h.health.load(Ordering::Relaxed);
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(h.health.load(Ordering::Relaxed), after, "checks go on");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificates_are_read_again_on_reload() {
    let certs = tempfile::tempdir().expect("tempdir");
    let (ca1, ca2) = (ca(certs.path(), "one"), ca(certs.path(), "two"));
    let (cert, key) = leaf(certs.path(), &ca1, "site", &["127.0.0.1"]);
    let a = TestOrigin::start("A").await;
    let config = format!(
        "[[listener]]\naddress = \"127.0.0.1:{{port}}\"\ntls = {{ cert = \"{}\", key = \"{}\" }}\n\n{}{}",
        cert.display(),
        key.display(),
        upstream("a", a.addr),
        route("/", "a")
    );
    let weir = WeirProcess::start(&config);
    let admin = weir.admin_addr();
    let url = format!("https://127.0.0.1:{}/x", weir.addr.port());
    let with = |ca: &std::path::Path| {
        let out = curl(&["--cacert", &ca.display().to_string(), &url]);
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    assert_eq!(with(&ca1.pem), (true, "A /x".into()));
    assert!(!with(&ca2.pem).0);

    // New files at the same paths, the same config.
    leaf(certs.path(), &ca2, "site", &["127.0.0.1"]);
    let (status, body) = post_reload(admin).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(with(&ca2.pem), (true, "A /x".into()));
    assert!(!with(&ca1.pem).0);
}

/// An embedded origin with `test_endpoints = false` serves the site and
/// the fragment markup, not the load-test endpoints; a reload cannot
/// start another embedded origin or change one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_origins_keep_their_settings_across_reloads() {
    let root = fixtures();
    let site = |test_endpoints: bool, extra: &str| {
        format!(
            "{LISTENER}[[upstream]]\nname = \"site\"\norigin = \"embedded\"\nroot = {root:?}\ntest_endpoints = {test_endpoints}\n\n{}{extra}",
            route("/", "site"),
        )
    };
    let weir = WeirProcess::start(&site(false, ""));
    let admin = weir.admin_addr();

    let index = try_get(&weir.url("/")).await;
    assert_eq!(index.as_ref().map(|r| r.0), Some(200), "{index:?}");
    let fragment = try_get(&weir.url("/fragment/nav?delay_ms=10")).await;
    assert_eq!(fragment.as_ref().map(|r| r.0), Some(200), "{fragment:?}");
    for path in ["/bytes/1099511627776", "/delay/60000", "/echo", "/abort/10"] {
        let got = try_get(&weir.url(path)).await;
        assert_eq!(got.as_ref().map(|r| r.0), Some(404), "{path}: {got:?}");
    }
    let filler = try_get(&weir.url("/fragment/nav?bytes=1073741824")).await;
    assert_eq!(filler.as_ref().map(|r| r.0), Some(400), "{filler:?}");
    assert!(
        filler
            .as_ref()
            .is_some_and(|r| r.1.contains("test_endpoints")),
        "{filler:?}"
    );

    // Turning the test endpoints on needs a restart: refused, old one stays.
    weir.rewrite_config(&site(true, ""));
    let (status, body) = post_reload(admin).await;
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("restart"), "{body}");
    let got = try_get(&weir.url("/bytes/10")).await;
    assert_eq!(got.as_ref().map(|r| r.0), Some(404), "{got:?}");

    // A second embedded origin cannot be started by a reload either.
    let second = format!(
        "[[upstream]]\nname = \"more\"\norigin = \"embedded\"\nroot = {root:?}\n\n{}",
        route("/more", "more")
    );
    weir.rewrite_config(&site(false, &second));
    let (status, body) = post_reload(admin).await;
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("\"more\""), "{body}");

    // The same settings reload fine.
    weir.rewrite_config(&site(false, &route("/again", "site")));
    let (status, body) = post_reload(admin).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.starts_with("config reloaded: 2 routes"), "{body}");
    let index = try_get(&weir.url("/")).await;
    assert_eq!(index.as_ref().map(|r| r.0), Some(200), "{index:?}");
}

/// A Kubernetes ConfigMap volume as the kubelet writes it: the files in a
/// hidden timestamped directory, `..data` a symlink to it, and each visible
/// name a symlink through `..data`. [`ConfigMapDir::swap`] updates it the
/// way the kubelet does: a new directory, then `..data` renamed over.
struct ConfigMapDir {
    root: std::path::PathBuf,
    version: usize,
}

impl ConfigMapDir {
    /// Lays out `root` with `weir.toml` = `text`; returns the visible path.
    fn create(root: &std::path::Path, text: &str) -> (ConfigMapDir, std::path::PathBuf) {
        std::fs::create_dir_all(root).expect("configmap dir");
        let mut dir = ConfigMapDir {
            root: root.to_path_buf(),
            version: 0,
        };
        dir.swap(text);
        let visible = root.join("weir.toml");
        std::os::unix::fs::symlink("..data/weir.toml", &visible).expect("visible symlink");
        (dir, visible)
    }

    /// Writes `text` into a new hidden directory and points `..data` at it
    /// with one rename; the previous directory is removed after.
    fn swap(&mut self, text: &str) {
        self.version += 1;
        let name = format!("..2026_12_05_00_00_00.{}", self.version);
        let new = self.root.join(&name);
        std::fs::create_dir(&new).expect("version dir");
        std::fs::write(new.join("weir.toml"), text).expect("configmap file");
        let tmp = self.root.join("..data_tmp");
        std::os::unix::fs::symlink(&name, &tmp).expect("..data_tmp");
        std::fs::rename(&tmp, self.root.join("..data")).expect("swap ..data");
        if self.version > 1 {
            let old = self
                .root
                .join(format!("..2026_12_05_00_00_00.{}", self.version - 1));
            std::fs::remove_dir_all(old).expect("old version dir");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_reloads_on_a_configmap_swap_and_keeps_the_old_config_when_refused() {
    let (a, b) = (TestOrigin::start("A").await, TestOrigin::start("B").await);
    let v1 = format!("{LISTENER}{}{}", upstream("a", a.addr), route("/a", "a"));
    let mut cm = None;
    let weir = WeirProcess::start_with(
        &v1,
        &["--watch", "--watch-interval-ms", "100"],
        |dir, text| {
            let (made, visible) = ConfigMapDir::create(&dir.join("config"), text);
            cm = Some(made);
            visible
        },
    );
    let mut cm = cm.expect("configmap laid out");
    let admin = weir.admin_addr();
    assert_eq!(try_get(&weir.url("/a")).await, Some((200, "A /a".into())));

    // A good update: the new routes serve without a signal.
    let v2 = format!(
        "{LISTENER}{}{}{}",
        upstream("b", b.addr),
        route("/a", "b"),
        route("/b", "b")
    );
    cm.swap(&weir.rendered_config(&v2));
    let got = until(&weir.url("/b"), |r| matches!(r, Some((200, _)))).await;
    assert_eq!(got, Some((200, "B /b".into())), "{}", weir.log_text());
    assert_eq!(try_get(&weir.url("/a")).await, Some((200, "B /a".into())));
    assert!(
        weir.log_text()
            .contains("the watched config directory changed: reloading"),
        "{}",
        weir.log_text()
    );

    // A bad update: refused once, the old config serves, and it is not
    // retried while the directory stays as it is.
    cm.swap(&weir.rendered_config(&format!("{v2}[[route]\n")));
    let refused = eventually(Duration::from_secs(10), || {
        weir.log_text().contains("config reload refused")
    })
    .await;
    assert!(refused, "{}", weir.log_text());
    assert!(weir.log_text().contains("weir.toml:"), "names the file");
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(
        metric(admin, "weir_config_reloads_total{result=\"error\"}").await,
        Some("1".into())
    );
    assert_eq!(try_get(&weir.url("/b")).await, Some((200, "B /b".into())));

    // Fixed again: applied.
    let v3 = format!("{LISTENER}{}{}", upstream("a", a.addr), route("/c", "a"));
    cm.swap(&weir.rendered_config(&v3));
    let got = until(&weir.url("/c"), |r| matches!(r, Some((200, _)))).await;
    assert_eq!(got, Some((200, "A /c".into())), "{}", weir.log_text());
    assert_eq!(try_get(&weir.url("/b")).await.map(|r| r.0), Some(404));
    assert_eq!(
        metric(admin, "weir_config_reloads_total{result=\"ok\"}").await,
        Some("2".into())
    );
}

#[test]
fn watch_needs_a_config_file_and_a_sane_interval() {
    let weir = env!("CARGO_BIN_EXE_weir");
    let out = std::process::Command::new(weir)
        .args(["serve", "--watch"])
        .output()
        .expect("run weir");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--config"), "{err}");

    let out = std::process::Command::new(weir)
        .args([
            "serve",
            "--config",
            "weir.toml",
            "--watch",
            "--watch-interval-ms",
            "5",
        ])
        .output()
        .expect("run weir");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--watch-interval-ms") && err.contains("100"),
        "{err}"
    );
}
