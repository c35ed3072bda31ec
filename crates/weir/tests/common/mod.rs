//! Test harness: the proxy, the built-in origin and nginx on ephemeral
//! ports of 127.0.0.1, and real clients (curl, hyper).

#![allow(dead_code)]

pub mod access_log;
pub mod certs;

use std::net::{SocketAddr, TcpListener as StdListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use sha2::{Digest, Sha256};
use tokio::sync::oneshot;
use weir_proxy::config::Config;

/// The repository root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("repo root")
}

/// `fixtures/`.
pub fn fixtures() -> PathBuf {
    repo_root().join("fixtures")
}

/// Lower-case hex SHA-256.
pub fn sha256_hex(data: &[u8]) -> String {
    let digest = Sha256::digest(data);
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// Period of the generated test bodies: a prime, so consecutive 64 KiB
/// chunks differ.
pub const PERIOD: u64 = 65521;

/// Byte `i` of every generated test body.
pub fn byte_at(i: u64) -> u8 {
    let i = i % PERIOD;
    (i.wrapping_mul(31).wrapping_add(i >> 7) % 251) as u8
}

/// Two periods and a chunk of the pattern: any chunk of a generated body
/// (at most 64 KiB) is a slice of it, no copy.
pub fn pattern() -> &'static Bytes {
    static P: std::sync::OnceLock<Bytes> = std::sync::OnceLock::new();
    P.get_or_init(|| {
        (0..PERIOD + 64 * 1024)
            .map(byte_at)
            .collect::<Vec<u8>>()
            .into()
    })
}

/// Whether `data`, found at offset `pos` of a generated body, is the
/// pattern (compared slice by slice, no per-byte work).
pub fn is_pattern(pos: u64, data: &[u8]) -> bool {
    let mut pos = pos;
    let mut rest = data;
    while !rest.is_empty() {
        let n = rest.len().min(64 * 1024);
        let at = (pos % PERIOD) as usize;
        if rest[..n] != pattern()[at..at + n] {
            return false;
        }
        pos += n as u64;
        rest = &rest[n..];
    }
    true
}

/// A running built-in origin.
pub struct Origin {
    pub addr: SocketAddr,
    _handle: weir_origin::OriginHandle,
}

/// Starts the built-in origin on a free port, serving `fixtures/`.
pub async fn start_origin() -> Origin {
    start_origin_at(&fixtures()).await
}

/// Starts the built-in origin on a free port, serving `root` (its
/// `fragments/` directory holds the `/fragment/{name}` files).
pub async fn start_origin_at(root: &Path) -> Origin {
    let handle = weir_origin::spawn(
        "127.0.0.1:0".parse().expect("addr"),
        weir_origin::OriginConfig::new(root.to_path_buf()),
    )
    .await
    .expect("start origin");
    Origin {
        addr: handle.local_addr(),
        _handle: handle,
    }
}

/// A proxy running in this process.
pub struct Proxy {
    pub addr: SocketAddr,
    /// Live upstream connections, counted by the proxy's connector.
    pub upstream_connections: std::sync::Arc<weir_proxy::counted::ConnectionCounts>,
    /// The proxy's metrics (mirror outcomes, cache counts, ...).
    pub metrics: std::sync::Arc<weir_proxy::metrics::Metrics>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Proxy {
    /// `http://127.0.0.1:port` + `path`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Stops accepting and waits for the server task (graceful shutdown).
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// A config with one listener on a free port and one route to `upstream_url`.
/// `extra` is appended verbatim (more `[server]`/`[client]` keys go in `server`/`client`).
/// The admin listener gets a free port too, unless `extra` has an `[admin]` table.
pub fn config_text(upstream_url: &str, server: &str, client: &str, extra: &str) -> String {
    ephemeral_admin(&format!(
        "[[listener]]\naddress = \"127.0.0.1:0\"\n\n[server]\n{server}\n\n[client]\n{client}\n\n\
         [[upstream]]\nname = \"app\"\nurl = \"{upstream_url}\"\n\n[[route]]\npath_prefix = \"/\"\nupstream = \"app\"\n\n{extra}\n"
    ))
}

/// `text` with `[admin] address = "127.0.0.1:0"` appended when it has no
/// `[admin]` table: tests run in parallel, and the default admin port
/// (9901) is one port for all of them.
pub fn ephemeral_admin(text: &str) -> String {
    if text.contains("[admin]") {
        text.to_owned()
    } else {
        format!("{text}\n[admin]\naddress = \"127.0.0.1:0\"\n")
    }
}

/// Starts the proxy in-process with the config `text`.
pub async fn start_proxy(text: &str) -> Proxy {
    let config = Config::parse(&ephemeral_admin(text), "test.toml", &repo_root())
        .expect("test config is valid");
    let server = weir_proxy::Server::bind(&config).await.expect("bind proxy");
    let addr = server.local_addrs()[0];
    let upstream_connections = server.upstream_connections();
    let metrics = server.metrics();
    let (tx, rx) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        let _ = server
            .run(async {
                let _ = rx.await;
            })
            .await;
    });
    Proxy {
        addr,
        upstream_connections,
        metrics,
        stop: Some(tx),
        task: Some(task),
    }
}

/// The proxy in front of a fresh built-in origin, with default settings.
pub async fn proxy_to_origin() -> (Proxy, Origin) {
    let origin = start_origin().await;
    let proxy = start_proxy(&config_text(&format!("http://{}", origin.addr), "", "", "")).await;
    (proxy, origin)
}

/// A hyper client for HTTP/1.1, or HTTP/2 with prior knowledge.
pub fn client(h2: bool) -> Client<HttpConnector, Full<Bytes>> {
    let mut b = Client::builder(TokioExecutor::new());
    if h2 {
        b.http2_only(true);
    }
    b.build_http()
}

/// GET `url` and collect status, headers and body.
pub async fn get(url: &str, h2: bool) -> (http::StatusCode, http::HeaderMap, Bytes) {
    let resp = client(h2)
        .get(url.parse().expect("url"))
        .await
        .expect("request");
    let (parts, body) = resp.into_parts();
    let body = body.collect().await.expect("body").to_bytes();
    (parts.status, parts.headers, body)
}

/// Runs curl with `args` (`-sS` added), with a 60 s cap.
pub fn curl(args: &[&str]) -> Output {
    Command::new("curl")
        .args(["-sS", "--max-time", "60"])
        .args(args)
        .output()
        .expect("curl must be installed (apt-get install -y curl)")
}

/// A free TCP port on 127.0.0.1 (bound, then released).
pub fn free_port() -> u16 {
    StdListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

/// Waits until something accepts on `addr`.
pub fn wait_for_port(addr: SocketAddr, limit: Duration) {
    let start = Instant::now();
    while std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
        assert!(
            start.elapsed() < limit,
            "nothing listens on {addr} after {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A running nginx serving `fixtures/` (plus `/gen/` from a temp dir and a
/// `/headers` location that echoes request headers), or `None` when nginx
/// is missing and `WEIR_SKIP_NGINX=1`.
pub struct Nginx {
    pub addr: SocketAddr,
    /// Files here are served under `/gen/`.
    pub gen_dir: PathBuf,
    child: Child,
    _dir: tempfile::TempDir,
}

impl Nginx {
    pub fn start() -> Option<Nginx> {
        Nginx::start_with(
            r#"
    server {
        listen 127.0.0.1:{port};
        root {fixtures};
        location /gen/ { alias {gen}/; }
        location = /headers {
            default_type text/plain;
            return 200 "xff=$http_x_forwarded_for\nxfp=$http_x_forwarded_proto\nxfh=$http_x_forwarded_host\nvia=$http_via\nhost=$http_host\nx-secret=$http_x_secret\nkeep-alive=$http_keep_alive\nte=$http_te\nproxy-connection=$http_proxy_connection\nupgrade=$http_upgrade\n";
        }
    }
"#,
        )
    }

    /// nginx with `servers` as the rest of its `http` block (`upstream`s
    /// and `server`s), `{port}` in it replaced by the port it listens on,
    /// `{fixtures}` and `{gen}` by those directories.
    pub fn start_with(servers: &str) -> Option<Nginx> {
        let Some(bin) = ["/usr/sbin/nginx", "/usr/bin/nginx", "/usr/local/sbin/nginx"]
            .into_iter()
            .find(|p| Path::new(p).exists())
        else {
            if std::env::var("WEIR_SKIP_NGINX").is_ok_and(|v| v == "1") {
                eprintln!("nginx not installed; skipped because WEIR_SKIP_NGINX=1");
                return None;
            }
            panic!(
                "this test needs nginx as an upstream, and nginx is not installed. \
                 Install it (apt-get install -y nginx) or set WEIR_SKIP_NGINX=1 to skip nginx tests."
            );
        };
        let dir = tempfile::tempdir().expect("tempdir");
        let gen_dir = dir.path().join("gen");
        std::fs::create_dir_all(&gen_dir).expect("gen dir");
        let port = free_port();
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().expect("addr");
        let conf = format!(
            r#"
daemon off;
master_process off;
worker_processes 1;
user root;
error_log {dir}/error.log warn;
pid {dir}/nginx.pid;
events {{ worker_connections 256; }}
http {{
    access_log off;
    client_body_temp_path {dir}/client_body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
    types {{ text/html html; text/css css; image/png png; application/json json; application/octet-stream bin; }}
{servers}
}}
"#,
            dir = dir.path().display(),
            servers = servers
                .replace("{port}", &port.to_string())
                .replace("{fixtures}", &fixtures().display().to_string())
                .replace("{gen}", &gen_dir.display().to_string()),
        );
        let conf_path = dir.path().join("nginx.conf");
        std::fs::write(&conf_path, conf).expect("write nginx.conf");
        let child = Command::new(bin)
            .arg("-p")
            .arg(dir.path())
            .arg("-c")
            .arg(&conf_path)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn nginx");
        wait_for_port(addr, Duration::from_secs(10));
        Some(Nginx {
            addr,
            gen_dir,
            child,
            _dir: dir,
        })
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The `weir` binary, started with a config file, killed on drop.
pub struct WeirProcess {
    pub child: Child,
    pub addr: SocketAddr,
    pub log: PathBuf,
    _dir: tempfile::TempDir,
}

impl WeirProcess {
    /// Starts `weir serve --config <file>` with JSON logs captured to a file.
    /// `config` may contain `{port}`, replaced by a free port for the listener.
    pub fn start(config: &str) -> WeirProcess {
        Self::start_with(config, &[], |dir, text| {
            let path = dir.join("weir.toml");
            std::fs::write(&path, text).expect("write config");
            path
        })
    }

    /// As [`WeirProcess::start`], with `args` after `--config <file>`, and
    /// `place` writing the config text into the temp dir (given) and
    /// returning the path to pass to `--config`.
    pub fn start_with(
        config: &str,
        args: &[&str],
        place: impl FnOnce(&Path, &str) -> PathBuf,
    ) -> WeirProcess {
        let dir = tempfile::tempdir().expect("tempdir");
        let port = free_port();
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().expect("addr");
        let config = ephemeral_admin(&config.replace("{port}", &port.to_string()));
        let path = place(dir.path(), &config);
        Self::spawn(dir, &path, addr, args)
    }

    /// `weir serve` with `config` (written as is, to `weir.toml` in a temp
    /// dir) listening on `addr`, which the config names.
    pub fn start_at(addr: SocketAddr, config: &str) -> WeirProcess {
        Self::start_at_env(addr, config, &[])
    }

    /// As [`WeirProcess::start_at`], with `env` added to the process's
    /// environment.
    pub fn start_at_env(addr: SocketAddr, config: &str, env: &[(&str, &str)]) -> WeirProcess {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("weir.toml");
        std::fs::write(&path, config).expect("write config");
        Self::spawn_env(dir, &path, addr, &[], env)
    }

    /// Starts `weir serve --config path args` with JSON logs to `weir.log`
    /// in `dir`, and waits until `addr` accepts.
    fn spawn(dir: tempfile::TempDir, path: &Path, addr: SocketAddr, args: &[&str]) -> WeirProcess {
        Self::spawn_env(dir, path, addr, args, &[])
    }

    fn spawn_env(
        dir: tempfile::TempDir,
        path: &Path,
        addr: SocketAddr,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> WeirProcess {
        let log = dir.path().join("weir.log");
        let child = Command::new(env!("CARGO_BIN_EXE_weir"))
            .args(["--log-format", "json", "serve", "--config"])
            .arg(path)
            .args(args)
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log file"))
            .spawn()
            .expect("spawn weir");
        wait_for_port(addr, Duration::from_secs(20));
        WeirProcess {
            child,
            addr,
            log,
            _dir: dir,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// The temp dir the config file (`weir.toml`) and the log are in.
    pub fn dir(&self) -> &Path {
        self._dir.path()
    }

    /// Rewrites the config file as [`WeirProcess::start`] wrote it (the
    /// same `{port}`, and the same ephemeral admin rule), for a reload.
    pub fn rewrite_config(&self, config: &str) {
        std::fs::write(self.dir().join("weir.toml"), self.rendered_config(config))
            .expect("rewrite config");
    }

    /// `config` as [`WeirProcess::start`] writes it: `{port}` replaced and
    /// the ephemeral admin rule applied.
    pub fn rendered_config(&self, config: &str) -> String {
        ephemeral_admin(&config.replace("{port}", &self.addr.port().to_string()))
    }

    /// The admin listener's address, read from the startup log line
    /// (waits up to 10 s for it).
    pub fn admin_addr(&self) -> SocketAddr {
        let start = Instant::now();
        loop {
            let log = self.log_text();
            if let Some(rest) = log.split("admin endpoint on http://").nth(1) {
                let addr = rest.split('/').next().unwrap_or_default();
                return addr.parse().expect("admin address in the log");
            }
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "no admin address in the log:\n{log}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Sends a signal by name (`TERM`, `INT`).
    pub fn signal(&self, sig: &str) {
        let status = Command::new("kill")
            .args([&format!("-{sig}"), &self.child.id().to_string()])
            .status()
            .expect("kill");
        assert!(status.success());
    }

    /// Waits for exit, at most `limit`.
    pub fn wait_exit(&mut self, limit: Duration) -> std::process::ExitStatus {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status;
            }
            assert!(
                start.elapsed() < limit,
                "weir did not exit within {limit:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Peak resident set size so far (VmHWM), in bytes.
    pub fn peak_rss(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .expect("proc status");
        let line = status
            .lines()
            .find(|l| l.starts_with("VmHWM:"))
            .expect("VmHWM");
        let kb: u64 = line
            .split_whitespace()
            .nth(1)
            .expect("value")
            .parse()
            .expect("number");
        kb * 1024
    }
}

impl Drop for WeirProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An upstream that answers every request with the same raw bytes, then
/// closes: for upstreams that misbehave on purpose.
pub struct RawUpstream {
    pub addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl RawUpstream {
    pub async fn start(response: &'static [u8]) -> RawUpstream {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let task = tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut head = Vec::new();
                    let mut buf = [0u8; 4096];
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                        match s.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => head.extend_from_slice(&buf[..n]),
                        }
                    }
                    let _ = s.write_all(response).await;
                    let _ = s.shutdown().await;
                });
            }
        });
        RawUpstream { addr, task }
    }
}

impl Drop for RawUpstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The status code curl reports for a GET of `url` (`000` when none came).
pub fn curl_code(url: &str) -> String {
    let out = curl(&["-s", "-o", "/dev/null", "-w", "%{http_code}", url]);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Sends raw bytes to `addr` and reads until the peer closes (at most `limit`).
pub async fn raw_exchange(addr: SocketAddr, request: &[u8], limit: Duration) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
    s.write_all(request).await.expect("write");
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(limit, s.read_to_end(&mut buf)).await;
    String::from_utf8_lossy(&buf).into_owned()
}

/// Polls `cond` every 20 ms until it holds or `limit` passes.
pub async fn eventually(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if cond() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    cond()
}

#[path = "../../../weir-ssr/tests/common/untoken.rs"]
mod untoken;
// Only the SSR test files use it; each test file compiles this module.
#[allow(unused_imports)]
pub use untoken::untoken;
