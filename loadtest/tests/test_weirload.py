"""Unit tests of loadtest/run's parsing, statistics and report (no servers).

Run: python3 -m unittest discover -s loadtest/tests
The whole tool runs against real servers in `loadtest/run --smoke` (CI).
"""

import contextlib
import datetime
import hashlib
import io
import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from weirload import bodies, cli, measure, report  # noqa: E402
from weirload.scenarios import BY_NAME, SCENARIOS  # noqa: E402

H2LOAD_OUT = """
finished in 5.00s, 41234.40 req/s, 47.12MB/s
requests: 206172 total, 206492 started, 206172 done, 206170 succeeded, 2 failed, 1 errored, 0 timeout
status codes: 206160 2xx, 0 3xx, 10 4xx, 0 5xx
traffic: 235.61MB (247054712) total, 1.97MB (2061720) headers (space savings 91.00%), 201.34MB (211120128) data
"""

WRK_OUT = """Running 1s test @ http://127.0.0.1:1/1k.bin
  1 threads and 32 connections
LOADTEST {"requests":1000,"duration_us":2000000,"bytes":1300000,"connect":0,"read":1,"write":0,"status":2,"timeout":3,"p50":700,"p90":900,"p99":1500,"p999":4000}
"""


def m(peer, rps, cpu, rss=10.0, scenario="get-1k-c32", round_no=1):
    return measure.Measurement(
        scenario=scenario, peer=peer, round=round_no, requests=int(rps * 5), seconds=5.0, rps=rps,
        mb_per_s=rps / 1000, p50_ms=1, p90_ms=2, p99_ms=3, p999_ms=4, errors=0, server_cpu_s=cpu,
        origin_cpu_s=1, generator_cpu_s=1, outside_cores=0.0, rss_mib=rss,
    )


class ParseTest(unittest.TestCase):
    def test_h2load_totals_errors_and_log_percentiles(self):
        log = "".join(f"17961731\t200\t{us}\n" for us in range(1, 1001))
        load = measure.parse_h2load(H2LOAD_OUT, log)
        self.assertEqual(load.requests, 206170)
        self.assertAlmostEqual(load.seconds, 5.0)
        self.assertEqual(load.bytes, 247054712)
        self.assertEqual(load.errors, 2 + 1 + 0 + 10)
        self.assertEqual((load.p50_us, load.p99_us, load.p999_us), (500, 990, 999))

    def test_h2load_without_summary_is_an_error(self):
        with self.assertRaises(measure.LoadError):
            measure.parse_h2load("connect failed\n", "")

    def test_wrk_summary_line(self):
        load = measure.parse_wrk(WRK_OUT)
        self.assertEqual((load.requests, load.seconds, load.errors), (1000, 2.0, 6))
        self.assertEqual(load.p999_us, 4000)
        with self.assertRaises(measure.LoadError):
            measure.parse_wrk("unable to connect\n")

    def test_percentile_is_nearest_rank(self):
        self.assertEqual(measure.percentile([], 50), 0.0)
        self.assertEqual(measure.percentile([5.0], 99.9), 5.0)
        values = [float(i) for i in range(1, 101)]
        self.assertEqual(measure.percentile(values, 50), 50.0)
        self.assertEqual(measure.percentile(values, 99), 99.0)
        self.assertEqual(measure.percentile(values, 100), 100.0)


class BodiesTest(unittest.TestCase):
    def test_pattern_is_xorshift64star_from_the_documented_seed(self):
        data = bodies.weir_pattern(1024)
        self.assertEqual(len(data), 1024)
        x = 0x5745_4952_2D4F_5247
        x ^= x >> 12
        x = (x ^ (x << 25)) & (2**64 - 1)
        x ^= x >> 27
        self.assertEqual(data[:8], ((x * 0x2545_F491_4F6C_DD1D) % 2**64).to_bytes(8, "little"))
        self.assertEqual(bodies.weir_pattern(1030)[:1024], data)

    def test_generated_bodies_match_their_hashes_and_the_composed_page(self):
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            got = bodies.generate(root / "www", root / "ssr")
            for name in ("1k", "16k", "cache-1k", "gzip-16k", "pattern-1k", "chunked-1m"):
                body = got[name]
                data = (root / "www" / body.path.lstrip("/")).read_bytes()
                self.assertEqual(hashlib.sha256(data).hexdigest(), body.sha256, name)
                self.assertEqual(len(data), body.size)
            self.assertNotIn(b"<", (root / "www/chunked/1m.bin").read_bytes())
            weir = (root / "ssr/weir/ssr/page.html").read_text()
            nginx = (root / "ssr/nginx/ssr/page.html").read_text()
            self.assertEqual(weir.count("<esi:include"), 8)
            self.assertEqual(nginx.count("<!--# include virtual="), 8)
            # Outside the include tags the two templates are the same page.
            for name in bodies.FRAGMENTS:
                weir = weir.replace(bodies.INCLUDE["weir"].format(name=name), "X")
                nginx = nginx.replace(bodies.INCLUDE["nginx"].format(name=name), "X")
            self.assertEqual(weir, nginx)


class ReportTest(unittest.TestCase):
    def results(self):
        r = report.Results([BY_NAME["get-1k-c32"], BY_NAME["ssr-8-c32"]], ["weir", "nginx", "haproxy"])
        for round_no, (w, n) in enumerate([(500, 1000), (600, 1000), (400, 1000)], 1):
            r.measurements += [m("weir", w, 1.0, 5.0, round_no=round_no), m("nginx", n, 1.0, 10.0, round_no=round_no)]
        r.measurements.append(m("haproxy", 2000, 2.0))
        r.measurements += [m("weir", 300, 1.0, scenario="ssr-8-c32"), m("nginx", 100, 1.0, scenario="ssr-8-c32")]
        return r

    def test_medians_and_ratios_to_nginx(self):
        r = self.results()
        agg = r.aggregate()
        self.assertEqual(agg["get-1k-c32"]["weir"]["rps"], 500)
        self.assertEqual(agg["get-1k-c32"]["weir"]["rounds"], 3)
        text = report.markdown(r, {"date": "2026-12-02", "command": "x"}, [])
        row = next(line for line in text.splitlines() if line.startswith("| S1 `get-1k-c32`"))
        # weir rps 0.50, req/CPU-s 0.50, RSS 0.50; haproxy 2.00, 1.00, 1.00
        self.assertEqual(row, "| S1 `get-1k-c32` | 0.50 | 0.50 | 0.50 | 2.00 | 1.00 | 1.00 |")
        ssr = next(line for line in text.splitlines() if line.startswith("| S8 `ssr-8-c32`"))
        self.assertEqual(ssr, "| S8 `ssr-8-c32` | 3.00 | 3.00 | 1.00 |  |  |  |")

    def test_failed_peer_is_reported_not_measured(self):
        r = self.results()
        r.failures[("get-1k-c32", "haproxy")] = "check: GET /1k.bin: status 502, not 200"
        text = report.markdown(r, {"date": "d"}, [])
        self.assertIn("| haproxy | failed: check: GET /1k.bin: status 502, not 200 |", text)
        self.assertNotIn("haproxy", r.aggregate()["get-1k-c32"])
        row = next(line for line in text.splitlines() if line.startswith("| S1 `get-1k-c32`"))
        self.assertTrue(row.endswith("| — | — | — |"), row)


class ArgsTest(unittest.TestCase):
    def test_smoke_is_one_round_of_one_second(self):
        a = cli.parse_args(["--smoke"])
        self.assertEqual((a.rounds, a.duration, a.warmup, a.retakes), (1, 1.0, 0.0, 0))
        self.assertEqual(len(a.scenario_list), len(SCENARIOS))

    def test_unknown_scenario_or_peer_is_refused(self):
        for argv in (
            ["--scenarios", "nope"],
            ["--peers", "weir,apache"],
            ["--peers", "weir,weir"],
            ["--duration", "0"],
            ["--duration", "nan"],
            ["--warmup", "100000"],
            ["--retakes", "1000"],
            ["--outside-limit", "-1"],
            ["--smoke", "--rounds", "5"],
            ["--name", "a/b"],
            ["--peers", "haproxy", "--scenarios", "S8"],
        ):
            with self.assertRaises(SystemExit, msg=argv), contextlib.redirect_stderr(io.StringIO()) as err:
                cli.parse_args(argv)
            self.assertIn("loadtest/run: error:", err.getvalue())

    def test_scenarios_by_id_or_name_once_each(self):
        a = cli.parse_args(["--scenarios", "S1,h2c-1k-c32x10,get-1k-c32"])
        self.assertEqual([s.name for s in a.scenario_list], ["get-1k-c32", "h2c-1k-c32x10"])
        self.assertEqual([s.id for s in SCENARIOS], [f"S{i}" for i in range(1, len(SCENARIOS) + 1)])

    def test_default_report_name_never_replaces_an_earlier_report(self):
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            args = cli.parse_args(["--out", tmp])
            out, stem = cli.output_paths(args)
            self.assertEqual(stem, datetime.date.today().isoformat())
            (out / f"{stem}.md").write_text("earlier")
            _, second = cli.output_paths(args)
            self.assertNotEqual(second, stem)
            self.assertTrue(second.startswith(stem + "-"), second)
            named = cli.parse_args(["--out", tmp, "--name", stem])
            self.assertEqual(cli.output_paths(named)[1], stem)

    def test_unwritable_out_is_refused_before_anything_runs(self):
        with self.assertRaises(cli.Usage):
            cli.output_paths(cli.parse_args(["--out", "/proc/loadtest-nope"]))

    def test_compare_adds_weir_base_wherever_weir_runs(self):
        a = cli.parse_args(["--compare", "/bin/true", "--peers", "nginx,weir"])
        self.assertEqual(a.peer_list, ["weir", "weir-base", "nginx"])
        from weirload.scenarios import takes_part

        self.assertTrue(takes_part(BY_NAME["S8"], "weir-base"))
        self.assertFalse(takes_part(BY_NAME["S8"], "haproxy"))
        with self.assertRaises(SystemExit), contextlib.redirect_stderr(io.StringIO()):
            cli.parse_args(["--compare", "/bin/true", "--peers", "nginx"])

    def test_peers_keep_the_canonical_order(self):
        self.assertEqual(cli.parse_args(["--peers", "direct,weir"]).peer_list, ["weir", "direct"])


if __name__ == "__main__":
    unittest.main()
