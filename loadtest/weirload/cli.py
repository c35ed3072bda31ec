"""`loadtest/run`: start everything, check it, measure it, report it."""

from __future__ import annotations

import argparse
import datetime
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
from .scenarios import ALL_PEERS, BY_NAME, SCENARIOS, Scenario

REPO = Path(__file__).resolve().parents[2]


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="loadtest/run",
        description="Measure Weir side by side with nginx and HAProxy on this machine (loopback only).",
    )
    p.add_argument("--rounds", type=int, default=3, help="rounds, interleaved across peers (default 3)")
    p.add_argument("--duration", type=float, default=5.0, help="seconds of load per measurement (default 5)")
    p.add_argument("--warmup", type=float, default=1.0, help="seconds of unrecorded load per scenario and peer before its first round (default 1; 0: none)")
    p.add_argument("--scenarios", default=",".join(s.name for s in SCENARIOS), help="comma-separated scenario names or ids (S1..S12; default: all)")
    p.add_argument("--peers", default=",".join(ALL_PEERS), help="comma-separated peers among weir,nginx,haproxy,direct (default: all)")
    p.add_argument("--out", type=Path, help="directory for the report (default loadtest/results; with --smoke, the temp directory)")
    p.add_argument("--name", help="file name stem of the report (default: today's date, YYYY-MM-DD)")
    p.add_argument("--smoke", action="store_true", help="every scenario once for one second, no warm-up, no retakes (for CI)")
    p.add_argument("--keep", action="store_true", help="keep the temp directory (configs, logs, bodies)")
    p.add_argument("--weir", type=Path, default=REPO / "target" / "release" / "weir", help="the weir binary (default target/release/weir)")
    p.add_argument("--no-pin", action="store_true", help="do not pin the measured server to a CPU of its own")
    p.add_argument("--outside-limit", type=float, default=0.15, help="CPU cores used outside the run above which a measurement is disturbed (default 0.15)")
    p.add_argument("--retakes", type=int, default=2, help="times a disturbed measurement is taken again (default 2)")
    p.add_argument("--no-charts", action="store_true", help="skip the SVG charts (no matplotlib needed)")
    args = p.parse_args(argv)
    if args.smoke:
        args.rounds, args.duration, args.warmup, args.retakes = 1, 1.0, 0.0, 0
    if args.rounds < 1 or args.duration < 1 or args.warmup < 0 or args.retakes < 0:
        p.error("--rounds and --duration must be at least 1, --warmup and --retakes at least 0")
    if args.duration > 600 or args.rounds > 100:
        p.error("--duration is at most 600 s and --rounds at most 100: every load loop is bounded")
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
    return args


def require_tools(args: argparse.Namespace) -> None:
    need = {"nginx": "nginx", "curl": "curl", "wrk": "wrk"}
    if "haproxy" in args.peer_list:
        need["haproxy"] = "haproxy"
    if any(s.tool == "h2load" for s in args.scenario_list):
        need["h2load"] = "nghttp2-client"
    missing = [pkg for tool, pkg in need.items() if shutil.which(tool) is None and not Path(f"/usr/sbin/{tool}").exists()]
    if missing:
        sys.exit(f"loadtest/run: missing {', '.join(missing)}; on Debian/Ubuntu: sudo apt-get install -y {' '.join(missing)}")
    if "weir" in args.peer_list and not args.weir.is_file():
        sys.exit(f"loadtest/run: {args.weir} not found; build it first: cargo build --release (or pass --weir PATH)")
    if not args.no_charts:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            sys.exit("loadtest/run: the charts need matplotlib: python3 -m pip install -r loadtest/requirements.txt (or pass --no-charts)")
    # nginx lives in /usr/sbin, which a user's PATH may lack.
    os.environ["PATH"] = os.environ.get("PATH", "") + ":/usr/sbin"


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
        f"weir {rev}",
        _first_line(["nginx", "-v"]).replace("nginx version: ", ""),
        _first_line(["haproxy", "-v"]).split(" - ")[0],
        _first_line(["wrk", "-v"]).split(" [")[0],
        _first_line(["h2load", "--version"]),
    ]
    return {
        "date": datetime.date.today().isoformat(),
        "command": "loadtest/run " + " ".join(shlex.quote(a) for a in argv),
        "machine": f"{os.cpu_count()} CPUs ({model}), Linux {platform.release()}",
        "versions": ", ".join(versions),
        "method": (
            f"{args.rounds} round(s) of {args.duration:g} s per scenario and peer, interleaved (the peer order rotates "
            f"each round), {args.warmup:g} s warm-up before each first round; medians over rounds; "
            f"a measurement with more than {args.outside_limit:g} cores used outside the run is taken again "
            f"(up to {args.retakes} times) and flagged if it stays disturbed"
        ),
        "layout": layout,
        "weir binary": str(args.weir)
        + (" (a debug build: its figures say nothing of Weir's speed)" if "debug" in args.weir.parts else ""),
    }


def progress(i: int, n: int, m: Measurement) -> None:
    print(
        f"[{i:>3}/{n}] round {m.round} {m.scenario} {m.peer}: {report.human(m.rps)} rps, {m.mb_per_s:.1f} MB/s, "
        f"{m.server_cpu_s / m.seconds:.2f} cores, {report.human(m.requests_per_cpu_s)} req/CPU-s, "
        f"p99 {m.p99_ms:.2f} ms, {m.errors} errors, {m.rss_mib:.1f} MiB, outside {m.outside_cores:.2f}"
        + (" DISTURBED" if m.disturbed else ""),
        file=sys.stderr,
        flush=True,
    )


def measure(
    args, s: Scenario, peer, servers, body, round_no: int, tmp: Path, gen_cpus
) -> Measurement:
    """One measurement, taken again while disturbed (up to --retakes)."""
    best: Measurement | None = None
    for attempt in range(1 + args.retakes):
        m = run_once(s, peer, servers.origin, body.path, args.duration, round_no, tmp, gen_cpus)
        m.attempts = attempt + 1
        if best is None or m.outside_cores < best.outside_cores:
            best = m
        if m.outside_cores <= args.outside_limit:
            return m
        print(f"        {s.name} {peer.name}: {m.outside_cores:.2f} cores outside the run, taking it again", file=sys.stderr)
    assert best is not None
    best.disturbed = True
    best.attempts = 1 + args.retakes
    return best


def run(args: argparse.Namespace, argv: list[str], tmp: Path) -> int:
    server_cpus, other_cpus = procs.cpu_layout(not args.no_pin)
    if other_cpus is not None:
        os.sched_setaffinity(0, other_cpus)
        layout = (
            f"measured server pinned to CPU {sorted(server_cpus)}; origin, load generator (1 thread) and this "
            f"script on CPU {sorted(other_cpus)}"
        )
    else:
        layout = "no CPU pinning; load generator 1 thread"
    print(f"loadtest: work directory {tmp}", file=sys.stderr)
    www, ssr_root = tmp / "www", tmp / "ssr"
    bodies = bodies_mod.generate(www, ssr_root)
    servers = peers_mod.start(args.peer_list, tmp, www, ssr_root, args.weir, server_cpus, other_cpus)
    o = servers.origin.ports["h1"]
    check_mod.check_origin_chunked(f"http://127.0.0.1:{o}{bodies['chunked-1m'].path}", tmp)

    results = report.Results(args.scenario_list, args.peer_list)
    plan: list[tuple[Scenario, str]] = []
    for s in args.scenario_list:
        for name in args.peer_list:
            if name not in s.peers:
                continue
            try:
                check_mod.check(servers.peers[name], s, bodies[s.body], tmp)
                plan.append((s, name))
            except check_mod.CheckFailed as e:
                results.failures[(s.name, name)] = f"check: {e}"
                print(f"check failed: {s.name} {name}: {e}", file=sys.stderr)
    print(f"loadtest: {len(plan)} scenario/peer pairs checked byte for byte", file=sys.stderr)

    total = len(plan) * args.rounds
    done = 0
    warmed: set[tuple[str, str]] = set()
    for round_no in range(1, args.rounds + 1):
        for s in args.scenario_list:
            names = [n for sc, n in plan if sc is s]
            shift = (round_no - 1) % max(1, len(names))
            for name in names[shift:] + names[:shift]:
                done += 1
                if (s.name, name) in results.failures:
                    continue
                peer = servers.peers[name]
                try:
                    if args.warmup > 0 and (s.name, name) not in warmed:
                        run_once(s, peer, servers.origin, bodies[s.body].path, args.warmup, 0, tmp, other_cpus)
                        warmed.add((s.name, name))
                    m = measure(args, s, peer, servers, bodies[s.body], round_no, tmp, other_cpus)
                except LoadError as e:
                    results.failures[(s.name, name)] = f"load: {str(e).splitlines()[0]}"
                    print(f"load failed: {s.name} {name}: {e}", file=sys.stderr)
                    continue
                results.measurements.append(m)
                progress(done, total, m)

    out = args.out or (tmp / "results" if args.smoke else REPO / "loadtest" / "results")
    out.mkdir(parents=True, exist_ok=True)
    meta = metadata(args, layout, argv)
    stem = args.name or meta["date"]
    made = [] if args.no_charts else report.charts(results, out, stem)
    text = report.markdown(results, meta, made)
    (out / f"{stem}.md").write_text(text)
    report.write_json(results, meta, out / f"{stem}.json")
    summary = text.split("## Summary (ratio to nginx)", 1)[1].split("\n## ", 1)[0]
    print("Summary (ratio to nginx):" + summary.rstrip())
    where = out / f"{stem}.md"
    gone = not args.keep and tmp in out.resolve().parents
    print(
        f"\nreport: {where}"
        + (f" (charts: {', '.join(n for _, n in made)})" if made else "")
        + (" in the temp directory, removed at exit (--out DIR or --keep keeps it)" if gone else "")
    )

    empty = [m for m in results.measurements if m.requests == 0]
    if results.failures or empty:
        for (s, p), why in results.failures.items():
            print(f"FAILED {s} {p}: {why}", file=sys.stderr)
        for m in empty:
            print(f"FAILED {m.scenario} {m.peer}: no request completed", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    require_tools(args)
    tmp = Path(tempfile.mkdtemp(prefix="weir-loadtest-"))
    procs.install_signal_handlers()
    started = time.monotonic()
    try:
        return run(args, argv, tmp)
    except procs.StartError as e:
        print(f"loadtest/run: {e}", file=sys.stderr)
        return 2
    except check_mod.CheckFailed as e:
        print(f"loadtest/run: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("loadtest/run: interrupted; stopping everything", file=sys.stderr)
        return 130
    finally:
        procs.stop_all()
        if args.keep:
            print(f"loadtest: kept {tmp}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
        print(f"loadtest: {time.monotonic() - started:.0f} s", file=sys.stderr)
