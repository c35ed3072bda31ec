"""`loadtest/profile`: what one request costs Weir, counted.

Starts the neutral origin and one Weir (the same config `loadtest/run`
writes, one worker, pinned), sends a fixed number of requests with h2load
(HTTP/1.1 keep-alive, or h2c), and counts, per request:

- `syscalls`: system calls of every Weir thread (`strace -c -f`, attached
  for the load only);
- `allocs`: heap allocations (valgrind's DHAT; Weir runs under it, so the
  load is slow); the count of a run of `--requests` minus that of a run of
  a tenth as many, divided by the difference, so start-up does not count;
- `instr`: user-space instructions (valgrind's callgrind, counted the same
  way as `allocs`): repeatable whatever else the machine does;
- `perf`: a CPU profile of the load (`perf record -g`), its top functions.

Traffic stays on 127.0.0.1; every process is stopped by its pid.
"""

from __future__ import annotations

import argparse
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from . import bodies as bodies_mod
from . import peers as peers_mod
from . import procs

REPO = Path(__file__).resolve().parents[2]


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="loadtest/profile", description=__doc__.split("\n\n")[0])
    p.add_argument("--weir", type=Path, default=REPO / "target" / "release" / "weir")
    p.add_argument("--requests", type=int, default=20000, help="requests per count (default 20000)")
    p.add_argument("--conns", type=int, default=32)
    p.add_argument("--h2c", action="store_true", help="h2c with 10 streams per connection instead of HTTP/1.1")
    p.add_argument("--path", default="/1k.bin", help="what to GET (default /1k.bin: 1 KiB)")
    p.add_argument("--tools", default="syscalls,allocs,instr", help="comma-separated: syscalls, allocs, instr, perf")
    p.add_argument("--keep", action="store_true")
    a = p.parse_args(argv)
    if not 100 <= a.requests <= 1_000_000:
        p.error("--requests takes 100 to 1000000")
    a.tool_list = [t for t in a.tools.split(",") if t]
    bad = [t for t in a.tool_list if t not in ("syscalls", "allocs", "instr", "perf")]
    if bad or not a.tool_list:
        p.error(f"unknown tool {bad}; known: syscalls, allocs, instr, perf")
    return a


def h2load(a: argparse.Namespace, port: int, n: int, cpus) -> float:
    """Sends `n` requests; returns the seconds it took. Raises on errors."""
    argv = ["h2load", "-t1", f"-c{a.conns}", f"-n{n}"]
    argv += ["-m10"] if a.h2c else ["--h1"]
    argv.append(f"http://127.0.0.1:{port}{a.path}")
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, preexec_fn=lambda: _pin(cpus))
    m = re.search(r"requests: (\d+) total, \d+ started, \d+ done, (\d+) succeeded", done.stdout)
    t = re.search(r"finished in ([\d.]+)(m?s)", done.stdout)
    if not m or int(m.group(2)) != n or not t:
        raise RuntimeError(f"h2load did not complete {n} requests:\n{done.stdout[-1500:]}{done.stderr[-500:]}")
    return float(t.group(1)) / (1000 if t.group(2) == "ms" else 1)


def _pin(cpus) -> None:
    import os

    if cpus is not None:
        os.sched_setaffinity(0, cpus)


def start_weir(a, tmp: Path, www: Path, ssr_root: Path, origin, cpus, wrapper: list[str] | None = None):
    port = procs.free_port()
    conf = tmp / "weir.toml"
    conf.write_text(peers_mod.weir_config(ssr_root, origin.ports["h1"], port, peers_mod.group_ports(origin)))
    argv = (wrapper or []) + [str(a.weir), "--log-level", "warn", "serve", "--config", str(conf)]
    p = procs.start("weir", argv, tmp / "weir.log", cpus)
    procs.wait_http(p, f"http://127.0.0.1:{port}{a.path}", timeout=60)
    return p, port


def count_syscalls(a, tmp, www, ssr_root, origin, server_cpus, other_cpus) -> str:
    p, port = start_weir(a, tmp, www, ssr_root, origin, server_cpus)
    h2load(a, port, a.requests // 10, other_cpus)  # warm the pools
    out = tmp / "strace.txt"
    strace = subprocess.Popen(["strace", "-c", "-f", "-o", str(out), "-p", str(p.pid)], stderr=subprocess.DEVNULL)
    time.sleep(0.5)
    h2load(a, port, a.requests, other_cpus)
    strace.send_signal(signal.SIGINT)
    strace.wait(timeout=30)
    p.stop()
    lines = out.read_text().splitlines()
    rows = []
    total = 0
    for line in lines:
        parts = line.split()
        if len(parts) >= 5 and parts[0][0].isdigit() and not line.startswith("100.00"):
            calls = int(parts[3])
            rows.append((parts[-1], calls))
        if line.rstrip().endswith("total"):
            total = int(line.split()[3])
    rows.sort(key=lambda r: -r[1])
    per = ", ".join(f"{name} {calls / a.requests:.2f}" for name, calls in rows[:8])
    return f"syscalls per request: {total / a.requests:.2f} ({per})"


def count_allocs(a, tmp, www, ssr_root, origin, server_cpus, other_cpus) -> str:
    if shutil.which("valgrind") is None:
        return "allocs: valgrind missing (apt-get install -y valgrind)"
    totals = []
    for n in (a.requests // 10, a.requests):
        out = tmp / f"dhat-{n}.out"
        wrapper = ["valgrind", "--tool=dhat", f"--dhat-out-file={out}"]
        p, port = start_weir(a, tmp, www, ssr_root, origin, server_cpus, wrapper)
        h2load(a, port, n, other_cpus)
        p.stop(grace=60)
        text = p.log.read_text(errors="replace")
        m = re.search(r"Total:\s+([\d,]+) bytes in ([\d,]+) blocks", text)
        if not m:
            return f"allocs: no DHAT summary in the log:\n{text[-800:]}"
        totals.append((int(m.group(2).replace(",", "")), int(m.group(1).replace(",", ""))))
    (b1, y1), (b2, y2) = totals
    dn = a.requests - a.requests // 10
    sites = top_sites(tmp / f"dhat-{a.requests // 10}.out", tmp / f"dhat-{a.requests}.out", dn)
    return f"allocations per request: {(b2 - b1) / dn:.1f} ({(y2 - y1) / dn:.0f} bytes); by site:\n" + sites


def top_sites(small: Path, big: Path, dn: int, n: int = 14) -> str:
    """The allocation sites whose count grew most between the two DHAT runs,
    per request, each named by its first frame inside Weir's crates."""
    import json

    def sites(path: Path) -> dict[str, tuple[int, int]]:
        d = json.loads(path.read_text())
        frames = d["ftbl"]
        out: dict[str, tuple[int, int]] = {}
        for pp in d["pps"]:
            names = [frames[i] for i in pp["fs"]]
            ours = [f for f in names if "weir_" in f] or names
            key = " <- ".join(_short(f) for f in (names[1:2] + ours[:2]))
            blocks, size = out.get(key, (0, 0))
            out[key] = (blocks + pp["tbk"], size + pp["tb"])
        return out

    a, b = sites(small), sites(big)
    grown = sorted(((b[k][0] - a.get(k, (0, 0))[0], b[k][1] - a.get(k, (0, 0))[1], k) for k in b), reverse=True)
    return "\n".join(f"  {blocks / dn:5.2f} ({size / dn:6.0f} B)  {k}" for blocks, size, k in grown[:n] if blocks > 0)


def _short(frame: str) -> str:
    # "0x4A2B: hyper::proto::h1::io::Buffered<T,B>::poll_read_from_io (io.rs:210)" -> function (file:line)
    frame = frame.split(": ", 1)[-1]
    return re.sub(r"<[^<>]*>", "", re.sub(r"<[^<>]*>", "", frame))[:110]


def count_instructions(a, tmp, www, ssr_root, origin, server_cpus, other_cpus) -> str:
    """User-space instructions per request (valgrind's callgrind: counted,
    not timed, so the same build gives the same count on a busy machine)."""
    if shutil.which("valgrind") is None:
        return "instructions: valgrind missing (apt-get install -y valgrind)"
    totals = []
    n_small, n_big = a.requests // 10, a.requests
    for n in (n_small, n_big):
        out = tmp / f"callgrind-{n}.out"
        wrapper = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"]
        p, port = start_weir(a, tmp, www, ssr_root, origin, server_cpus, wrapper)
        h2load(a, port, n, other_cpus)
        p.stop(grace=60)
        m = re.search(r"Collected : (\d+)", p.log.read_text(errors="replace"))
        if not m:
            return f"instructions: no callgrind summary:\n{p.log_tail()}"
        totals.append(int(m.group(1)))
    per = (totals[1] - totals[0]) / (n_big - n_small)
    return f"instructions per request (user space, callgrind): {per:,.0f}"


def profile_cpu(a, tmp, www, ssr_root, origin, server_cpus, other_cpus) -> str:
    p, port = start_weir(a, tmp, www, ssr_root, origin, server_cpus)
    h2load(a, port, a.requests // 10, other_cpus)
    data = tmp / "perf.data"
    perf = subprocess.Popen(["perf", "record", "-F", "999", "--call-graph", "dwarf,16384", "-o", str(data), "-p", str(p.pid)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)
    h2load(a, port, a.requests, other_cpus)
    perf.send_signal(signal.SIGINT)
    perf.wait(timeout=60)
    p.stop()
    def report(*extra: str) -> list[str]:
        text = subprocess.run(
            ["perf", "report", "-i", str(data), "--stdio", "--no-children", "-g", "none", *extra],
            capture_output=True,
            text=True,
            timeout=300,
        ).stdout
        return [l for l in text.splitlines() if l.strip() and not l.startswith("#")]

    by_dso = report("--sort", "dso")
    user = report("--sort", "sym", "--percent-limit", "0.4", "--dsos", a.weir.name)
    out = REPO / "target" / "loadtest-profile.txt"
    out.write_text("\n".join(report("--percent-limit", "0.2")) + "\n")
    return (
        "perf, self time by object:\n" + "\n".join(by_dso[:8])
        + "\nperf, Weir's own functions (self time):\n" + "\n".join(user[:30])
        + f"\n(full report: {out})"
    )


def main(argv: list[str] | None = None) -> int:
    a = parse_args(sys.argv[1:] if argv is None else argv)
    tmp = Path(tempfile.mkdtemp(prefix="weir-profile-"))
    procs.install_signal_handlers()
    server_cpus, other_cpus = procs.cpu_layout(True)
    try:
        www, ssr_root = tmp / "www", tmp / "ssr"
        bodies_mod.generate(www, ssr_root)
        origin = peers_mod.start_origin(tmp, www, other_cpus)
        kind = "h2c" if a.h2c else "HTTP/1.1"
        print(f"profile: {a.weir}, {a.requests} GET {a.path} over {kind}, {a.conns} connections", file=sys.stderr)
        tools = {"syscalls": count_syscalls, "allocs": count_allocs, "instr": count_instructions, "perf": profile_cpu}
        for t in a.tool_list:
            print(tools[t](a, tmp, www, ssr_root, origin, server_cpus, other_cpus), flush=True)
        return 0
    except (procs.StartError, RuntimeError) as e:
        print(f"loadtest/profile: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    finally:
        procs.stop_all()
        if a.keep:
            print(f"kept {tmp}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
