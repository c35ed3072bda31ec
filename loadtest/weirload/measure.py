"""One measurement: a bounded load run against one peer, and what it cost.

The load generator (wrk, or h2load for h2c) runs for the scenario's
duration. Around it, /proc gives the CPU time of the measured server's
processes (utime + stime), of the origin and of the whole machine; the
generator's own CPU time comes from its rusage. What the machine spent
beyond those is *outside* CPU (other programs, steal); a measurement with
too much of it is disturbed.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from . import procs
from .peers import Peer
from .scenarios import Scenario

WRK_REPORT = """-- Written by loadtest/run: the summary as one JSON line (latency in us).
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'LOADTEST {"requests":%d,"duration_us":%d,"bytes":%d,"connect":%d,"read":%d,' ..
    '"write":%d,"status":%d,"timeout":%d,"p50":%d,"p90":%d,"p99":%d,"p999":%d}\\n',
    summary.requests, summary.duration, summary.bytes, e.connect, e.read, e.write,
    e.status, e.timeout, latency:percentile(50), latency:percentile(90),
    latency:percentile(99), latency:percentile(99.9)))
end
"""


@dataclass
class Measurement:
    """What one run of one scenario against one peer gave.

    Times are seconds unless named otherwise; latencies are ms; `rss_mib`
    is the sum of the peak RSS of the server's processes during the run.
    """

    scenario: str
    peer: str
    round: int
    requests: int
    seconds: float
    rps: float
    mb_per_s: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    p999_ms: float
    errors: int
    server_cpu_s: float
    origin_cpu_s: float
    generator_cpu_s: float
    outside_cores: float
    rss_mib: float
    disturbed: bool = False
    attempts: int = 1

    @property
    def requests_per_cpu_s(self) -> float:
        return self.requests / self.server_cpu_s if self.server_cpu_s > 0 else 0.0

    @property
    def mb_per_cpu_s(self) -> float:
        return self.mb_per_s * self.seconds / self.server_cpu_s if self.server_cpu_s > 0 else 0.0

    def to_json(self) -> dict:
        d = asdict(self)
        d["requests_per_cpu_s"] = self.requests_per_cpu_s
        return d


class LoadError(RuntimeError):
    """The load generator failed, or the server died under load."""


@dataclass
class Load:
    requests: int
    seconds: float
    bytes: int
    errors: int
    p50_us: float
    p90_us: float
    p99_us: float
    p999_us: float


def wrk_argv(url: str, s: Scenario, duration: float, script: Path) -> list[str]:
    argv = ["wrk", "-t1", f"-c{s.conns}", f"-d{max(1, round(duration))}s", "--timeout", "30s", "-s", str(script)]
    for name, value in s.headers:
        argv += ["-H", f"{name}: {value}"]
    return argv + [url]


def parse_wrk(stdout: str) -> Load:
    """The JSON line the `done` hook printed."""
    for line in stdout.splitlines():
        if line.startswith("LOADTEST "):
            r = json.loads(line[len("LOADTEST ") :])
            errors = r["connect"] + r["read"] + r["write"] + r["status"] + r["timeout"]
            return Load(
                requests=r["requests"],
                seconds=r["duration_us"] / 1e6,
                bytes=r["bytes"],
                errors=errors,
                p50_us=r["p50"],
                p90_us=r["p90"],
                p99_us=r["p99"],
                p999_us=r["p999"],
            )
    raise LoadError(f"wrk printed no summary:\n{stdout[-2000:]}")


def h2load_argv(url: str, s: Scenario, duration: float, log: Path) -> list[str]:
    argv = ["h2load", "-t1", f"-c{s.conns}", f"-m{s.streams}", "-D", str(max(1, round(duration))), f"--log-file={log}"]
    for name, value in s.headers:
        argv += ["-H", f"{name}: {value}"]
    return argv + [url]


def percentile(sorted_values: list[float], p: float) -> float:
    """Nearest-rank percentile `p` (0-100) of an ascending list; 0 if empty."""
    if not sorted_values:
        return 0.0
    rank = max(1, min(len(sorted_values), int(-(-p * len(sorted_values) // 100))))
    return sorted_values[rank - 1]


def parse_h2load(stdout: str, log_text: str) -> Load:
    """The totals h2load prints, and latencies from its per-request log
    (lines of start time, status, duration in us, tab-separated)."""
    m = re.search(r"finished in ([\d.]+)(m?s)", stdout)
    req = re.search(
        r"requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, (\d+) failed, (\d+) errored, (\d+) timeout",
        stdout,
    )
    codes = re.search(r"status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx", stdout)
    traffic = re.search(r"traffic: .*?\((\d+)\) total", stdout)
    if not (m and req and codes and traffic):
        raise LoadError(f"h2load printed no summary:\n{stdout[-2000:]}")
    seconds = float(m.group(1)) / (1000 if m.group(2) == "ms" else 1)
    succeeded, failed, errored, timeout = (int(req.group(i)) for i in (4, 5, 6, 7))
    non_2xx = sum(int(codes.group(i)) for i in (2, 3, 4))
    durations = []
    for line in log_text.splitlines():
        parts = line.split("\t")
        if len(parts) == 3 and parts[2].isdigit():
            durations.append(float(parts[2]))
    durations.sort()
    return Load(
        requests=succeeded,
        seconds=seconds,
        bytes=int(traffic.group(1)),
        errors=failed + errored + timeout + non_2xx,
        p50_us=percentile(durations, 50),
        p90_us=percentile(durations, 90),
        p99_us=percentile(durations, 99),
        p999_us=percentile(durations, 99.9),
    )


def run_once(
    scenario: Scenario,
    peer: Peer,
    origin: Peer,
    body_path: str,
    duration: float,
    round_no: int,
    workdir: Path,
    generator_cpus: set[int] | None,
) -> Measurement:
    """Runs the load once and accounts for its CPU and memory.

    Raises `LoadError` when the generator fails or the server is gone after it.
    """
    endpoint = peer.endpoint(scenario.kind)
    assert endpoint is not None
    server, port = endpoint
    url = f"http://127.0.0.1:{port}{body_path}"
    if scenario.tool == "wrk":
        script = workdir / "report.lua"
        if not script.exists():
            script.write_text(WRK_REPORT)
        argv = wrk_argv(url, scenario, duration, script)
    else:
        log = workdir / "h2load.log"
        log.unlink(missing_ok=True)
        argv = h2load_argv(url, scenario, duration, log)

    server_pids = server.tree()
    origin_pids = [] if server is origin.servers["h1"] else origin.servers["h1"].tree()
    procs.reset_hwm(server_pids)
    busy0, _ = procs.system_busy_ticks()
    s0, o0, me0 = procs.cpu_ticks(server_pids), procs.cpu_ticks(origin_pids), os.times()
    t0 = time.monotonic()
    child = procs.run_child(argv, workdir, generator_cpus, timeout=duration + 60)
    wall = time.monotonic() - t0
    busy1, _ = procs.system_busy_ticks()
    s1, o1, me1 = procs.cpu_ticks(server_pids), procs.cpu_ticks(origin_pids), os.times()
    rss = procs.hwm_kib(server_pids) / 1024

    if not server.alive():
        raise LoadError(f"{server.name} ended during the run ({server.exit_text()}); its log:\n{server.log_tail()}")
    if server is not origin.servers["h1"] and not origin.servers["h1"].alive():
        raise LoadError(f"the origin ended during the run ({origin.servers['h1'].exit_text()})")
    if child.timed_out:
        raise LoadError(f"{argv[0]} did not finish within {duration + 60:.0f} s")
    if child.returncode != 0:
        raise LoadError(f"{argv[0]} failed with status {child.returncode}: {child.stderr.strip()[-500:]}")
    if scenario.tool == "wrk":
        load = parse_wrk(child.stdout)
    else:
        load = parse_h2load(child.stdout, (workdir / "h2load.log").read_text(errors="replace"))

    if load.errors:
        raise LoadError(
            f"{load.errors} errors (connect, read, write, timeout or a status other than 2xx/3xx) "
            f"among {load.requests} answers: not a fair measurement"
        )
    if load.requests == 0:
        raise LoadError("no request completed")
    hz = procs.CLK_TCK
    server_cpu = (s1 - s0) / hz
    origin_cpu = (o1 - o0) / hz
    me = (me1.user - me0.user) + (me1.system - me0.system)
    outside = (busy1 - busy0) / hz - server_cpu - origin_cpu - child.cpu_seconds - me
    seconds = load.seconds or wall
    return Measurement(
        scenario=scenario.name,
        peer=peer.name,
        round=round_no,
        requests=load.requests,
        seconds=seconds,
        rps=load.requests / seconds,
        mb_per_s=load.bytes / seconds / 1e6,
        p50_ms=load.p50_us / 1000,
        p90_ms=load.p90_us / 1000,
        p99_ms=load.p99_us / 1000,
        p999_ms=load.p999_us / 1000,
        errors=load.errors,
        server_cpu_s=server_cpu,
        origin_cpu_s=origin_cpu,
        generator_cpu_s=child.cpu_seconds,
        outside_cores=max(0.0, outside / wall),
        rss_mib=rss,
    )


def median_of(ms: list[Measurement]) -> dict[str, float]:
    """Medians over rounds of each figure (errors and requests summed)."""
    keys = ["rps", "mb_per_s", "p50_ms", "p90_ms", "p99_ms", "p999_ms", "server_cpu_s", "outside_cores", "rss_mib"]
    out = {k: statistics.median(getattr(m, k) for m in ms) for k in keys}
    out["requests_per_cpu_s"] = statistics.median(m.requests_per_cpu_s for m in ms)
    out["mb_per_cpu_s"] = statistics.median(m.mb_per_cpu_s for m in ms)
    out["generator_cores"] = statistics.median(m.generator_cpu_s / m.seconds for m in ms)
    out["server_cores"] = statistics.median(m.server_cpu_s / m.seconds for m in ms)
    out["origin_cores"] = statistics.median(m.origin_cpu_s / m.seconds for m in ms)
    out["errors"] = sum(m.errors for m in ms)
    out["requests"] = sum(m.requests for m in ms)
    out["disturbed"] = sum(1 for m in ms if m.disturbed)
    out["rounds"] = len(ms)
    return out
