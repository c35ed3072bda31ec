"""`loadtest/run`: start everything, check it, measure it, report it."""

from __future__ import annotations

import argparse
import datetime
import math
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from . import bodies as bodies_mod
from . import check as check_mod
from . import peers as peers_mod
from . import procs, report
from .measure import LoadError, Measurement, run_once
from .scenarios import ALL_PEERS, BY_NAME, SCENARIOS, WEIR_BASE, Scenario, takes_part

REPO = Path(__file__).resolve().parents[2]
DEFAULTS = {"rounds": 3, "duration": 5.0, "warmup": 1.0, "retakes": 2}
MAX_WARMUP_S = 60
MAX_RETAKES = 10


class Usage(Exception):
    """Something the user must fix before a run can start (exit status 2)."""


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="loadtest/run",
        description="Measure Weir side by side with nginx and HAProxy on this machine (loopback only).",
    )
    p.add_argument("--rounds", type=int, help="rounds per scenario, interleaved across peers (default 3, at most 100)")
    p.add_argument("--duration", type=float, help="seconds of load per measurement (default 5, 1 to 600)")
    p.add_argument(
        "--warmup",
        type=float,
        help=f"seconds of unrecorded load per scenario and peer before its first round (default 1; 0: none; at most {MAX_WARMUP_S})",
    )
    p.add_argument("--scenarios", default=",".join(s.name for s in SCENARIOS), help="comma-separated scenario names or ids (S1..S13; default: all)")
    p.add_argument("--peers", default=",".join(ALL_PEERS), help="comma-separated peers among weir,nginx,haproxy,direct (default: all)")
    p.add_argument("--out", type=Path, help="directory for the report (default loadtest/results; with --smoke, target/loadtest-smoke)")
    p.add_argument("--name", help="file name stem of the report, replaced if it exists (default: today's date, YYYY-MM-DD, with the time added if that report exists)")
    p.add_argument("--smoke", action="store_true", help="every scenario once for one second, no warm-up, no retakes (for CI)")
    p.add_argument("--keep", action="store_true", help="keep the temp directory (configs, logs, bodies)")
    p.add_argument("--weir", type=Path, default=REPO / "target" / "release" / "weir", help="the weir binary (default target/release/weir)")
    p.add_argument(
        "--compare",
        type=Path,
        help="a second weir binary, measured as the peer weir-base beside weir with the same config (e.g. the build before a change)",
    )
    p.add_argument("--no-pin", action="store_true", help="do not pin the measured server to a CPU of its own")
    p.add_argument("--outside-limit", type=float, default=0.15, help="CPU cores used outside the run above which a measurement is disturbed (default 0.15)")
    p.add_argument("--retakes", type=int, help=f"times a disturbed measurement is taken again (default 2, at most {MAX_RETAKES})")
    p.add_argument("--no-charts", action="store_true", help="skip the SVG charts (no matplotlib needed)")
    args = p.parse_args(argv)
    given = [k for k in DEFAULTS if getattr(args, k) is not None]
    if args.smoke and given:
        p.error(f"--smoke sets one round of 1 s with no warm-up and no retakes; it takes no --{', --'.join(given)}")
    for key, value in DEFAULTS.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.smoke:
        args.rounds, args.duration, args.warmup, args.retakes = 1, 1.0, 0.0, 0
    for key in ("duration", "warmup", "outside_limit"):
        if not math.isfinite(getattr(args, key)):
            p.error(f"--{key.replace('_', '-')} must be a number")
    if not (1 <= args.rounds <= 100 and 1 <= args.duration <= 600):
        p.error("--rounds takes 1 to 100 and --duration 1 to 600 s: every load loop is bounded")
    if not (0 <= args.warmup <= MAX_WARMUP_S and 0 <= args.retakes <= MAX_RETAKES):
        p.error(f"--warmup takes 0 to {MAX_WARMUP_S} s and --retakes 0 to {MAX_RETAKES}")
    if not 0 <= args.outside_limit <= (os.cpu_count() or 1):
        p.error("--outside-limit takes 0 up to the number of CPUs")
    if args.name is not None and (not args.name or "/" in args.name or args.name.startswith(".")):
        p.error("--name is a file name stem: no '/', not empty, not starting with '.'")
    names = [n for n in args.scenarios.split(",") if n]
    unknown = [n for n in names if n not in BY_NAME]
    if unknown or not names:
        p.error(f"unknown scenario {', '.join(unknown) or '(none given)'}; known: {', '.join(f'{s.id} {s.name}' for s in SCENARIOS)}")
    args.scenario_list = list(dict.fromkeys(BY_NAME[n] for n in names))
    peer_names = [n for n in args.peers.split(",") if n]
    bad = [n for n in peer_names if n not in ALL_PEERS]
    if bad or not peer_names or len(set(peer_names)) != len(peer_names):
        p.error(f"--peers takes distinct names among {', '.join(ALL_PEERS)}; got {args.peers!r}")
    args.peer_list = [n for n in ALL_PEERS if n in peer_names]
    if args.compare is not None:
        if "weir" not in args.peer_list:
            p.error("--compare measures a second weir beside weir: keep weir in --peers")
        args.compare = args.compare.expanduser().resolve()
        args.peer_list.insert(args.peer_list.index("weir") + 1, WEIR_BASE)
    if not any(takes_part(s, n) for s in args.scenario_list for n in args.peer_list):
        p.error("none of these peers takes part in these scenarios: nothing to measure")
    args.weir = args.weir.expanduser().resolve()
    return args


def require_tools(args: argparse.Namespace) -> None:
    """Raises Usage naming what is missing: tools, the weir binary, matplotlib."""
    # Every request of the run goes to 127.0.0.1 directly.
    for var in list(os.environ):
        if var.lower() in ("http_proxy", "https_proxy", "all_proxy", "no_proxy"):
            del os.environ[var]
    # nginx and haproxy live in /usr/sbin, which a user's PATH may lack.
    os.environ["PATH"] = os.environ.get("PATH", "") + ":/usr/sbin"
    need = {"nginx": "nginx", "curl": "curl", "wrk": "wrk"}
    if "haproxy" in args.peer_list:
        need["haproxy"] = "haproxy"
    if any(s.tool == "h2load" for s in args.scenario_list):
        need["h2load"] = "nghttp2-client"
    missing = [pkg for tool, pkg in need.items() if shutil.which(tool) is None]
    if missing:
        raise Usage(f"missing {', '.join(missing)}; on Debian/Ubuntu: apt-get install -y {' '.join(missing)}")
    if "weir" in args.peer_list and not (args.weir.is_file() and os.access(args.weir, os.X_OK)):
        raise Usage(f"{args.weir} is not an executable file; build it first: cargo build --release (or pass --weir PATH)")
    if args.compare is not None and not (args.compare.is_file() and os.access(args.compare, os.X_OK)):
        raise Usage(f"--compare {args.compare} is not an executable file")
    if not args.no_charts:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise Usage(
                "the charts need matplotlib: python3 -m venv target/loadtest-venv && "
                "target/loadtest-venv/bin/pip install -r loadtest/requirements.txt (loadtest/run then uses it), "
                "or pass --no-charts"
            ) from None


def output_paths(args: argparse.Namespace) -> tuple[Path, str]:
    """The report's directory (created, and checked writable) and file stem.

    Without --name the stem is today's date, with the time of day added when
    a report of that name exists: a run never replaces an earlier one unless
    told to with --name.
    """
    out = args.out or (REPO / "target" / "loadtest-smoke" if args.smoke else REPO / "loadtest" / "results")
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".loadtest-write-probe"
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        raise Usage(f"--out {out}: cannot write there: {e.strerror or e}") from e
    stem = args.name
    if stem is None:
        now = datetime.datetime.now()
        stem = now.date().isoformat()
        if (out / f"{stem}.md").exists():
            stem = now.strftime("%Y-%m-%d-%H%M%S")
    return out, stem


def _first_line(argv: list[str]) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return "?"
    text = (done.stdout + done.stderr).strip().splitlines()
    return text[0].strip() if text else "?"


def metadata(args: argparse.Namespace, layout: str, argv: list[str]) -> dict[str, str]:
    model = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    rev = _first_line(["git", "-C", str(REPO), "describe", "--always", "--dirty"])
    versions = [
        _first_line([str(args.weir), "--version"]) if "weir" in args.peer_list else "weir not run",
        *([f"weir-base: {_first_line([str(args.compare), '--version'])} ({args.compare})"] if args.compare else []),
        _first_line(["nginx", "-v"]).replace("nginx version: ", ""),
        _first_line(["haproxy", "-v"]).split(" - ")[0],
        _first_line(["wrk", "-v"]).split(" [")[0],
        _first_line(["h2load", "--version"]),
    ]
    return {
        "date": datetime.date.today().isoformat(),
        "command": "loadtest/run " + " ".join(shlex.quote(a) for a in argv),
        "checkout": f"{REPO} at {rev}",
        "machine": f"{os.cpu_count()} CPUs ({model}), Linux {platform.release()}",
        "versions": ", ".join(versions),
        "method": (
            f"per scenario, every peer started afresh and checked, then {args.rounds} round(s) of {args.duration:g} s "
            f"per peer, interleaved (the peer order rotates each round), after {args.warmup:g} s of warm-up per peer; "
            f"medians over rounds; a measurement with more than {args.outside_limit:g} cores used outside the run "
            f"is taken again (up to {args.retakes} times) and flagged if it stays disturbed; one with errors fails"
        ),
        "layout": layout,
        "weir binary": str(args.weir)
        + (" (a debug build: its figures say nothing of Weir's speed)" if "debug" in args.weir.parts else ""),
    }


def progress(i: int, n: int, m: Measurement) -> None:
    print(
        f"[{i:>3}/{n}] round {m.round} {m.scenario} {m.peer}: {report.human(m.rps)} rps, {m.mb_per_s:.1f} MB/s, "
        f"{m.server_cpu_s / m.seconds:.2f} cores, {report.human(m.requests_per_cpu_s)} req/CPU-s, "
        f"p99 {m.p99_ms:.2f} ms, {m.rss_mib:.1f} MiB, outside {m.outside_cores:.2f}"
        + (" DISTURBED" if m.disturbed else ""),
        file=sys.stderr,
        flush=True,
    )


# Seconds of a run taken again because no request completed in a shorter one.
LONG_ENOUGH_S = 5.0


def measure(args, s: Scenario, peer, origin, body, round_no: int, tmp: Path, gen_cpus) -> Measurement:
    """One measurement, taken again while disturbed (up to --retakes)."""
    best: Measurement | None = None
    attempts = 1 + args.retakes
    for attempt in range(1, attempts + 1):
        try:
            m = run_once(s, peer, origin, body.path, args.duration, round_no, tmp, gen_cpus)
        except LoadError as e:
            # A short run (--smoke's 1 s) on a busy machine can end before
            # one 100 MiB response finished: not a failure of the peer.
            # Taken again, once, long enough for one.
            if "no request completed" not in str(e) or args.duration >= LONG_ENOUGH_S:
                raise
            print(f"        {s.name} {peer.name}: no request completed in {args.duration:g} s, taking it again for {LONG_ENOUGH_S} s", file=sys.stderr)
            m = run_once(s, peer, origin, body.path, LONG_ENOUGH_S, round_no, tmp, gen_cpus)
        m.attempts = attempt
        if best is None or m.outside_cores < best.outside_cores:
            best = m
        if m.outside_cores <= args.outside_limit:
            return m
        if attempt < attempts:
            print(f"        {s.name} {peer.name}: {m.outside_cores:.2f} cores outside the run, taking it again", file=sys.stderr)
    assert best is not None
    best.disturbed = True
    best.attempts = attempts
    return best


class Run:
    """One run: the settings, the generated bodies and what was found."""

    def __init__(self, args: argparse.Namespace, tmp: Path):
        self.args = args
        self.tmp = tmp
        self.server_cpus, self.other_cpus = procs.cpu_layout(not args.no_pin)
        self.www, self.ssr_root = tmp / "www", tmp / "ssr"
        self.bodies = bodies_mod.generate(self.www, self.ssr_root)
        self.results = report.Results(args.scenario_list, args.peer_list)
        self.plan = [(s, n) for s in args.scenario_list for n in args.peer_list if takes_part(s, n)]
        self.done = 0
        self.finished = 0

    def fail(self, s: Scenario, name: str, why: str) -> None:
        self.results.failures[(s.name, name)] = why
        print(f"FAILED {s.name} {name}: {why}", file=sys.stderr)

    def scenario(self, s: Scenario) -> None:
        """Starts the origin and the scenario's peers afresh (so each peer's
        memory is this scenario's), checks them, warms them up and measures
        them in interleaved rounds; stops them all at the end."""
        a = self.args
        names = [n for n in a.peer_list if takes_part(s, n)]
        try:
            origin = peers_mod.start_origin(self.tmp, self.www, self.other_cpus)
            if s.check == "chunked":
                check_mod.check_origin_chunked(f"http://127.0.0.1:{origin.ports['h1']}{self.bodies[s.body].path}", self.tmp)
            peers = {}
            for name in names:
                try:
                    weir_bin = a.compare if name == WEIR_BASE else a.weir
                    peer = peers_mod.start_peer(
                        name, s.kind, origin, self.tmp, self.www, self.ssr_root, weir_bin, self.server_cpus
                    )
                    check_mod.check(peer, s, self.bodies[s.body], self.tmp)
                    peers[name] = peer
                except procs.StartError as e:
                    self.fail(s, name, f"start: {e}")
                except check_mod.CheckFailed as e:
                    self.fail(s, name, f"check: {e}")
            total = len(self.plan) * a.rounds
            for name, peer in list(peers.items()):
                if a.warmup > 0:
                    try:
                        run_once(s, peer, origin, self.bodies[s.body].path, a.warmup, 0, self.tmp, self.other_cpus)
                    except LoadError as e:
                        self.fail(s, name, f"warm-up: {str(e).splitlines()[0]}")
                        del peers[name]
            order = list(peers)
            for round_no in range(1, a.rounds + 1):
                shift = (round_no - 1) % max(1, len(order))
                for name in order[shift:] + order[:shift]:
                    self.done += 1
                    if (s.name, name) in self.results.failures:
                        continue
                    try:
                        m = measure(a, s, peers[name], origin, self.bodies[s.body], round_no, self.tmp, self.other_cpus)
                    except LoadError as e:
                        self.fail(s, name, f"load: {str(e).splitlines()[0]}")
                        continue
                    self.results.measurements.append(m)
                    progress(self.done, total, m)
        finally:
            procs.stop_all(final=False)
            self.finished += len(names)
            self.done = self.finished * a.rounds


def run(args: argparse.Namespace, argv: list[str], tmp: Path) -> int:
    out, stem = output_paths(args)
    r = Run(args, tmp)
    if r.other_cpus is not None:
        os.sched_setaffinity(0, r.other_cpus)
        layout = (
            f"measured server pinned to CPU {sorted(r.server_cpus)}; origin, load generator (1 thread) and this "
            f"script on CPU {sorted(r.other_cpus)}"
        )
    else:
        layout = "no CPU pinning; load generator 1 thread"
    print(f"loadtest: work directory {tmp}; {len(r.plan)} scenario/peer pairs", file=sys.stderr)
    for s in args.scenario_list:
        r.scenario(s)

    meta = metadata(args, layout, argv)
    made = [] if args.no_charts else report.charts(r.results, out, stem)
    text = report.markdown(r.results, meta, made)
    (out / f"{stem}.md").write_text(text)
    report.write_json(r.results, meta, out / f"{stem}.json")
    summary = text.split("## Summary (ratio to nginx)", 1)[1].split("\n## ", 1)[0]
    print("Summary (ratio to nginx):" + summary.rstrip())
    print(f"\nreport: {out / (stem + '.md')}" + (f" (charts: {', '.join(n for _, n in made)})" if made else ""))
    if r.results.failures:
        print(f"{len(r.results.failures)} scenario/peer pairs failed: see the report", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    try:
        require_tools(args)
        output_paths(args)
    except Usage as e:
        print(f"loadtest/run: {e}", file=sys.stderr)
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="weir-loadtest-"))
    keep = args.keep
    procs.install_signal_handlers()
    started = time.monotonic()
    try:
        return run(args, argv, tmp)
    except (procs.StartError, check_mod.CheckFailed) as e:
        print(f"loadtest/run: {e}", file=sys.stderr)
        keep = True
        return 2
    except KeyboardInterrupt:
        print("loadtest/run: interrupted; stopping everything", file=sys.stderr)
        return 130
    finally:
        procs.stop_all()
        if keep:
            print(f"loadtest: kept {tmp}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
        print(f"loadtest: {time.monotonic() - started:.0f} s", file=sys.stderr)
