//! The `weir` binary as users run it: config files, signals, logs, memory.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::*;

fn embedded_config() -> String {
    format!(
        "[[listener]]\naddress = \"127.0.0.1:{{port}}\"\n[server]\nshutdown_grace = \"10s\"\n\
         [[upstream]]\nname = \"site\"\norigin = \"embedded\"\nroot = \"{}\"\n[[route]]\nupstream = \"site\"\n",
        fixtures().display()
    )
}

fn access_lines(log: &str) -> Vec<serde_json::Value> {
    log.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["target"] == "weir::access")
        .collect()
}

#[test]
fn serve_with_embedded_origin_serves_the_fixture_site_with_via() {
    let weir = WeirProcess::start(&embedded_config());
    let out = curl(&["-i", &weir.url("/")]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(
        text.to_ascii_lowercase().contains("\nvia: 1.1 weir"),
        "{text}"
    );
    let index = std::fs::read_to_string(fixtures().join("index.html")).expect("index.html");
    assert!(
        text.ends_with(&index),
        "the body is not fixtures/index.html"
    );
}

#[test]
fn fixture_blobs_match_their_published_hashes() {
    let weir = WeirProcess::start(&embedded_config());
    let sums = std::fs::read_to_string(fixtures().join("SHA256SUMS")).expect("SHA256SUMS");
    let mut checked = 0;
    for line in sums.lines().filter(|l| !l.trim().is_empty()) {
        let (hash, name) = line.split_once(char::is_whitespace).expect("sum line");
        let name = name.trim().trim_start_matches('*');
        let out = curl(&[&weir.url(&format!("/{name}"))]);
        assert!(out.status.success());
        assert_eq!(sha256_hex(&out.stdout), hash, "{name}");
        checked += 1;
    }
    assert!(checked >= 2);
}

#[test]
fn access_log_has_one_json_line_per_request_with_outcome() {
    let weir = WeirProcess::start(&embedded_config());
    assert!(
        curl(&["-o", "/dev/null", &weir.url("/bytes/5000")])
            .status
            .success()
    );
    assert!(
        !curl(&["-o", "/dev/null", &weir.url("/abort/5000")])
            .status
            .success()
    );
    let out = curl(&[
        "-o",
        "/dev/null",
        "--data-binary",
        "hello",
        &weir.url("/echo"),
    ]);
    assert!(out.status.success());
    std::thread::sleep(Duration::from_millis(300));
    let lines = access_lines(&weir.log_text());
    assert_eq!(lines.len(), 3, "{lines:#?}");
    let ok = &lines[0];
    assert_eq!(ok["method"], "GET");
    assert_eq!(ok["path"], "/bytes/5000");
    assert_eq!(ok["status"], 200);
    assert_eq!(ok["bytes_out"], 5000);
    assert_eq!(ok["outcome"], "ok");
    assert_eq!(ok["upstream"], "site");
    assert!(ok["duration_ms"].is_u64());
    assert_eq!(lines[1]["outcome"], "upstream_error", "{:?}", lines[1]);
    assert_eq!(lines[2]["bytes_in"], 5);
}

#[test]
fn sigterm_lets_an_in_flight_download_finish_then_exits() {
    let mut weir = WeirProcess::start(&embedded_config());
    // ~1.5 s of streaming.
    let url = weir.url("/stream/131072?chunk=4096&delay_ms=50");
    let download = std::thread::spawn(move || curl(&["--http1.1", &url]));
    std::thread::sleep(Duration::from_millis(300));
    weir.signal("TERM");
    std::thread::sleep(Duration::from_millis(200));
    // No longer accepting.
    let refused = std::net::TcpStream::connect_timeout(&weir.addr, Duration::from_millis(500));
    assert!(refused.is_err(), "still accepting after SIGTERM");
    let out = download.join().expect("download thread");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.stdout.len(), 131072);
    assert_eq!(
        sha256_hex(&out.stdout),
        weir_origin::pattern::sha256_hex(131072)
    );
    let status = weir.wait_exit(Duration::from_secs(10));
    assert!(status.success(), "exit status {status:?}");
}

#[test]
fn one_gigabyte_download_keeps_rss_under_64_mb() {
    let weir = WeirProcess::start(&embedded_config());
    let n: u64 = 1 << 30;
    let out = curl(&[
        "--http1.1",
        "-o",
        "/dev/null",
        "-w",
        "%{size_download}",
        &weir.url(&format!("/bytes/{n}")),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), n.to_string());
    let rss = weir.peak_rss();
    assert!(rss < 64 << 20, "peak RSS {} MB", rss >> 20);
}

/// `weir check --config path`, run to its end.
fn weir_check(path: &Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["check", "--config"])
        .arg(path)
        .output()
        .expect("run weir check")
}

/// What `weir check` prints for the config at `path`, which must be valid.
fn check_ok(path: &Path) -> String {
    let out = weir_check(path);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// What `weir check` prints for `config`, written to a temporary file.
fn check_ok_text(config: &str) -> String {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("weir.toml");
    std::fs::write(&path, config).expect("write config");
    check_ok(&path)
}

#[test]
fn check_prints_resolved_routes() {
    let text = check_ok(&repo_root().join("config/weir.toml"));
    assert!(text.contains("listener  http://127.0.0.1:8080"), "{text}");
    assert!(text.contains("upstream  site"), "{text}");
    assert!(text.contains("prefix=/"), "{text}");
}

/// The container's config is valid and keeps the origin's test endpoints off.
#[test]
fn the_docker_config_turns_the_test_endpoints_off() {
    let text = check_ok(&repo_root().join("config/docker.toml"));
    assert!(text.contains("listener  http://0.0.0.0:8080"), "{text}");
    assert!(text.contains("test endpoints off"), "{text}");
}

/// The Kubernetes base's config is valid once its image paths
/// (`/srv/weir/`, where the Dockerfile puts the site) point at this
/// checkout, and listens where the manifests' ports and probes expect.
#[test]
fn the_kubernetes_config_is_valid_with_the_image_paths() {
    let text = std::fs::read_to_string(repo_root().join("deploy/kubernetes/weir.toml"))
        .expect("deploy/kubernetes/weir.toml");
    assert!(
        text.contains("/srv/weir/fixtures"),
        "uses the image's paths"
    );
    let here = format!("{}/", repo_root().display());
    let out = check_ok_text(&text.replace("/srv/weir/", &here));
    assert!(out.contains("listener  http://0.0.0.0:8080"), "{out}");
    assert!(out.contains("test endpoints off"), "{out}");
}

/// A page budget below one fragment's buffer is allowed, but `weir check`
/// says what it means (issue 15, U3).
#[test]
fn check_warns_when_the_page_budget_is_below_a_fragments_buffer() {
    let ssr = |page: u32, frag: u32| {
        check_ok_text(&format!(
            "[[upstream]]\nname = \"app\"\nurl = \"http://127.0.0.1:1\"\n\n\
             [[route]]\npath_prefix = \"/shop\"\nupstream = \"app\"\n\
             [route.ssr]\npage_buffer_bytes = {page}\nfragment_buffer_bytes = {frag}\n"
        ))
    };
    let text = ssr(65536, 1048576);
    assert!(
        text.contains(
            "warning   route prefix=/shop: page_buffer_bytes (65536) is less than \
             fragment_buffer_bytes (1048576)"
        ),
        "{text}"
    );
    assert!(text.ends_with("config OK\n"), "{text}");
    let text = ssr(1048576, 65536);
    assert!(!text.contains("warning"), "{text}");
    // `weir serve` logs it at startup too.
    let weir = WeirProcess::start(
        "[[listener]]\naddress = \"127.0.0.1:{port}\"\n\n\
         [[upstream]]\nname = \"app\"\nurl = \"http://127.0.0.1:1\"\n\n\
         [[route]]\npath_prefix = \"/shop\"\nupstream = \"app\"\n\
         [route.ssr]\npage_buffer_bytes = 65536\nfragment_buffer_bytes = 1048576\n",
    );
    let log = weir.log_text();
    assert!(
        log.contains("page_buffer_bytes (65536) is less than fragment_buffer_bytes (1048576)"),
        "{log}"
    );
}

#[test]
fn check_prints_an_upstreams_protocol() {
    let text = check_ok_text(
        "[[upstream]]\nname = \"grpc\"\nurl = \"http://127.0.0.1:50051\"\nprotocol = \"h2c\"\n\n\
         [[route]]\nupstream = \"grpc\"\n",
    );
    assert!(text.contains("protocol h2c"), "{text}");
}

#[test]
fn check_prints_the_outlier_and_retry_settings_of_a_group() {
    let text = check_ok_text(
        "[[upstream]]\nname = \"app\"\nservers = [\"http://127.0.0.1:1\", \"http://127.0.0.1:2\"]\n\
         [upstream.retry]\nretry_body_bytes = 1048576\n\n[[route]]\nupstream = \"app\"\n",
    );
    assert!(text.contains("outlier consecutive_failures="), "{text}");
    assert!(text.contains("failure_statuses=500-599"), "{text}");
    assert!(text.contains("retry_body_bytes=1048576"), "{text}");
}

#[test]
fn check_names_file_line_and_key_of_a_bad_config() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("bad.toml");
    std::fs::write(
        &path,
        "[[upstream]]\nname = \"a\"\nurl = \"http://127.0.0.1:1\"\n\n[[route]]\nupstream = \"b\"\n",
    )
    .expect("write");
    let out = weir_check(&path);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("{}:6:", path.display())), "{err}");
    assert!(err.contains("route[0].upstream"), "{err}");
}

#[test]
fn shutdown_grace_bounds_how_long_in_flight_requests_may_run() {
    let config = embedded_config().replace("shutdown_grace = \"10s\"", "shutdown_grace = \"1s\"");
    let mut weir = WeirProcess::start(&config);
    // ~10 s of streaming: far longer than the grace period.
    let url = weir.url("/stream/102400?chunk=1024&delay_ms=100");
    let download = std::thread::spawn(move || curl(&["--http1.1", "-o", "/dev/null", &url]));
    std::thread::sleep(Duration::from_millis(300));
    let start = std::time::Instant::now();
    weir.signal("TERM");
    let status = weir.wait_exit(Duration::from_secs(10));
    let took = start.elapsed();
    assert!(status.success(), "exit status {status:?}");
    assert!(
        took < Duration::from_secs(3),
        "exited {took:?} after SIGTERM with a 1 s grace"
    );
    let out = download.join().expect("download thread");
    assert!(!out.status.success(), "the cut download looked complete");
    let lines = access_lines(&weir.log_text());
    assert_eq!(lines.len(), 1, "{lines:#?}");
    assert_eq!(lines[0]["outcome"], "shutdown");
}

/// `embedded_config` with `[server] access_log = value`.
fn config_with_access_log(value: &str) -> String {
    embedded_config().replace(
        "[server]\n",
        &format!("[server]\naccess_log = \"{value}\"\n"),
    )
}

#[test]
fn access_log_file_gets_every_line_and_stderr_none() {
    let mut weir = WeirProcess::start(&config_with_access_log("access.log"));
    let file = weir.log.with_file_name("access.log");
    for i in 0..20 {
        let out = curl(&["-o", "/dev/null", &weir.url(&format!("/bytes/{}", 100 + i))]);
        assert!(out.status.success());
    }
    // Stopping writes out what the writer thread still has queued.
    weir.signal("TERM");
    assert!(weir.wait_exit(Duration::from_secs(15)).success());
    let text = std::fs::read_to_string(&file).expect("access log file");
    let lines = access_lines(&text);
    assert_eq!(lines.len(), 20, "{text}");
    assert_eq!(lines[0]["path"], "/bytes/100");
    assert_eq!(lines[19]["bytes_out"], 119);
    assert!(
        text.lines().count() == 20,
        "only access lines go to the file: {text}"
    );
    let stderr = weir.log_text();
    assert!(access_lines(&stderr).is_empty(), "{stderr}");
    assert!(
        stderr.contains("listening"),
        "the other logs stay on stderr: {stderr}"
    );
}

#[test]
fn sigusr1_reopens_the_access_log_file_after_it_was_renamed() {
    let mut weir = WeirProcess::start(&config_with_access_log("access.log"));
    let file = weir.log.with_file_name("access.log");
    let rotated = weir.log.with_file_name("access.log.1");
    let get = |path: &str| {
        let out = curl(&["-o", "/dev/null", &weir.url(path)]);
        assert!(out.status.success());
    };
    get("/bytes/1");
    // The line is written by a background thread: wait for it.
    let start = std::time::Instant::now();
    while std::fs::read_to_string(&file).map_or(0, |t| t.lines().count()) < 1 {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "first line never written"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::fs::rename(&file, &rotated).expect("rotate");
    weir.signal("USR1");
    let start = std::time::Instant::now();
    while !weir.log_text().contains("reopening the access log") {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "{}",
            weir.log_text()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    get("/bytes/2");
    weir.signal("TERM");
    assert!(weir.wait_exit(Duration::from_secs(15)).success());
    let old = access_lines(&std::fs::read_to_string(&rotated).expect("rotated file"));
    let new = access_lines(&std::fs::read_to_string(&file).expect("reopened file"));
    assert_eq!(old.len(), 1, "{old:#?}");
    assert_eq!(old[0]["path"], "/bytes/1");
    assert_eq!(new.len(), 1, "{new:#?}");
    assert_eq!(new[0]["path"], "/bytes/2");
}

#[test]
fn access_log_off_writes_no_line() {
    let weir = WeirProcess::start(&config_with_access_log("off"));
    let out = curl(&["-o", "/dev/null", &weir.url("/bytes/10")]);
    assert!(out.status.success());
    std::thread::sleep(Duration::from_millis(300));
    let stderr = weir.log_text();
    assert!(access_lines(&stderr).is_empty(), "{stderr}");
    assert!(stderr.contains("listening"), "{stderr}");
}

#[test]
fn access_log_file_that_cannot_be_opened_stops_serve_with_its_path() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("weir.toml");
    // Serve with `value` must fail; its stderr.
    let refused = |value: &str| {
        let config = config_with_access_log(value).replace("{port}", &free_port().to_string());
        std::fs::write(&path, config).expect("write config");
        let out = Command::new(env!("CARGO_BIN_EXE_weir"))
            .args(["serve", "--config"])
            .arg(&path)
            .output()
            .expect("run weir");
        assert!(!out.status.success(), "{value} was accepted");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    // What the config can tell: file, line and key.
    let err = refused("no-such-dir/access.log");
    assert!(
        err.contains("weir.toml:4:")
            && err.contains("server.access_log")
            && err.contains("no-such-dir"),
        "{err}"
    );
    // What only opening can tell (a link to nowhere): the path and the key.
    std::os::unix::fs::symlink(
        "/nonexistent-weir-dir/a.log",
        dir.path().join("dangling.log"),
    )
    .expect("symlink");
    let err = refused("dangling.log");
    assert!(
        err.contains("cannot open the access log")
            && err.contains("dangling.log")
            && err.contains("server.access_log"),
        "{err}"
    );
}

#[test]
fn access_log_write_failures_are_said_on_stderr() {
    let mut weir = WeirProcess::start(&config_with_access_log("/dev/full"));
    let out = curl(&["-o", "/dev/null", &weir.url("/bytes/10")]);
    assert!(
        out.status.success(),
        "requests go on when the log cannot be written"
    );
    weir.signal("TERM");
    assert!(weir.wait_exit(Duration::from_secs(15)).success());
    let stderr = weir.log_text();
    assert_eq!(
        stderr
            .matches("cannot write the access log /dev/full")
            .count(),
        1,
        "{stderr}"
    );
}

#[test]
fn a_bad_log_level_is_said_first_with_status_2() {
    let out = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args([
            "--log-level",
            "wat=[",
            "serve",
            "--config",
            "/nonexistent/weir.toml",
        ])
        .output()
        .expect("run weir");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("invalid --log-level"), "{err}");
}

#[test]
fn check_into_a_closed_pipe_exits_cleanly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("weir.toml");
    std::fs::write(&path, embedded_config().replace("{port}", "0")).expect("write");
    let mut child = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["check", "--config"])
        .arg(&path)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    // The reader goes away before weir writes: `weir check | true`.
    drop(child.stdout.take());
    let out = child.wait_with_output().expect("wait");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{:?}: {stderr}", out.status);
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn every_request_gets_a_request_id_sent_upstream_returned_and_logged_with_its_query() {
    let weir = WeirProcess::start(&embedded_config());
    let out = curl(&[
        "-sS",
        "-i",
        "-H",
        "X-Request-Id: forged-by-client",
        &weir.url("/echo?a=1&b=two"),
    ]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let id = text
        .lines()
        .find_map(|l| l.strip_prefix("x-request-id: "))
        .map(str::trim)
        .expect("an X-Request-Id in the response")
        .to_owned();
    assert_eq!(id.len(), 36, "a UUID, not the client's: {id}");
    // The origin's echo lists the fields it got.
    assert!(
        text.matches(&id[..]).count() >= 2,
        "the upstream did not get the same id: {text}"
    );
    assert!(!text.contains("forged-by-client"), "{text}");
    assert!(
        text.contains("traceparent"),
        "no traceparent upstream: {text}"
    );
    let logged = (0..100).any(|_| {
        let log = weir.log_text();
        if log.contains(&format!("\"request_id\":\"{id}\""))
            && log.contains("\"query\":\"a=1&b=two\"")
        {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
        false
    });
    assert!(
        logged,
        "access log without the id or query:\n{}",
        weir.log_text()
    );
}
