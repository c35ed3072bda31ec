"""The run's report: a markdown file, SVG charts and the raw measurements.

Every figure is shown with its ratio to nginx in the same scenario (the
machine's speed varies from run to run; ratios measured side by side in one
run are what carries over).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from .measure import Measurement, median_of
from .scenarios import Scenario, takes_part

BASELINE = "nginx"
COLORS = {"weir": "#3b6fb6", "weir-base": "#9ab8e6", "nginx": "#3a9a5b", "haproxy": "#d08a2c", "direct": "#8c8c8c"}


@dataclass
class Results:
    """Everything a run found, in the order it ran."""

    scenarios: list[Scenario]
    peers: list[str]
    measurements: list[Measurement] = field(default_factory=list)
    # (scenario, peer) -> why it was not measured.
    failures: dict[tuple[str, str], str] = field(default_factory=dict)

    def aggregate(self) -> dict[str, dict[str, dict[str, float]]]:
        """scenario -> peer -> medians over rounds."""
        out: dict[str, dict[str, dict[str, float]]] = {}
        for s in self.scenarios:
            for p in self.peers:
                ms = [m for m in self.measurements if m.scenario == s.name and m.peer == p]
                if ms and (s.name, p) not in self.failures:
                    out.setdefault(s.name, {})[p] = median_of(ms)
        return out


def headline(s: Scenario, agg: dict[str, float]) -> float:
    return agg["mb_per_s"] if s.unit == "MB/s" else agg["rps"]


def ratio(value: float, base: float | None) -> str:
    if base is None or base <= 0:
        return ""
    return f" ({value / base:.2f}x)"


def human(n: float) -> str:
    if n >= 10_000:
        return f"{n / 1000:.1f}k"
    if n >= 100:
        return f"{n:.0f}"
    return f"{n:.2f}" if n < 10 else f"{n:.1f}"


def ratio_cell(value: float | None, base: float | None) -> str:
    if value is None or base is None or base <= 0:
        return "—"
    return f"{value / base:.2f}"


def markdown(results: Results, meta: dict[str, str], charts: list[tuple[str, str]]) -> str:
    """The report as markdown; `charts` are (title, file name) pairs."""
    agg = results.aggregate()
    others = [p for p in results.peers if p != BASELINE and any(takes_part(s, p) for s in results.scenarios)]
    lines = [f"# Load test: {', '.join(results.peers)} ({meta['date']})", ""]
    lines += [f"- {k}: {v}" for k, v in meta.items() if k != "date"]
    lines += [
        "",
        "Ratios are to nginx in the same scenario and run (1.00 = as nginx). For rps, MB/s and "
        "requests per CPU-second higher is better; for latency and RSS lower is better. "
        "\"req/CPU-s\" is requests served per second of the measured server's CPU time "
        "(utime + stime of all its processes); \"cores\" is CPU time per second of the run: the server's, the "
        "origin's, the load generator's, and what the machine spent outside the run.",
        "",
        "## Summary (ratio to nginx)",
        "",
    ]
    head = ["scenario"]
    for p in others:
        head += [f"{p} rps", f"{p} req/CPU-s", f"{p} peak RSS"]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" + "---:|" * (len(head) - 1)]
    for s in results.scenarios:
        row = agg.get(s.name, {})
        base = row.get(BASELINE)
        cells = [f"{s.id} `{s.name}`"]
        for p in others:
            a = row.get(p)
            if not takes_part(s, p):
                cells += ["", "", ""]
            elif a is None or base is None:
                cells += ["—", "—", "—"]
            else:
                mark = "*" if a["disturbed"] or base["disturbed"] else ""
                cells += [
                    ratio_cell(headline(s, a), headline(s, base)) + mark,
                    ratio_cell(a["requests_per_cpu_s"], base["requests_per_cpu_s"]) + mark,
                    ratio_cell(a["rss_mib"], base["rss_mib"]),
                ]
        lines.append("| " + " | ".join(cells) + " |")
    notes = [f"For `{s.name}` the rps column is MB/s." for s in results.scenarios if s.unit == "MB/s"]
    if BASELINE in results.peers:
        notes.append("An empty cell: the peer does not take part; —: it failed, or nginx did (see its scenario).")
    else:
        notes.append("nginx was not in this run, so there are no ratios: see the figures of each scenario.")
    if any(m.disturbed for m in results.measurements):
        notes.append("*: a measurement behind it stayed disturbed (see the end).")
    lines += ["", " ".join(notes)]

    if charts:
        lines += ["", "## Charts", ""]
        lines += [f"![{title}]({name})" for title, name in charts]

    lines += ["", "## Scenarios", ""]
    for s in results.scenarios:
        lines += [f"### {s.id} `{s.name}`: {s.title}", ""]
        row = agg.get(s.name, {})
        base = row.get(BASELINE)
        lines += [
            "| peer | rps | MB/s | p50 ms | p90 ms | p99 ms | p99.9 ms | server cores | req/CPU-s | peak RSS MiB "
            "| origin cores | generator cores | outside cores |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for p in results.peers:
            if not takes_part(s, p):
                continue
            if (s.name, p) in results.failures:
                lines.append(f"| {p} | failed: {results.failures[(s.name, p)]} |" + " |" * 11)
                continue
            a = row.get(p)
            if a is None:
                continue

            def cell(key: str, fmt=human) -> str:
                b = base[key] if base else None
                return fmt(a[key]) + ratio(a[key], b)

            flags = f" ({a['disturbed']:.0f} of {a['rounds']:.0f} disturbed)" if a["disturbed"] else ""
            lines.append(
                f"| {p}{flags} | {cell('rps')} | {cell('mb_per_s')} | {cell('p50_ms')} | {cell('p90_ms')} | "
                f"{cell('p99_ms')} | {cell('p999_ms')} | {a['server_cores']:.2f} | {cell('requests_per_cpu_s')} | "
                f"{cell('rss_mib')} | {a['origin_cores']:.2f} | {a['generator_cores']:.2f} | {a['outside_cores']:.2f} |"
            )
        lines.append("")

    disturbed = [m for m in results.measurements if m.disturbed]
    lines += ["## Disturbed measurements", ""]
    if disturbed:
        lines += ["Taken again up to the retake limit; still above the outside-CPU limit, so kept and flagged:", ""]
        lines += [
            f"- `{m.scenario}` {m.peer}, round {m.round}: {m.outside_cores:.2f} cores outside the run ({m.attempts} attempts)"
            for m in disturbed
        ]
    else:
        lines.append("None.")
    lines.append("")
    return "\n".join(lines)


def write_json(results: Results, meta: dict[str, str], path: Path) -> None:
    data = {
        "meta": meta,
        "measurements": [m.to_json() for m in results.measurements],
        "failures": [{"scenario": s, "peer": p, "reason": r} for (s, p), r in results.failures.items()],
    }
    path.write_text(json.dumps(data, indent=1) + "\n")


def charts(results: Results, out_dir: Path, stem: str) -> list[tuple[str, str]]:
    """Writes the SVG charts; returns (title, file name) pairs.

    Raises ImportError when matplotlib is missing.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib import ticker

    plt.rcParams["svg.hashsalt"] = "weir-loadtest"
    agg = results.aggregate()
    made = []

    def ratio_chart(key: str, title: str, name: str) -> None:
        scen = [s for s in results.scenarios if BASELINE in agg.get(s.name, {})]
        peers = [p for p in results.peers]
        if not scen:
            return
        fig, ax = plt.subplots(figsize=(10, 0.55 * len(scen) * max(1, len(peers)) / 2 + 1.5))
        height = 0.8 / len(peers)
        for i, p in enumerate(peers):
            ys, xs = [], []
            for j, s in enumerate(scen):
                a, b = agg[s.name].get(p), agg[s.name][BASELINE]
                if a is None:
                    continue
                value = headline(s, a) / headline(s, b) if key == "headline" else a[key] / b[key]
                ys.append(j + (i - (len(peers) - 1) / 2) * height)
                xs.append(value)
            ax.barh(ys, xs, height=height, label=p, color=COLORS.get(p))
        ax.axvline(1.0, color="black", linewidth=0.8)
        # A log scale: 2x and 0.5x are as far from 1 as each other.
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_locator(ticker.LogLocator(base=2))
        ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
        ax.xaxis.set_minor_formatter(ticker.NullFormatter())
        ax.set_yticks(range(len(scen)), [f"{s.id} {s.name}" for s in scen])
        ax.invert_yaxis()
        ax.set_xlabel("ratio to nginx, log scale (higher is better)")
        ax.set_title(title)
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0))
        fig.tight_layout()
        fig.savefig(out_dir / name, metadata={"Date": None})
        plt.close(fig)
        made.append((title, name))

    ratio_chart("headline", "Requests per second (MB/s for get-100m), ratio to nginx", f"{stem}-rps.svg")
    ratio_chart("requests_per_cpu_s", "Requests per CPU-second of the server, ratio to nginx", f"{stem}-cpu.svg")

    scen = [s for s in results.scenarios if agg.get(s.name)]
    if scen:
        cols = min(3, len(scen))
        rows = (len(scen) + cols - 1) // cols
        fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 3.2 * rows), squeeze=False)
        marks = [("p50_ms", "p50"), ("p90_ms", "p90"), ("p99_ms", "p99"), ("p999_ms", "p99.9")]
        for k, s in enumerate(scen):
            ax = axes[k // cols][k % cols]
            peers = [p for p in results.peers if p in agg[s.name]]
            width = 0.8 / max(1, len(peers))
            for i, p in enumerate(peers):
                xs = [j + (i - (len(peers) - 1) / 2) * width for j in range(len(marks))]
                ax.bar(xs, [max(agg[s.name][p][m], 1e-3) for m, _ in marks], width=width, label=p, color=COLORS.get(p))
            ax.set_xticks(range(len(marks)), [label for _, label in marks])
            ax.set_yscale("log")
            # Plain numbers at 1-2-5 steps, so values can be read off.
            ax.yaxis.set_major_locator(ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
            ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
            ax.yaxis.set_minor_formatter(ticker.NullFormatter())
            ax.set_ylabel("ms")
            ax.set_title(f"{s.id} {s.name}", fontsize=10)
            ax.legend(fontsize=7)
        for k in range(len(scen), rows * cols):
            axes[k // cols][k % cols].axis("off")
        fig.suptitle("Latency percentiles per scenario (lower is better)")
        fig.tight_layout()
        name = f"{stem}-latency.svg"
        fig.savefig(out_dir / name, metadata={"Date": None})
        plt.close(fig)
        made.append(("Latency percentiles per scenario", name))
    return made
