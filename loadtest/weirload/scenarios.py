"""What a run measures: one entry per scenario, in report order."""

from __future__ import annotations

from dataclasses import dataclass

ALL_PEERS = ("weir", "nginx", "haproxy", "direct")

# With --compare, a second Weir binary runs as this peer wherever weir does.
WEIR_BASE = "weir-base"


@dataclass(frozen=True)
class Scenario:
    """One load shape against one body.

    `kind` names the listener it uses (`h1`, `h2c`, or `static`: the peer as
    an origin, not a proxy); `tool` the load generator (`wrk` or `h2load`);
    `check` how the body is verified before measuring (`plain`: the bytes;
    `gzip`: gzip-encoded, and the bytes once decoded; `cache`: the second
    answer is a cache hit; `chunked`: the bytes, and the origin sends no
    length); `unit` the headline figure (`rps`, or `MB/s` for throughput).
    `id` is its short name (`S1`...), in the order the loadtest issue lists
    them; `--scenarios` takes either.
    """

    id: str
    name: str
    title: str
    body: str
    conns: int
    kind: str = "h1"
    tool: str = "wrk"
    streams: int = 1
    headers: tuple[tuple[str, str], ...] = ()
    peers: tuple[str, ...] = ALL_PEERS
    check: str = "plain"
    unit: str = "rps"


SCENARIOS = [
    Scenario("S1", "get-1k-c32", "1 KiB GET, keep-alive, 32 connections", "1k", 32),
    Scenario("S2", "get-1k-c256", "1 KiB GET, keep-alive, 256 connections", "1k", 256),
    Scenario("S3", "get-16k-c32", "16 KiB GET, keep-alive, 32 connections", "16k", 32),
    Scenario("S4", "get-100m-c4", "100 MiB GET, keep-alive, 4 connections (throughput)", "100m", 4, unit="MB/s"),
    Scenario(
        "S5",
        "close-1k-c32",
        "1 KiB GET with `Connection: close` (a new connection per request), 32 at once",
        "1k",
        32,
        headers=(("Connection", "close"),),
    ),
    Scenario(
        "S6",
        "h2c-1k-c32x10",
        "1 KiB GET over h2c (prior knowledge), 32 connections x 10 streams (h2load)",
        "1k",
        32,
        kind="h2c",
        tool="h2load",
        streams=10,
    ),
    Scenario(
        "S7",
        "chunked-1m-c8",
        "1 MiB chunked response (no Content-Length from the origin), 8 connections",
        "chunked-1m",
        8,
        check="chunked",
    ),
    Scenario(
        "S8",
        "ssr-8-c32",
        "SSR page of 8 fragments (Weir ESI includes vs nginx SSI, same page), 32 connections",
        "ssr-page",
        32,
        peers=("weir", "nginx"),
    ),
    Scenario(
        "S9",
        "cache-1k-c32",
        "1 KiB cache hit (Weir's cache vs nginx proxy_cache vs HAProxy's cache), 32 connections",
        "cache-1k",
        32,
        peers=("weir", "nginx", "haproxy"),
        check="cache",
    ),
    Scenario(
        "S10",
        "gzip-16k-c32",
        "16 KiB HTML gzip-compressed by the proxy at level 5 (Weir compress vs nginx gzip), 32 connections",
        "gzip-16k",
        32,
        headers=(("Accept-Encoding", "gzip"),),
        peers=("weir", "nginx"),
        check="gzip",
    ),
    Scenario(
        "S11",
        "origin-1k-c32",
        "1 KiB static file from the server itself: `weir origin` vs nginx (no proxying), 32 connections",
        "1k",
        32,
        kind="static",
        peers=("weir", "nginx"),
    ),
    Scenario(
        "S12",
        "origin-bytes-1k-c32",
        "`weir origin`'s `/bytes/1024` endpoint vs nginx serving the same 1 KiB as a file, 32 connections",
        "pattern-1k",
        32,
        kind="static",
        peers=("weir", "nginx"),
    ),
    Scenario(
        "S13",
        "group3-1k-c32",
        "1 KiB GET over an upstream of three servers, round robin, keep-alive, 32 connections",
        "group-1k",
        32,
        peers=("weir", "nginx", "haproxy"),
    ),
]

BY_NAME = {s.name: s for s in SCENARIOS} | {s.id: s for s in SCENARIOS}


def takes_part(scenario: Scenario, peer: str) -> bool:
    """Whether `peer` is measured in `scenario` (`weir-base` wherever `weir` is)."""
    return peer in scenario.peers or (peer == WEIR_BASE and "weir" in scenario.peers)
