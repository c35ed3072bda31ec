"""The bodies every peer serves, generated into the run's directory.

Each body is made from a fixed seed, so its bytes and SHA-256 are the same
on every run and every machine; the check before measuring compares what
each peer sends against them.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass
from pathlib import Path

KIB = 1024
MIB = 1024 * 1024

WORDS = (
    "weir stream batch chunk upstream downstream route listener backpressure "
    "proxy origin fragment template cache pool socket header trailer body page "
    "render compose vector write read pull push share broadcast water mark"
).split()

# How the same SSR page includes a fragment in each syntax.
INCLUDE = {
    "weir": '<esi:include src="/frag/{name}.html"/>',
    "nginx": '<!--# include virtual="/frag/{name}.html" -->',
}
FRAGMENTS = [f"f{i}" for i in range(1, 9)]


@dataclass(frozen=True)
class Body:
    """A body a scenario fetches: its URL path and what it must be."""

    path: str
    size: int
    sha256: str


def _random_bytes(seed: int, size: int, avoid: bytes | None = None) -> bytes:
    data = random.Random(seed).randbytes(size)
    if avoid:
        # nginx's SSI filter (which makes the chunked endpoint) would act on
        # "<!--#"; a body that holds no "<" never has it.
        data = data.replace(avoid, b">")
    return data


def weir_pattern(size: int) -> bytes:
    """The first `size` bytes (at most 1 MiB) of `weir origin`'s `/bytes/{n}`
    pattern, computed here from its documented definition
    (crates/weir-origin/src/pattern.rs): xorshift64* seeded with
    0x5745_4952_2D4F_5247, each step emitting `x * 0x2545_F491_4F6C_DD1D`
    as 8 little-endian bytes."""
    mask = (1 << 64) - 1
    x, out = 0x5745_4952_2D4F_5247, bytearray()
    while len(out) < size:
        x ^= x >> 12
        x ^= (x << 25) & mask
        x ^= x >> 27
        out += ((x * 0x2545_F491_4F6C_DD1D) & mask).to_bytes(8, "little")
    return bytes(out[:size])


def _text(seed: int, size: int) -> str:
    rng = random.Random(seed)
    out, n = [], 0
    while n < size:
        line = "<p>" + " ".join(rng.choice(WORDS) for _ in range(12)) + ".</p>\n"
        out.append(line)
        n += len(line)
    return "".join(out)[:size]


def _fragment(name: str, seed: int) -> str:
    return f'<section class="fragment" id="{name}">\n{_text(seed, 1500)}</section>\n'


def _template(syntax: str) -> str:
    head = '<!DOCTYPE html>\n<html>\n<head><meta charset="utf-8"><title>loadtest page</title></head>\n<body>\n'
    parts = [head]
    for i, name in enumerate(FRAGMENTS):
        parts.append(f"<h2>part {i + 1}</h2>\n{_text(100 + i, 300)}\n")
        parts.append(INCLUDE[syntax].format(name=name) + "\n")
    parts.append("</body>\n</html>\n")
    return "".join(parts)


def _write(path: Path, data: bytes) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return hashlib.sha256(data).hexdigest()


def generate(www: Path, ssr_root: Path) -> dict[str, Body]:
    """Writes the bodies under `www` (the origin's document root) and the SSR
    templates under `ssr_root/<syntax>/ssr/page.html`; returns them by name.

    `ssr-page` is the composed page every SSR peer must send: the template
    with each include replaced by its fragment, byte for byte.
    """
    bodies: dict[str, Body] = {}

    def add(name: str, path: str, data: bytes) -> None:
        bodies[name] = Body(path, len(data), _write(www / path.lstrip("/"), data))

    add("1k", "/1k.bin", _random_bytes(1, KIB))
    add("16k", "/16k.bin", _random_bytes(2, 16 * KIB))
    add("100m", "/100m.bin", _random_bytes(3, 100 * MIB))
    add("chunked-1m", "/chunked/1m.bin", _random_bytes(4, MIB, avoid=b"<"))
    add("cache-1k", "/cache/1k.bin", _random_bytes(5, KIB))
    add("gzip-16k", "/gz/page.html", _text(6, 16 * KIB).encode())
    # What `weir origin` answers to /bytes/1024; nginx serves it as a file.
    add("pattern-1k", "/bytes/1024", weir_pattern(KIB))
    add("group-1k", "/group/1k.bin", _random_bytes(7, KIB))

    fragments = {name: _fragment(name, 200 + i) for i, name in enumerate(FRAGMENTS)}
    for name, text in fragments.items():
        _write(www / "frag" / f"{name}.html", text.encode())
    for syntax in INCLUDE:
        _write(ssr_root / syntax / "ssr" / "page.html", _template(syntax).encode())
    composed = _template("weir")
    for name, text in fragments.items():
        composed = composed.replace(INCLUDE["weir"].format(name=name), text, 1)
    data = composed.encode()
    bodies["ssr-page"] = Body("/ssr/page.html", len(data), hashlib.sha256(data).hexdigest())
    return bodies
