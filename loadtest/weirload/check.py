"""The check before measuring: each peer sends each body byte for byte.

A request goes out with curl, the way the load generator will send it
(HTTP/1.1 or h2c, the scenario's header fields); the body's SHA-256 must be
the generated body's. A peer that fails is reported as failed for that
scenario and not measured.
"""

from __future__ import annotations

import gzip
import hashlib
import subprocess
from pathlib import Path

from .bodies import Body
from .peers import Peer
from .scenarios import Scenario


class CheckFailed(Exception):
    """What was wrong with a peer's answer, in one line."""


def _fetch(url: str, scenario: Scenario, out: Path) -> tuple[int, str, dict[str, str]]:
    head = out.with_suffix(".head")
    argv = ["curl", "-sS", "--noproxy", "*", "--max-time", "60", "-o", str(out), "-D", str(head)]
    argv += ["-w", "%{http_code} %{http_version}"]
    argv.append("--http2-prior-knowledge" if scenario.kind == "h2c" else "--http1.1")
    for name, value in scenario.headers:
        argv += ["-H", f"{name}: {value}"]
    argv.append(url)
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=90)
    except subprocess.TimeoutExpired as e:
        raise CheckFailed(f"curl {url}: no answer in 90 s") from e
    if done.returncode != 0:
        raise CheckFailed(f"curl {url}: {done.stderr.strip() or f'exit status {done.returncode}'}")
    status, version = done.stdout.split()
    fields: dict[str, str] = {}
    for line in head.read_text(errors="replace").splitlines()[1:]:
        name, sep, value = line.partition(":")
        if sep:
            fields[name.strip().lower()] = value.strip()
    return int(status), version, fields


def check(peer: Peer, scenario: Scenario, body: Body, workdir: Path) -> None:
    """Raises `CheckFailed` unless `peer` answers `scenario` with `body`."""
    endpoint = peer.endpoint(scenario.kind)
    if endpoint is None:
        raise CheckFailed(f"{peer.name} has no {scenario.kind} listener")
    url = f"http://127.0.0.1:{endpoint[1]}{body.path}"
    out = workdir / f"check-{peer.name}-{scenario.name}.body"
    rounds = 2 if scenario.check == "cache" else 1
    for attempt in range(rounds):
        status, version, fields = _fetch(url, scenario, out)
        if status != 200:
            raise CheckFailed(f"GET {body.path}: status {status}, not 200")
        if scenario.kind == "h2c" and version != "2":
            raise CheckFailed(f"GET {body.path}: answered over HTTP/{version}, not h2c")
        data = out.read_bytes()
        if scenario.check == "gzip":
            coding = fields.get("content-encoding", "none")
            if coding != "gzip":
                raise CheckFailed(f"GET {body.path}: Content-Encoding {coding}, not gzip")
            try:
                data = gzip.decompress(data)
            except (OSError, EOFError) as e:
                raise CheckFailed(f"GET {body.path}: the gzip body does not decode: {e}") from e
        digest = hashlib.sha256(data).hexdigest()
        if digest != body.sha256:
            raise CheckFailed(
                f"GET {body.path}: {len(data)} bytes with SHA-256 {digest[:16]}..., "
                f"expected {body.size} bytes with {body.sha256[:16]}..."
            )
        if scenario.check == "cache" and attempt == 1:
            if peer.cache_status is None:
                raise CheckFailed(f"{peer.name} has no cache")
            name, hit = peer.cache_status
            got = fields.get(name.lower(), "(none)")
            if not got.upper().startswith(hit):
                raise CheckFailed(f"GET {body.path} twice: the second answer has {name}: {got}, not {hit}")
    out.unlink(missing_ok=True)
    out.with_suffix(".head").unlink(missing_ok=True)


def check_origin_chunked(url: str, workdir: Path) -> None:
    """Raises `CheckFailed` unless the origin sends `url` chunked (the
    chunked scenario would measure nothing otherwise)."""
    out = workdir / "origin-chunked.body"
    head = out.with_suffix(".head")
    try:
        subprocess.run(
            ["curl", "-sS", "--noproxy", "*", "--http1.1", "-o", str(out), "-D", str(head), url],
            check=True,
            capture_output=True,
            timeout=60,
        )
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as e:
        raise CheckFailed(f"the origin does not answer {url}: {e}") from e
    text = head.read_text(errors="replace").lower()
    if "transfer-encoding: chunked" not in text or "content-length" in text:
        raise CheckFailed(f"the origin sends {url} with a length, not chunked")
