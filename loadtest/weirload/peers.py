"""The servers of a run: the neutral origin and the peers measured against it.

Each peer is started from a config written here, so every setting that
matters for fairness is in one place:

- the neutral origin: nginx, 1 worker, no access log, sendfile, serving the
  generated bodies (and `/chunked/`, which nginx's SSI filter sends without
  a length, in chunks);
- `nginx`: nginx as a proxy, 1 worker, keep-alive to the upstream, access log
  off, responses buffered in memory only (`proxy_max_temp_file_size 0`: no
  spill to disk);
- `haproxy`: HAProxy, `nbthread 1`, `http-reuse always`;
- `weir`: `target/release/weir` with `[server] workers = 1`, logging at
  `warn` (no access log, as for the others);
- `direct`: no proxy: the load goes straight to a second copy of the
  neutral origin, placed on the CPU the proxies get (the baseline).

Every peer speaks HTTP/1.1 and h2c (prior knowledge). With `pin`, the
measured peer runs on one CPU of its own (see `procs.cpu_layout`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from . import procs

# Idle upstream connections each proxy may keep: more than the largest
# scenario's connection count, so no proxy closes connections it will need.
UPSTREAM_IDLE = 512


@dataclass
class Peer:
    """A measured server: its processes and the ports of its listeners.

    `ports` maps a listener kind (`h1`, `h2c`, `static`) to a port; `servers`
    maps the same kinds to the process that serves it, whose CPU time and
    peak RSS are the peer's.
    """

    name: str
    ports: dict[str, int] = field(default_factory=dict)
    servers: dict[str, procs.Proc] = field(default_factory=dict)
    # Each cache holds at most 16 MiB (HAProxy allocates its own up front).
    # The response field that says whether the answer came from the cache,
    # and the value that means a hit.
    cache_status: tuple[str, str] | None = None

    def endpoint(self, kind: str) -> tuple[procs.Proc, int] | None:
        if kind not in self.ports:
            return None
        return self.servers[kind], self.ports[kind]


def _nginx_common(tmp: Path, name: str) -> str:
    user = "user root;\n" if os.geteuid() == 0 else ""
    state = tmp / name
    for sub in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"):
        (state / sub).mkdir(parents=True, exist_ok=True)
    return f"""{user}worker_processes 1;
daemon off;
pid {state}/nginx.pid;
error_log {state}/error.log warn;
worker_rlimit_nofile 16384;
events {{ worker_connections 8192; }}
"""


def _nginx_http_common(tmp: Path, name: str) -> str:
    state = tmp / name
    return f"""    access_log off;
    sendfile on;
    tcp_nodelay on;
    keepalive_timeout 75s;
    keepalive_requests 1000000;
    client_body_temp_path {state}/client_body;
    proxy_temp_path {state}/proxy;
    fastcgi_temp_path {state}/fastcgi;
    uwsgi_temp_path {state}/uwsgi;
    scgi_temp_path {state}/scgi;
    types {{ text/html html; application/octet-stream bin; }}
    default_type application/octet-stream;
"""


def origin_config(
    tmp: Path, www: Path, h1: int, h2c: int, state: str = "origin", more_h1: tuple[int, ...] = ()
) -> str:
    """The neutral origin: nginx serving `www` (its pid file and temp
    directories under `tmp/state`), over HTTP/1.1 on `h1` and each of
    `more_h1` (the other servers of the three-server upstream)."""
    more = "".join(f"        listen 127.0.0.1:{p} backlog=4096;\n" for p in more_h1)
    return (
        _nginx_common(tmp, state)
        + "http {\n"
        + _nginx_http_common(tmp, state)
        + f"""    server {{
        listen 127.0.0.1:{h1} backlog=4096;
        listen 127.0.0.1:{h2c} http2 backlog=4096;
{more}        root {www};
        # The SSI filter drops Content-Length: this body goes out chunked.
        location /chunked/ {{ ssi on; ssi_types *; }}
        location /cache/ {{ add_header Cache-Control "public, max-age=86400"; }}
    }}
}}
"""
    )


def nginx_config(
    tmp: Path, www: Path, ssr_root: Path, origin: int, ports: dict[str, int], group: list[int]
) -> str:
    """nginx as a reverse proxy to the origin, and to the `group` ports
    (round robin) under `/group/`; also serves `www` itself on the
    `static` port (the origin scenario)."""
    options = """proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_max_temp_file_size 0;"""
    proxy = "proxy_pass http://origin;\n            " + options
    servers = "".join(f"        server 127.0.0.1:{p};\n" for p in group)
    return (
        _nginx_common(tmp, "nginx")
        + "http {\n"
        + _nginx_http_common(tmp, "nginx")
        + f"""    upstream origin {{
        server 127.0.0.1:{origin};
        keepalive {UPSTREAM_IDLE};
        keepalive_requests 1000000;
        keepalive_timeout 75s;
    }}
    upstream group {{
{servers}        keepalive {UPSTREAM_IDLE};
        keepalive_requests 1000000;
        keepalive_timeout 75s;
    }}
    proxy_cache_path {tmp}/nginx/cache levels=1:2 keys_zone=loadtest:16m max_size=16m inactive=1h use_temp_path=off;
    server {{
        listen 127.0.0.1:{ports["h1"]} backlog=4096;
        listen 127.0.0.1:{ports["h2c"]} http2 backlog=4096;
        location / {{
            {proxy}
        }}
        location /group/ {{
            proxy_pass http://group;
            {options}
        }}
        location /cache/ {{
            {proxy}
            proxy_cache loadtest;
            add_header X-Cache-Status $upstream_cache_status;
        }}
        location /gz/ {{
            {proxy}
            gzip on;
            gzip_comp_level 5;
            gzip_proxied any;
            gzip_min_length 256;
            gzip_vary on;
        }}
        location /ssr/ {{
            root {ssr_root / "nginx"};
            ssi on;
        }}
    }}
    server {{
        listen 127.0.0.1:{ports["static"]} backlog=4096;
        root {www};
    }}
}}
"""
    )


def haproxy_config(origin: int, ports: dict[str, int], group: list[int]) -> str:
    """HAProxy, one thread, connection reuse always, a small RAM cache for
    `/cache/` (answers carry `X-Cache-Status: HIT` when it answered), and
    the `group` ports round robin under `/group/`."""
    servers = "".join(f"    server g{i} 127.0.0.1:{p}\n" for i, p in enumerate(group, 1))
    return f"""global
    nbthread 1
    maxconn 8000

defaults
    mode http
    timeout connect 5s
    timeout client 60s
    timeout server 60s
    timeout http-keep-alive 75s
    http-reuse always

cache loadtest
    total-max-size 16
    max-object-size 1048576
    max-age 86400

frontend fe
    bind 127.0.0.1:{ports["h1"]}
    bind 127.0.0.1:{ports["h2c"]} proto h2
    use_backend cached if {{ path_beg /cache/ }}
    use_backend group if {{ path_beg /group/ }}
    default_backend origin

backend origin
    server origin 127.0.0.1:{origin}

backend cached
    http-request cache-use loadtest
    http-response cache-store loadtest
    http-after-response set-header X-Cache-Status HIT if {{ res.cache_hit }}
    server origin 127.0.0.1:{origin}

backend group
    balance roundrobin
{servers}"""


def weir_config(ssr_root: Path, origin: int, h1: int, group: list[int]) -> str:
    """Weir as a reverse proxy to the origin: one worker thread, the same
    routes as nginx's locations (`/group` to the `group` ports, round
    robin)."""
    servers = ", ".join(f'"http://127.0.0.1:{p}"' for p in group)
    return f"""# Written by loadtest/run.
[[listener]]
address = "127.0.0.1:{h1}"

[server]
workers = 1

[admin]
enabled = false

[client]
pool_max_idle_per_host = {UPSTREAM_IDLE}

[cache]
max_bytes = 16777216

[[upstream]]
name = "origin"
url = "http://127.0.0.1:{origin}"

[[upstream]]
name = "group"
servers = [{servers}]

[[route]]
path_prefix = "/"
upstream = "origin"

[[route]]
path_prefix = "/group"
upstream = "group"

[[route]]
path_prefix = "/cache"
upstream = "origin"
cache = true

[[route]]
path_prefix = "/gz"
upstream = "origin"
transforms = ["compress"]

[route.compress]
codings = ["gzip"]
gzip_level = 5
min_length = 256

[[route]]
path_prefix = "/ssr"
upstream = "origin"

[route.ssr]
template_file = "{ssr_root / "weir" / "ssr" / "page.html"}"
"""


def group_ports(origin: Peer) -> list[int]:
    """The three origin ports the proxies balance over under `/group/`:
    one nginx serving the same files on each, so the figure is the proxy's
    cost of balancing, not a difference between servers."""
    return [origin.ports["h1"], origin.ports["g2"], origin.ports["g3"]]


def start_origin(tmp: Path, www: Path, cpus: set[int] | None) -> Peer:
    """Starts the neutral origin on `cpus` and waits until it answers.

    Raises `procs.StartError` (quoting its log) when it does not start.
    """
    ports = {"h1": procs.free_port(), "h2c": procs.free_port(), "g2": procs.free_port(), "g3": procs.free_port()}
    conf = tmp / "origin.conf"
    conf.write_text(origin_config(tmp, www, ports["h1"], ports["h2c"], more_h1=(ports["g2"], ports["g3"])))
    o = procs.start("origin", ["nginx", "-p", str(tmp), "-c", str(conf)], tmp / "origin.log", cpus)
    procs.wait_http(o, f"http://127.0.0.1:{ports['h1']}/1k.bin")
    return Peer("origin", ports, {"h1": o, "h2c": o})


def start_peer(
    name: str,
    kind: str,
    origin: Peer,
    tmp: Path,
    www: Path,
    ssr_root: Path,
    weir_bin: Path,
    cpus: set[int] | None,
) -> Peer:
    """Starts peer `name` for scenarios of listener `kind` (`static`: the
    peer as an origin; otherwise as a proxy to `origin`) on `cpus`, and
    waits until it answers.

    Raises `procs.StartError` naming the peer and quoting its log when it
    does not start.
    """
    o = origin.ports["h1"]
    group = group_ports(origin)
    ports = {"h1": procs.free_port(), "h2c": procs.free_port()}
    if name == "direct":
        # A second copy of the origin, placed and measured like a proxy.
        conf = tmp / "direct.conf"
        conf.write_text(origin_config(tmp, www, ports["h1"], ports["h2c"], state="direct"))
        p = procs.start("direct", ["nginx", "-p", str(tmp), "-c", str(conf)], tmp / "direct.log", cpus)
        peer = Peer(name, ports, {"h1": p, "h2c": p})
    elif name == "nginx":
        ports["static"] = procs.free_port()
        conf = tmp / "nginx.conf"
        conf.write_text(nginx_config(tmp, www, ssr_root, o, ports, group))
        p = procs.start("nginx", ["nginx", "-p", str(tmp), "-c", str(conf)], tmp / "nginx.log", cpus)
        peer = Peer(name, ports, {"h1": p, "h2c": p, "static": p}, ("X-Cache-Status", "HIT"))
    elif name == "haproxy":
        conf = tmp / "haproxy.cfg"
        conf.write_text(haproxy_config(o, ports, group))
        p = procs.start("haproxy", ["haproxy", "-db", "-f", str(conf)], tmp / "haproxy.log", cpus)
        peer = Peer(name, ports, {"h1": p, "h2c": p}, ("X-Cache-Status", "HIT"))
    elif name in ("weir", "weir-base") and kind == "static":
        port = procs.free_port()
        argv = [str(weir_bin), "--log-level", "warn", "origin", "--listen", f"127.0.0.1:{port}"]
        argv += ["--root", str(www), "--workers", "1"]
        p = procs.start(f"{name}-origin", argv, tmp / f"{name}-origin.log", cpus)
        procs.wait_http(p, f"http://127.0.0.1:{port}/1k.bin")
        return Peer(name, {"static": port}, {"static": p})
    elif name in ("weir", "weir-base"):
        ports["h2c"] = ports["h1"]  # Weir serves both on one listener.
        conf = tmp / f"{name}.toml"
        conf.write_text(weir_config(ssr_root, o, ports["h1"], group))
        argv = [str(weir_bin), "--log-level", "warn", "serve", "--config", str(conf)]
        p = procs.start(name, argv, tmp / f"{name}.log", cpus)
        peer = Peer(name, ports, {"h1": p, "h2c": p}, ("X-Cache", "HIT"))
    else:
        raise ValueError(f"unknown peer {name!r}")
    procs.wait_http(peer.servers["h1"], f"http://127.0.0.1:{ports['h1']}/1k.bin")
    return peer
