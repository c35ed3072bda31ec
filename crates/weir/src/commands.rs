//! The subcommands.

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use weir_origin::{OriginConfig, OriginHandle};
use weir_proxy::Server;
use weir_proxy::config::{
    AccessLogTarget, Balance, Config, ConfigError, HashKey, HostHeader, Protocol, RateLimitScope,
    RingHash, UpstreamTarget, format_duration,
};

use crate::logging;

/// The default config, embedded at build time.
const DEFAULT_CONFIG: &str = include_str!("../../../config/weir.toml");
/// How the embedded config is named in messages.
const DEFAULT_CONFIG_LABEL: &str = "<embedded config/weir.toml>";
/// The embedded config's directory at build time. Paths in the embedded
/// config are relative to `./config` when run from a checkout's root, and
/// to this directory otherwise, so `weir serve` finds `fixtures/` anywhere.
const BUILD_CONFIG_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../config");

fn load(path: Option<&Path>) -> anyhow::Result<Config> {
    Ok(read_config(path)?)
}

/// The config at `path`, or the embedded one: at startup, and again on
/// each reload.
fn read_config(path: Option<&Path>) -> Result<Config, ConfigError> {
    match path {
        Some(path) => Config::from_file(path),
        None => {
            let here = Path::new("config");
            let base = if here.is_dir() && Path::new("fixtures").is_dir() {
                here
            } else {
                Path::new(BUILD_CONFIG_DIR)
            };
            Config::parse(DEFAULT_CONFIG, DEFAULT_CONFIG_LABEL, base)
        }
    }
}

/// The runtime that runs every connection: `workers` worker threads. One
/// worker is a `current_thread` runtime: every task on the thread that
/// runs `block_on`, with no work-stealing queues, cross-thread wake-ups or
/// a second thread to hand connections to.
fn runtime(workers: usize) -> anyhow::Result<tokio::runtime::Runtime> {
    let mut builder = if workers == 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        b.worker_threads(workers);
        b
    };
    builder
        .enable_all()
        .build()
        .context("cannot start the tokio runtime")
}

/// `weir check`: validate and print.
pub fn check(path: &Path) -> anyhow::Result<()> {
    let config = load(Some(path))?;
    let text = format!("{}config OK\n", describe(&config));
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        // `weir check | head`: the reader has what it wanted.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other.context("cannot write to stdout"),
    }
}

/// The `tls` line of an `https://` upstream: its roots, the name verified,
/// its client certificate.
fn upstream_tls_line(tls: &weir_proxy::config::UpstreamTls) -> String {
    let ca = tls
        .ca
        .as_ref()
        .map_or("system roots".to_owned(), |p| p.display().to_string());
    let name = tls.server_name.as_deref().unwrap_or("(the URL's host)");
    let cert = tls.client_cert.as_ref().map_or("none".to_owned(), |c| {
        format!("{} key={}", c.cert_path.display(), c.key_path.display())
    });
    format!("          tls (TLS 1.3, 1.2) ca={ca} server_name={name} client_cert={cert}\n")
}

fn balance_name(b: &Balance) -> String {
    match b {
        Balance::RoundRobin => "round_robin".to_owned(),
        Balance::LeastOutstanding => "least_outstanding".to_owned(),
        Balance::Hash(key, ring) => {
            let key = match key {
                HashKey::Header(h) => format!("header:{h}"),
                HashKey::Cookie(c) => format!("cookie:{c}"),
                HashKey::ClientAddr => "client_addr".to_owned(),
            };
            match ring {
                RingHash::Weir => format!("hash({key})"),
                RingHash::Ketama => format!("hash({key}, ketama)"),
            }
        }
    }
}

fn describe(config: &Config) -> String {
    let mut out = format!("config: {}\n", config.source);
    for l in &config.listeners {
        let Some(tls) = &l.tls else {
            out += &format!("listener  http://{}\n", l.address);
            continue;
        };
        out += &format!(
            "listener  https://{} tls (TLS 1.3, 1.2; ALPN h2, http/1.1)\n",
            l.address
        );
        for (i, c) in tls.certificates.iter().enumerate() {
            let names = if c.server_names.is_empty() {
                "(none)".to_owned()
            } else {
                c.server_names.join(",")
            };
            let from = if c.names_from_san { " (from SAN)" } else { "" };
            let default = if i == 0 { " default" } else { "" };
            out += &format!(
                "          certificate {} names={names}{from}{default}\n",
                c.cert_path.display()
            );
        }
    }
    match &config.admin {
        Some(admin) => {
            out += &format!(
                "admin     http://{}/ (metrics, healthz, readyz, livez)\n",
                admin.address
            )
        }
        None => out += "admin     disabled\n",
    }
    if let Some(fleet) = &config.fleet {
        let peers = match &fleet.discovery {
            weir_proxy::config::FleetDiscovery::Static(peers) => peers
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(","),
            weir_proxy::config::FleetDiscovery::Dns { name, refresh } => {
                format!(
                    "dns:{name} every {}",
                    weir_proxy::config::format_duration(*refresh)
                )
            }
            weir_proxy::config::FleetDiscovery::EndpointSlices { service, namespace } => {
                format!(
                    "endpointslices:{}/{service}",
                    namespace.as_deref().unwrap_or("(pod's namespace)")
                )
            }
        };
        out += &format!(
            "fleet     self={} peers={peers} peer_timeout={} rate_timeout={} ring={}\n",
            fleet.self_addr,
            format_duration(fleet.peer_timeout),
            format_duration(fleet.rate_timeout),
            match fleet.ring {
                RingHash::Weir => "weir",
                RingHash::Ketama => "ketama",
            }
        );
        let factor = fleet
            .balance_factor
            .map_or_else(|| "none".to_owned(), |f| format!("{f}%"));
        let l1 = if fleet.l1_bytes == 0 {
            "off".to_owned()
        } else {
            format!(
                "{} bytes, l1_ttl={}",
                fleet.l1_bytes,
                format_duration(fleet.l1_ttl)
            )
        };
        out += &format!("          hash_balance_factor={factor} l1={l1}\n");
    }
    if let Some(redis) = &config.redis {
        // The URL may carry a password: not printed.
        out += &format!("redis     timeout={}\n", format_duration(redis.timeout));
    }
    for u in &config.upstreams {
        match &u.target {
            UpstreamTarget::Servers(servers) if servers.len() == 1 => {
                out += &format!("upstream  {:<12} {}\n", u.name, servers[0].url);
            }
            UpstreamTarget::Servers(servers) => {
                out += &format!(
                    "upstream  {:<12} {} servers, balance={}\n",
                    u.name,
                    servers.len(),
                    balance_name(&u.balance)
                );
                for s in servers {
                    let limit = s
                        .max_connections
                        .map_or(String::new(), |m| format!(" max_connections={m}"));
                    out += &format!("          server {} weight={}{limit}\n", s.url, s.weight);
                }
            }
            UpstreamTarget::Embedded(origin) => {
                let endpoints = if origin.test_endpoints {
                    ""
                } else {
                    ", test endpoints off"
                };
                out += &format!(
                    "upstream  {:<12} embedded origin, root {}{endpoints}\n",
                    u.name,
                    origin.root.display()
                );
            }
        }
        if let Some(tls) = &u.tls {
            out += &upstream_tls_line(tls);
        }
        let (h2_name, h2) = if u.tls.is_some() {
            ("h2", "HTTP/2 over TLS, ALPN h2")
        } else {
            ("h2c", "HTTP/2, prior knowledge")
        };
        match u.protocol {
            Protocol::Http1 => {}
            Protocol::H2c => out += &format!("          protocol {h2_name} ({h2})\n"),
            Protocol::Auto => {
                out += &format!(
                    "          protocol auto ({h2} for HTTP/2 and gRPC requests, else HTTP/1.1)\n"
                );
            }
        }
        if let Some(h) = &u.health {
            let expect: Vec<String> = h
                .expect
                .iter()
                .map(|&(lo, hi)| {
                    if lo == hi {
                        lo.to_string()
                    } else {
                        format!("{lo}-{hi}")
                    }
                })
                .collect();
            out += &format!(
                "          health GET {} every {} timeout={} expect={} rise={} fall={}\n",
                h.path,
                format_duration(h.interval),
                format_duration(h.timeout),
                expect.join(","),
                h.rise,
                h.fall
            );
        }
        let several = matches!(&u.target, UpstreamTarget::Servers(s) if s.len() > 1);
        let (o, r) = (&u.outlier, &u.retry);
        if several {
            out += &format!(
                "          outlier consecutive_failures={} base_ejection={} max_ejection={} max_ejected_percent={} failure_statuses={}; \
             retry attempts={} budget_percent={} min_retries_per_second={} retry_body_bytes={}\n",
                o.consecutive_failures,
                format_duration(o.base_ejection),
                format_duration(o.max_ejection),
                o.max_ejected_percent,
                o.failure_statuses
                    .iter()
                    .map(|&(lo, hi)| if lo == hi {
                        lo.to_string()
                    } else {
                        format!("{lo}-{hi}")
                    })
                    .collect::<Vec<_>>()
                    .join(","),
                r.attempts,
                r.budget_percent,
                r.min_per_second,
                r.body_bytes
            );
        }
    }
    for r in &config.routes {
        out += &format!(
            "route     host={:<16} prefix={:<12} -> {:<12} strip_prefix={} host_header={} transforms={}\n",
            r.host.as_deref().unwrap_or("*"),
            r.path_prefix,
            config.upstreams[r.upstream].name,
            r.strip_prefix,
            match r.host_header {
                HostHeader::Preserve => "preserve",
                HostHeader::Upstream => "upstream",
            },
            transform_list(&r.transforms),
        );
        if r.cache {
            out += "          cache=on\n";
        }
        if !r.upgrade.is_empty() {
            out += &format!("          upgrade={}\n", r.upgrade.join(","));
        }
        if let Some(rl) = &r.limits.rate_limit {
            out += &format!(
                "          rate_limit requests_per_second={} burst={} key={} scope={}\n",
                rl.requests_per_second,
                rl.burst,
                match &rl.key {
                    HashKey::ClientAddr => "client_addr".to_owned(),
                    HashKey::Header(h) => format!("header:{h}"),
                    HashKey::Cookie(c) => format!("cookie:{c}"),
                },
                match rl.scope {
                    RateLimitScope::Replica => "replica",
                    RateLimitScope::Fleet => "fleet",
                    RateLimitScope::Redis => "redis",
                }
            );
        }
        if r.limits.max_body_bytes.is_some() || r.limits.max_concurrent_requests.is_some() {
            let show = |v: Option<String>| v.unwrap_or_else(|| "none".to_owned());
            out += &format!(
                "          limits max_request_body_bytes={} max_concurrent_requests={}\n",
                show(r.limits.max_body_bytes.map(|n| n.to_string())),
                show(r.limits.max_concurrent_requests.map(|n| n.to_string())),
            );
        }
        if let Some(ssr) = &r.ssr {
            let c = &ssr.compose;
            let source = match &ssr.template_file {
                Some(f) => format!("template_file={}", f.path.display()),
                None => format!("templates=upstream detect={:?}", ssr.detect).to_lowercase(),
            };
            out += &format!(
                "          ssr {source} fragment_timeout={} fragment_total_timeout={} page_timeout={} \
                 max_parallel={} fragment_buffer_bytes={} page_buffer_bytes={} async_stream={} \
                 max_includes={} max_depth={} \
                 cache_fragments={} forward_cookies={}\n",
                format_duration(c.fragment_timeout),
                format_duration(c.fragment_total_timeout),
                format_duration(c.page_timeout),
                c.max_parallel,
                c.fragment_buffer_bytes,
                c.page_buffer_bytes,
                c.async_stream,
                c.max_includes,
                c.max_depth,
                ssr.cache_fragments,
                ssr.forward_cookies,
            );
        }
    }
    if config
        .routes
        .iter()
        .any(|r| r.cache || r.ssr.as_ref().is_some_and(|s| s.cache_fragments))
    {
        let k = &config.cache;
        out += &format!(
            "cache     max_bytes={} max_object_bytes={} fill_hwm={} collapse_wait={} fill_on_client_abort={}\n",
            k.max_bytes,
            k.max_object_bytes,
            k.fill_hwm,
            format_duration(k.collapse_wait),
            k.fill_on_client_abort,
        );
    }
    let (s, c) = (&config.server, &config.client);
    let trusted: Vec<String> = s.trusted_proxies.iter().map(ToString::to_string).collect();
    out += &format!(
        "server    workers={} access_log={} trusted_proxies={} via_pseudonym={}\n",
        s.workers,
        match &s.access_log {
            AccessLogTarget::Stderr => "stderr".to_owned(),
            AccessLogTarget::Off => "off".to_owned(),
            AccessLogTarget::File(path) => path.display().to_string(),
        },
        if trusted.is_empty() {
            "none".to_owned()
        } else {
            trusted.join(",")
        },
        s.via_pseudonym,
    );
    out += &format!(
        "timeouts  header_read={} body_idle={} shutdown_grace={} upgrade_idle={} connect={} response_header={}\n",
        format_duration(s.header_read_timeout),
        format_duration(s.body_idle_timeout),
        format_duration(s.shutdown_grace),
        format_duration(s.upgrade_idle_timeout),
        format_duration(c.connect_timeout),
        format_duration(c.response_header_timeout),
    );
    let l = &s.limits;
    out += &format!(
        "limits    max_request_head_bytes={} max_request_headers={} max_uri_bytes={} \
         max_request_body_bytes={} request_body_min_rate={} request_body_rate_grace={} max_connections={}\n",
        l.max_head_bytes,
        l.max_headers,
        l.max_uri_bytes,
        l.max_body_bytes
            .map_or("none".to_owned(), |n| n.to_string()),
        l.body_min_rate,
        format_duration(l.body_rate_grace),
        l.max_connections,
    );
    out += &format!(
        "pool      pool_idle_timeout={} pool_max_idle_per_host={}\n",
        format_duration(c.pool_idle_timeout),
        c.pool_max_idle_per_host
    );
    for w in config.warnings() {
        out += &format!("warning   {w}\n");
    }
    out
}

/// `weir serve`: run the proxy (and any embedded origin) until SIGINT/SIGTERM;
/// SIGHUP reloads the config, and so does a change of the config's
/// directory when `watch` gives a poll interval. Logs are set up once the
/// config says where the access log goes.
pub fn serve(
    path: Option<&Path>,
    watch: Option<std::time::Duration>,
    log: &logging::Options,
) -> anyhow::Result<()> {
    let mut config = load(path)?;
    let log_guard = log.init(&config.server.access_log)?;
    for w in config.warnings() {
        tracing::warn!("config: {w}");
    }
    let reopener = log_guard.reopener();
    runtime(config.server.workers)?.block_on(async move {
        // Installed before anything listens: from then on SIGHUP reloads
        // instead of ending the process.
        #[cfg(unix)]
        let hangups = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
            .context("cannot listen for SIGHUP")?;
        // SIGUSR1 reopens the access log file (log rotation); without a
        // file it is logged and ignored rather than ending the process.
        #[cfg(unix)]
        {
            let usr1 = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::user_defined1())
                .context("cannot listen for SIGUSR1")?;
            tokio::spawn(reopen_on_usr1(usr1, reopener));
        }
        let mut origins: Vec<OriginHandle> = Vec::new();
        let mut starts = Vec::new();
        let mut embedded = Vec::new();
        for u in &config.upstreams {
            if let UpstreamTarget::Embedded(settings) = &u.target {
                let handle = weir_origin::spawn(
                    SocketAddr::from(([127, 0, 0, 1], 0)),
                    OriginConfig {
                        root: settings.root.clone(),
                        test_endpoints: settings.test_endpoints,
                    },
                )
                .await
                .with_context(|| format!("cannot start the embedded origin of upstream {:?}", u.name))?;
                tracing::info!(upstream = %u.name, addr = %handle.local_addr(), root = %settings.root.display(), test_endpoints = settings.test_endpoints, "embedded origin started");
                starts.push(handle.local_addr());
                embedded.push(weir_proxy::StartedOrigin {
                    upstream: u.name.clone(),
                    addr: handle.local_addr(),
                    settings: settings.clone(),
                });
                origins.push(handle);
            }
        }
        let mut addrs = starts.into_iter();
        config.resolve_embedded(|_| addrs.next().context("embedded origin count mismatch"))?;

        let mut server = Server::bind(&config).await?;
        let source = path.map(Path::to_path_buf);
        let reloader =
            server.enable_reload(Box::new(move || read_config(source.as_deref())), embedded);
        if let (Some(interval), Some(path)) = (watch, path) {
            tracing::info!(config = %path.display(), interval_ms = interval.as_millis() as u64, "watching the config directory for changes");
            tokio::spawn(weir_proxy::watch::watch(
                path.to_path_buf(),
                interval,
                std::sync::Arc::clone(&reloader),
            ));
        }
        #[cfg(unix)]
        tokio::spawn(reload_on_hangup(hangups, reloader));
        #[cfg(not(unix))]
        drop(reloader);
        // `local_addrs` is in config order, one per listener.
        for (addr, spec) in server.local_addrs().iter().zip(&config.listeners) {
            let scheme = if spec.tls.is_some() { "https" } else { "http" };
            tracing::info!("weir listening on {scheme}://{addr}/");
        }
        if let Some(addr) = server.admin_addr() {
            tracing::info!(admin = %addr, "admin endpoint on http://{addr}/metrics, /healthz (= /readyz) and /livez");
        }
        server.run(shutdown_signal()).await?;
        // The proxy has drained (or cut) its requests; nothing the origins
        // still do can reach a client, so stop them at once.
        drop(origins);
        tracing::info!("weir stopped");
        Ok(())
    })
}

/// `weir origin`: run the built-in origin alone.
pub fn origin(listen: SocketAddr, root: PathBuf, workers: Option<usize>) -> anyhow::Result<()> {
    anyhow::ensure!(root.is_dir(), "--root {}: not a directory", root.display());
    let workers = workers.unwrap_or_else(weir_proxy::config::default_workers);
    anyhow::ensure!(
        (1..=weir_proxy::config::MAX_WORKERS).contains(&workers),
        "--workers {workers}: must be 1 to {}",
        weir_proxy::config::MAX_WORKERS
    );
    runtime(workers)?.block_on(async move {
        let listener = tokio::net::TcpListener::bind(listen)
            .await
            .with_context(|| format!("cannot listen on {listen}"))?;
        tracing::info!(
            "weir origin listening on http://{}/ (root {})",
            listener.local_addr()?,
            root.display()
        );
        weir_origin::serve(listener, OriginConfig::new(root), shutdown_signal()).await?;
        Ok(())
    })
}

/// Reopens the access log file on each SIGUSR1.
#[cfg(unix)]
async fn reopen_on_usr1(
    mut signals: tokio::signal::unix::Signal,
    reopener: Option<logging::Reopener>,
) {
    while signals.recv().await.is_some() {
        match &reopener {
            Some(r) => {
                tracing::info!("SIGUSR1 received: reopening the access log file");
                r.reopen();
            }
            None => {
                tracing::info!("SIGUSR1 received: the access log is not a file, nothing to reopen")
            }
        }
    }
}

/// Reloads the config on each SIGHUP (the reloader logs the outcome).
#[cfg(unix)]
async fn reload_on_hangup(
    mut hangups: tokio::signal::unix::Signal,
    reloader: std::sync::Arc<weir_proxy::Reloader>,
) {
    while hangups.recv().await.is_some() {
        tracing::info!("SIGHUP received: reloading the config");
        // Refused configs are logged at ERROR and counted by the reloader.
        let _ = reloader.reload().await;
    }
}

/// Resolves on SIGINT or SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::error!("cannot listen for SIGINT: {e}");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                tracing::error!("cannot listen for SIGTERM: {e}");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => tracing::info!("SIGINT received"),
        () = term => tracing::info!("SIGTERM received"),
    }
}

/// A route's stages as `weir check` prints them: `none`, or the names in
/// body order joined by `,` (`html-rewrite,compress`).
fn transform_list(chain: &weir_transform::chain::ChainSpec) -> String {
    if chain.is_empty() {
        return "none".to_owned();
    }
    let names: Vec<&str> = chain.stages().iter().map(|s| s.name().as_str()).collect();
    names.join(",")
}
