"""The benchmark report's arithmetic: medians, min–max, ratios to references, percentiles,
and the Markdown columns (no Redis, no subprocesses)."""
from __future__ import annotations

import json
import math
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))

from bench import report  # noqa: E402
from bench.harness import RedisSnapshot, command_delta, machine_cpu_s, other_cpu_pct, percentile  # noqa: E402


def _row(impl, case, jps, rnd, **extra):
    row = {"impl": impl, "case": case, "kind": "worker", "jobs_per_s": jps, "round": rnd,
           "redis_cmds_per_job": 24.0, "redis_scripts_per_job": 1.0, "redis_cpu_us_per_job": 40.0,
           "worker_cpu_us_per_job": 90.0, "peak_rss_mb": 50.0 + rnd}
    row.update(extra)
    return row


def test_summary_takes_medians_ranges_and_ratios_from_the_same_case():
    runs = [
        _row("ours", "W1", 900.0, 1), _row("ours", "W1", 1000.0, 2), _row("ours", "W1", 1500.0, 3),
        _row("node", "W1", 2000.0, 1), _row("node", "W1", 1800.0, 2), _row("node", "W1", 2200.0, 3),
        _row("pyref", "W1", 250.0, 1), _row("pyref", "W1", 200.0, 2), _row("pyref", "W1", 300.0, 3),
        _row("ours", "W2", 10.0, 1), _row("node", "W2", 40.0, 1),
    ]
    summary = report.summarize(runs)
    ours = next(s for s in summary if s["impl"] == "ours" and s["case"] == "W1")
    assert ours["jobs_per_s"] == 1000.0
    assert (ours["jobs_per_s_min"], ours["jobs_per_s_max"]) == (900.0, 1500.0)
    assert ours["ratio_node"] == pytest.approx(0.5)
    assert ours["ratio_pyref"] == pytest.approx(4.0)
    assert ours["peak_rss_mb"] == 53.0
    w2 = next(s for s in summary if s["impl"] == "ours" and s["case"] == "W2")
    assert w2["ratio_node"] == pytest.approx(0.25)
    assert "ratio_pyref" not in w2  # no pyref run in that case: no ratio invented
    assert [s["impl"] for s in summary if s["case"] == "W1"] == ["ours", "node", "pyref"]


def test_latency_rows_summarise_percentiles_not_throughput():
    runs = [
        {"impl": "node", "case": "latency", "kind": "latency", "p50_ms": 1.0, "p99_ms": 3.0,
         "max_ms": 4.0, "samples": 10, "peak_rss_mb": 60.0, "redis_cmds_per_job": 50.0},
        {"impl": "node", "case": "latency", "kind": "latency", "p50_ms": 2.0, "p99_ms": 5.0,
         "max_ms": 9.0, "samples": 10, "peak_rss_mb": 61.0, "redis_cmds_per_job": 52.0},
    ]
    (s,) = report.summarize(runs)
    assert s["p50_ms"] == 1.5 and s["p99_ms"] == 4.0 and s["samples"] == 20
    assert "jobs_per_s" not in s


def test_markdown_has_every_column_and_one_line_per_summary_row():
    runs = [_row("ours", "W1", 1000.0, 1), _row("node", "W1", 2000.0, 1)]
    md = report.markdown(report.summarize(runs), {"rounds": 1, "quick": True})
    header = "| " + " | ".join(report.THROUGHPUT_COLUMNS) + " |"
    assert header in md
    lines = [ln for ln in md.splitlines() if ln.startswith("| W1 |")]
    assert len(lines) == 2
    assert "| 0.50 |" in lines[0]  # ours / node


def test_json_output_replaces_nan_with_null(tmp_path):
    path = tmp_path / "r.json"
    report.write_json(str(path), {"x": float("nan")}, [], [{"p50_ms": float("nan")}])
    data = json.loads(path.read_text())
    assert data["meta"]["x"] is None and data["summary"][0]["p50_ms"] is None


def test_percentile_nearest_rank():
    vals = [float(i) for i in range(1, 101)]
    assert percentile(vals, 50) == 50.0
    assert percentile(vals, 99) == 99.0
    assert percentile([7.0], 99) == 7.0
    assert math.isnan(percentile([], 50))


def test_command_delta_subtracts_the_harness_own_commands():
    before = RedisSnapshot({"evalsha": 10, "zcard": 5, "info": 3}, 1.0)
    after = RedisSnapshot({"evalsha": 30, "zcard": 9, "info": 9, "hget": 4}, 1.5)
    assert command_delta(before, after, {"zcard": 4}) == {"evalsha": 20, "hget": 4}


def test_chart_draws_a_png_with_throughput_and_latency(tmp_path):
    pytest.importorskip("matplotlib")
    runs = [_row("ours", "W1", 1000.0, 1), _row("node", "W1", 2000.0, 1),
            {"impl": "ours", "case": "latency", "kind": "latency", "p50_ms": 1.0, "p99_ms": 3.0,
             "max_ms": 4.0, "samples": 10, "peak_rss_mb": 40.0}]
    path = tmp_path / "c.png"
    report.chart(str(path), report.summarize(runs))
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000


def test_profile_folding_counts_self_and_inclusive_samples_per_function(tmp_path):
    from bench.profile import _is_idle, _package, fold

    raw = tmp_path / "raw.txt"
    raw.write_text(
        "<module> (bench/drivers/ours_worker.py:60);run (gevent/hub.py:1);"
        "Worker._complete (/x/echomq_gevent/worker.py:700);send (/x/gevent/_socketcommon.py:10) 3\n"
        "<module> (bench/drivers/ours_worker.py:60);Worker._complete (/x/echomq_gevent/worker.py:701) 1\n"
        "<module> (bench/drivers/ours_worker.py:60);Hub.run (/x/gevent/hub.py:5) 4\n"
        "garbage line\n"
    )
    total, own, incl = fold(str(raw))
    assert total == 8
    assert own["send (gevent/_socketcommon.py)"] == 3
    assert own["Worker._complete (echomq_gevent/worker.py)"] == 1  # line numbers fold together
    assert incl["Worker._complete (echomq_gevent/worker.py)"] == 4
    assert incl["<module> (drivers/ours_worker.py)"] == 8
    assert _package("send (gevent/_socketcommon.py)") == "gevent"
    assert _is_idle("Hub.run (gevent/hub.py)") and not _is_idle("send (gevent/_socketcommon.py)")


def test_history_appends_one_row_per_case_with_the_run_conditions(tmp_path):
    runs = [_row("ours", "W1", 1100.0, 1), _row("node", "W1", 1000.0, 1),
            _row("ours", "W2", 50.0, 1), _row("node", "W2", 40.0, 1)]
    meta = {"date": "2026-01-01 00:00 UTC", "commit": "abc1234", "machine": "x86_64, 2 CPUs", "cpu": "Some CPU",
            "redis": "6.2.14, 7.0.15", "rounds": 3, "load1_min": 1.0, "load1_max": 2.5}
    path = str(tmp_path / "history.md")
    report.append_history(path, report.summarize(runs), meta)
    report.append_history(path, report.summarize(runs), dict(meta, commit="def5678"))
    text = open(path, encoding="utf-8").read()
    assert text.count("# Ratio history") == 1
    rows = [ln for ln in text.splitlines() if ln.startswith("| 2026")]
    assert len(rows) == 4
    assert rows[0].endswith("| W1 | 1.10 |") and "abc1234" in rows[0] and "Some CPU" in rows[0]
    assert "1.0–2.5" in rows[0] and rows[3].endswith("| W2 | 1.25 |") and "def5678" in rows[3]


def test_machine_cpu_reads_busy_and_idle_from_a_proc_stat_line():
    hz = float(os.sysconf("SC_CLK_TCK"))
    # user nice system idle iowait irq softirq steal guest guest_nice
    busy, idle = machine_cpu_s("cpu  100 20 30 400 50 6 4 10 7 0")
    assert busy == pytest.approx(170 / hz)  # guest (7) is inside user already
    assert idle == pytest.approx(450 / hz)
    assert machine_cpu_s("intr 1 2 3") is None


def test_other_work_is_the_machine_share_the_measured_processes_did_not_use():
    # 2 cores over 1 s: 2 CPU-s in all; 1.8 busy, of which 1.3 were the worker, Redis and harness
    assert other_cpu_pct((10.0, 50.0), (11.8, 50.2), 1.3) == pytest.approx(25.0)
    assert other_cpu_pct((10.0, 50.0), (11.0, 51.0), 1.2) == 0.0  # clamped: sampling skew
    assert other_cpu_pct(None, (11.0, 51.0), 1.0) is None
    assert other_cpu_pct((10.0, 50.0), (10.0, 50.0), 0.0) is None


def test_other_work_shows_as_a_min_max_column_per_implementation():
    runs = [_row("ours", "mix", 13000.0, 1, other_cpu_pct=2.0), _row("ours", "mix", 7000.0, 2, other_cpu_pct=48.0),
            _row("node", "mix", 10000.0, 1, other_cpu_pct=5.0), _row("node", "mix", 10000.0, 2)]
    summary = report.summarize(runs)
    ours = next(s for s in summary if s["impl"] == "ours")
    assert (ours["other_cpu_pct_min"], ours["other_cpu_pct_max"]) == (2.0, 48.0)
    md = report.markdown(summary, {"rounds": 2})
    ours_line = next(ln for ln in md.splitlines() if ln.startswith("| mix | echomq-gevent |"))
    node_line = next(ln for ln in md.splitlines() if ln.startswith("| mix | BullMQ Node"))
    assert ours_line.endswith("| 2–48 |")
    assert node_line.endswith("| 5–5 |")
    old = report.markdown(report.summarize([_row("ours", "W1", 1.0, 1)]), {"rounds": 1})
    assert next(ln for ln in old.splitlines() if ln.startswith("| W1 |")).endswith("| – |")


# --- rounds that shared the machine are run again ---------------------------------------------
class _FakeBench:
    def __init__(self):
        self.lines = []

    def log(self, msg):
        self.lines.append(msg)


def _scripted_measure(monkeypatch, others):
    """bench.run.measure answering with the next ``other_cpu_pct`` of ``others`` per call."""
    from bench import run as bench_run

    calls = []

    def measure(bench, impl, case):
        calls.append(impl.key)
        other = others[len(calls) - 1]
        return _row(impl.key, case.name, 1000.0 * len(calls), 0, other_cpu_pct=other)

    monkeypatch.setattr(bench_run, "measure", measure)
    return bench_run, calls


def _w1_case(bench_run):
    return next(c for c in bench_run.cases(quick=True) if c.kind == "worker")


def test_a_round_that_shared_the_machine_is_set_aside_and_run_again(monkeypatch):
    bench_run, calls = _scripted_measure(monkeypatch, [3.0, 25.0, 12.0, 4.0, 2.0, 1.0])
    impls = [bench_run.IMPLS["ours"], bench_run.IMPLS["node"]]
    monkeypatch.setattr(bench_run.Impl, "missing", lambda self, role="worker": None)
    runs, failures, bench = [], [], _FakeBench()
    bench_run._run_case(bench, _w1_case(bench_run), impls, 2, "", runs, failures, True, max_other=10.0, reruns=2)
    # round 1: ours 3 % kept; node 25 % and 12 % set aside, 4 % kept; round 2: node 2 %, ours 1 %
    assert calls == ["ours", "node", "node", "node", "node", "ours"]
    assert [(r["impl"], r["other_cpu_pct"], bool(r.get("set_aside"))) for r in runs] == [
        ("ours", 3.0, False), ("node", 25.0, True), ("node", 12.0, True), ("node", 4.0, False),
        ("node", 2.0, False), ("ours", 1.0, False)]
    assert sum("set aside" in line for line in bench.lines) == 2 and not failures
    summary = report.summarize(runs)
    node = next(s for s in summary if s["impl"] == "node")
    assert node["rounds"] == 2 and node["set_aside"] == 2
    assert (node["other_cpu_pct_min"], node["other_cpu_pct_max"]) == (2.0, 4.0)
    assert node["jobs_per_s"] == 4500.0  # the median of the kept rounds (4,000 and 5,000) alone
    md = report.markdown(summary, {"rounds": 2, "max_other_pct": 10.0, "reruns": 2})
    assert next(ln for ln in md.splitlines() if "BullMQ Node" in ln).endswith("| 2–4 (2 set aside) |")
    assert "set aside and run again" in md


def test_the_last_try_counts_and_no_rule_means_no_rerun(monkeypatch):
    bench_run, calls = _scripted_measure(monkeypatch, [30.0, 40.0, 50.0, 60.0])
    monkeypatch.setattr(bench_run.Impl, "missing", lambda self, role="worker": None)
    runs = []
    bench_run._run_case(_FakeBench(), _w1_case(bench_run), [bench_run.IMPLS["ours"]], 1, "", runs, [], True,
                        max_other=10.0, reruns=2)
    assert [bool(r.get("set_aside")) for r in runs] == [True, True, False] and len(calls) == 3
    runs = []
    bench_run._run_case(_FakeBench(), _w1_case(bench_run), [bench_run.IMPLS["ours"]], 1, "", runs, [], True)
    assert len(runs) == 1 and not runs[0].get("set_aside")  # the defaults of _run_case: no rule


def test_the_rule_is_an_option():
    from bench import run as bench_run

    args = bench_run.parse_args([])
    assert (args.max_other, args.reruns) == (bench_run.DEFAULT_MAX_OTHER, bench_run.DEFAULT_RERUNS)
    assert bench_run.parse_args(["--quick"]).reruns == 0  # a smoke run is not run again
    args = bench_run.parse_args(["--max-other", "100", "--reruns", "0"])
    assert (args.max_other, args.reruns) == (100.0, 0)
    with pytest.raises(SystemExit):
        bench_run.parse_args(["--max-other", "120"])
