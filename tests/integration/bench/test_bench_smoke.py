"""Smoke run of the benchmark harness (``python -m bench.run --quick``), so it does not rot.

Runs every case once with tiny N for our worker and the Node worker (and the Python
package when it is installed), then checks the report: the expected columns, every job
counted, and numbers in a sane range. No wall-clock assertions: speed is the benchmark's
business, not the test suite's.
"""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, ROOT)

from bench import report  # noqa: E402
from bench.run import cases  # noqa: E402

pytestmark = [
    pytest.mark.skipif(
        not shutil.which("node") or not os.path.isdir(os.path.join(ROOT, "tests", "node_modules", "bullmq")),
        reason="the harness pre-loads jobs with Node bullmq (cd tests && npm ci)",
    ),
]


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    impls = ["ours", "node"]
    if importlib.util.find_spec("bullmq") is not None:
        impls.append("pyref")
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    from redis_server import find_redis_server

    proc = subprocess.run(
        [sys.executable, "-m", "bench.run", "--quick", "-q", "--impl", ",".join(impls), "--out", str(out),
         "--redis", find_redis_server()],  # one server: the suite's
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, f"bench.run --quick failed ({proc.returncode}):\n{proc.stderr[-4000:]}"
    with open(out / "results.json", encoding="utf-8") as fh:
        data = json.load(fh)
    return out, impls, data


def test_every_case_ran_for_every_implementation(quick_run):
    _, impls, data = quick_run
    assert data["meta"]["failures"] == []
    # how our worker ran (an installed wheel in `make bench`, the checkout here) and on what
    env = data["meta"]["ours_environment"]
    assert env.split(",")[0] in ("installed", "checkout", "editable install of the checkout"), env
    assert " redis " in f" {env}" and "gevent " in env, env
    seen = {(r["case"], r["impl"]) for r in data["runs"]}
    expected = {(c.name, i) for c in cases(quick=True) for i in impls
                if not ((c.metrics or c.mode == "mix") and i == "pyref")}
    assert seen == expected


def test_worker_runs_count_every_job_and_numbers_are_sane(quick_run):
    _, _, data = quick_run
    for r in data["runs"]:
        where = f"{r['impl']} / {r['case']}"
        if r["kind"] == "worker":
            assert r["completed"] == r["n"] and r["failed"] == 0, where
            if r["mode"] == "mix":  # a tenth of the jobs fail their first attempt
                assert r["processed"] == r["n"] + sum(1 for i in range(r["n"]) if i % 10 == 3), where
            else:
                assert r["processed"] == r["n"], where  # the processor ran once per job
            assert r["jobs_seen"] == r["n"], where
            assert r["jobs_per_s"] > 0 and r["seconds"] > 0, where
            # a job needs at least moveToActive's and moveToFinished's work; never hundreds
            assert 5 <= r["redis_cmds_per_job"] <= 200, where
            assert 0 < r["redis_scripts_per_job"] <= 10, where
            if os.path.exists("/proc/stat"):  # the share of the CPU other processes took meanwhile
                assert 0.0 <= r["other_cpu_pct"] <= 100.0, where
        elif r["kind"] == "enqueue":
            assert r["jobs_in_wait"] == r["n"], where
            assert 1 <= r["redis_cmds_per_job"] <= 50, where
        else:
            assert r["completed"] == r["n"] and r["samples"] == r["n"], where
            assert 0 <= r["p50_ms"] <= r["p99_ms"] <= r["max_ms"], where
        assert r["peak_rss_mb"] > 1, where


def test_ratios_refer_to_the_node_run_of_the_same_case(quick_run):
    _, _, data = quick_run
    by = {(s["case"], s["impl"]): s for s in data["summary"]}
    for (case, impl), s in by.items():
        if s["kind"] == "latency":
            continue
        node = by[(case, "node")]
        assert s["ratio_node"] == pytest.approx(s["jobs_per_s"] / node["jobs_per_s"])


def test_markdown_table_and_chart_are_written(quick_run):
    out, impls, _ = quick_run
    md = (out / "results.md").read_text(encoding="utf-8")
    assert "| " + " | ".join(report.THROUGHPUT_COLUMNS) + " |" in md
    assert "| " + " | ".join(report.LATENCY_COLUMNS) + " |" in md
    assert md.count("| W1 no-op c=100 |") == len(impls)
    if importlib.util.find_spec("matplotlib") is None:
        assert not (out / "throughput.png").exists()
        pytest.skip("matplotlib is not installed (the bench extra), so the run draws no chart")
    png = (out / "throughput.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000


def test_a_driver_that_dies_or_hangs_is_reported_with_its_stderr():
    from bench.harness import Bench, BenchError

    with Bench(verbose=False) as bench:
        with pytest.raises(BenchError, match="exited with 3; stderr: cannot reach the moon"):
            bench.start_driver([sys.executable, "-c",
                                "import sys; sys.stderr.write('cannot reach the moon'); sys.exit(3)"], {})
        with pytest.raises(BenchError, match="no output within 0.5 s"):
            bench.start_driver([sys.executable, "-c", "import time; time.sleep(30)"], {}, ready_timeout=0.5)


def test_round_trip_floor_measures_every_client_stack(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "bench.run", "--floor", "--quick", "-q", "--out", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [ln for ln in (tmp_path / "floor.md").read_text(encoding="utf-8").splitlines()
            if ln.startswith("| ") and "---" not in ln and "client stack" not in ln]
    assert len(rows) == 8  # 4 stacks x (PING, EVALSHA)
    for row in rows:
        per_s = float(row.split("|")[3].replace(",", ""))
        assert per_s > 0, row


def test_the_cpu_case_ran_both_offloads(quick_run):
    out, impls, _ = quick_run
    data = json.loads((out / "cpu.json").read_text(encoding="utf-8"))
    assert set(data["medians"]) == {"thread", "process"} and all(v > 0 for v in data["medians"].values())
    assert all(run["failed"] == 0 for run in data["runs"])
    assert "process ÷ thread" in (out / "cpu.md").read_text(encoding="utf-8")
    if "node" in impls:
        assert set(data["scaling"]["scaling"]) == {"ours", "node"}


@pytest.fixture(scope="module")
def scale_run(tmp_path_factory):
    """``bench.run --only scale --quick``: every case of the scale section, tiny, ours and Node."""
    out = tmp_path_factory.mktemp("scale")
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    from redis_server import find_redis_server

    proc = subprocess.run(
        [sys.executable, "-m", "bench.run", "--only", "scale", "--quick", "-q", "--impl", "ours,node",
         "--out", str(out), "--redis", find_redis_server()],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, f"bench.run --only scale --quick failed ({proc.returncode}):\n{proc.stderr[-4000:]}"
    with open(out / "scale.json", encoding="utf-8") as fh:
        return out, json.load(fh)


def test_scale_section_runs_every_case_for_ours_and_node(scale_run):
    out, data = scale_run
    meta = data["meta"]
    assert meta["failures"] == [] and meta["quick"] is True
    assert meta["cpu"] and meta["redis"] and meta["load1_max"] is not None
    sizes = meta["sizes"]["backlogs"]
    assert {(r["n"], r["impl"]) for r in data["backlog"]} == {(n, i) for n in sizes for i in ("ours", "node")}
    for r in data["backlog"]:
        assert r["completed"] == r["n"] and r["processed"] == r["n"], r["impl"]
        assert r["memory_per_waiting_job_b"] > 0 and r["redis_cpu_us_per_job"] > 0
    ops = {r["op"] for r in data["admin"]}
    assert {"clean completed", "retry_jobs failed", "drain wait", "obliterate", "get_job_counts"} <= ops
    for r in data["admin"]:
        where = f"{r['impl']} / {r['op']}"
        if r["op"] in ("clean completed", "drain wait", "obliterate"):
            assert r["jobs_left"] == 0, where  # the call removed everything it was asked to
        if r["op"] == "retry_jobs failed":
            assert r["jobs_left"] == r["n"], where  # every failed job is back in wait
        assert r["longest_ms"] >= 0
    n_delayed = meta["sizes"]["delayed_n"]
    assert sorted(r["impl"] for r in data["delayed"]) == ["node", "ours"]
    assert all(r["samples"] == n_delayed for r in data["delayed"])
    assert sorted(r["impl"] for r in data["idle"]) == ["node", "ours", "ours shared wait"]
    for r in data["idle"]:
        assert r["probes"] == meta["sizes"]["probes"], r["impl"]
        if r["impl"] == "ours shared wait":  # one wait, one command connection and the process's
            assert r["connections"] == 3, r  # cancellation subscription for every queue
        else:  # every queue holds at least its blocking connection
            assert r["connections"] >= r["queues"], r["impl"]
    text = (out / "scale.md").read_text(encoding="utf-8")
    assert "## Backlog" in text and "## Admin calls" in text and "idle queues" in text


def test_scale_section_runs_the_prioritized_schedulers_payloads_and_dashboard_cases(scale_run):
    out, data = scale_run
    sizes = data["meta"]["sizes"]
    for r in data["prioritized"]:
        assert r["completed"] == r["n"] == sizes["prioritized_n"] and r["priorities"] == sizes["priorities"]
        assert r["out_of_order"] >= 0 and "order" not in r, r["impl"]  # the start order is not kept
    assert sorted(r["impl"] for r in data["prioritized"]) == ["node", "ours"]
    spread = [r for r in data["schedulers"] if r["case"] == "spread"]
    bursts = [r for r in data["schedulers"] if r["case"] == "burst"]
    for r in spread:
        assert r["schedulers_made"] == sizes["schedulers_n"], r["impl"]  # every upsert made its scheduler
        assert r["every_runs"] > 0 and r["cron_runs"] > 0 and r["worker_cpu_pct"] >= 0, r["impl"]
        assert r["runs_before_ready"] == 0, r["impl"]  # the worker was up before the first run
    for r in bursts:  # all cron, more due at once each second than the 100 slots
        assert r["schedulers_made"] == r["cron_runs"] == sizes["burst_n"] and r["every_runs"] == 0, r["impl"]
        assert r["waited_runs"] > 0, r["impl"]
    assert sorted(r["impl"] for r in spread) == sorted(r["impl"] for r in bursts) == ["node", "ours"]
    assert {(r["n"], r["payload_b"], r["impl"]) for r in data["payloads"]} == {
        (n, pad, impl) for n, pad in sizes["payloads"] for impl in ("ours", "node")}
    assert all(r["completed"] == r["n"] and r["peak_rss_mb"] > 0 for r in data["payloads"])
    pages = {r["what"] for r in data["dashboard"] if r["impl"] == "ours"}
    assert any(p.startswith("queues page") for p in pages) and any(p.startswith("job list, last page") for p in pages)
    assert {r["impl"] for r in data["dashboard"]} == {"ours", "node"}
    text = (out / "scale.md").read_text(encoding="utf-8")
    assert "prioritized jobs over" in text and "## Job schedulers" in text and "## Large payloads" in text
    assert "## Dashboard" in text and "Not in this run" not in text


def test_the_freeze_campaign_counts_every_job_and_its_late_starts():
    from bench.freeze import campaign

    res = campaign(jobs=60, freezes=1, lock_ms=1000, freeze_s=[1.6, 1.7], concurrency=4, seed=1, code="")
    assert res["completed"] == 60 and res["freezes"] == 1
    # counts, not asserted here: a freeze between the lock check and the processor's entry
    # is rare but possible (tests/chaos/test_freeze.py is the deterministic test)
    assert {"lapsed_starts", "frozen_mid_look", "run_twice", "load1_before", "redis"} <= set(res)
