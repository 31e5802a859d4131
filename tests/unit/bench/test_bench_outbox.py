"""bench/outbox.py: the driver dimension (URLs, which drivers run) and the report, which
says per driver whether the relay listened or polled, and carries a baseline's rows."""
from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))

from bench.harness import BenchError  # noqa: E402
from bench.outbox import POLL_WITHOUT_LISTEN, driver_url, installed_drivers, outbox_markdown  # noqa: E402


def test_driver_url_swaps_the_dialect_driver_only():
    url = "postgresql+psycopg2://echomq@127.0.0.1:5999/bench"
    assert driver_url(url, "psycopg") == "postgresql+psycopg://echomq@127.0.0.1:5999/bench"
    assert driver_url(url, "psycopg2") == url
    assert driver_url("postgresql://u@h/db", "psycopg") == "postgresql+psycopg://u@h/db"


def test_installed_drivers_keeps_the_order_and_refuses_an_unknown_one():
    found = installed_drivers(["psycopg2", "psycopg"])
    assert found == [d for d in ("psycopg2", "psycopg") if __import__("importlib").util.find_spec(d)]
    with pytest.raises(BenchError, match="unknown PostgreSQL driver 'mysqlclient'"):
        installed_drivers(["mysqlclient"])


def _row(tps, p50=1.0):
    return {"writes_per_s": tps, "jobs_per_s": tps, "p50_ms": p50, "p99_ms": 2 * p50}


def test_the_report_has_a_table_per_driver_with_its_wake_up_and_the_baseline():
    modes = ["enqueue_on_commit", "outbox", "outbox abc1234"]
    summary = {}
    for d, scale in (("psycopg2", 1.0), ("psycopg", 0.5)):
        for load in ("load", "idle"):
            summary[f"{d} enqueue_on_commit {load}"] = _row(2000 * scale)
            summary[f"{d} outbox {load}"] = _row(1800 * scale, 9.0)
            summary[f"{d} outbox abc1234 {load}"] = _row(1300 * scale, 1.5)
    result = {"summary": summary, "runs": [{"load1": 0.5}, {"load1": 1.25}], "n": 2000, "c": 10, "idle_n": 200,
              "idle_interval_ms": 20, "rounds": 3, "postgres": "15.20", "redis": "6.2.14",
              "drivers": ["psycopg2", "psycopg"], "listen": {"psycopg2": True, "psycopg": False},
              "baseline": "abc1234", "modes": modes}
    meta = {"date": "2026-12-06 21:00 UTC", "cpu": "AMD EPYC", "machine": "x86_64, 2 CPUs", "commit": "def5678"}
    md = outbox_markdown(result, meta)
    two, three = md.split("## psycopg2")[1].split("## psycopg 3")
    assert "woken by LISTEN/NOTIFY" in two and "polling" not in two
    assert f"polling every {POLL_WITHOUT_LISTEN:g} s" in three
    assert "| outbox abc1234 load | 1,300 | 1,300 | 1.5 ms | 3.0 ms |" in two
    assert "| outbox load | 900 | 900 | 9.0 ms | 18.0 ms |" in three
    assert "outbox / enqueue_on_commit: transactions/s 0.90" in two
    assert "outbox abc1234 / enqueue_on_commit: transactions/s 0.65" in two
    assert "load average 0.50-1.25" in md and "commit def5678" in md


def _psycopg2_report(summary, rounds):
    """The report of a psycopg2-only run of the plain mode and the outbox with ``summary``."""
    result = {"summary": summary, "runs": [{"load1": 0.5}], "n": 2000, "c": 10, "idle_n": 200,
              "idle_interval_ms": 20, "rounds": rounds, "postgres": "15.20", "redis": "7.0.15",
              "drivers": ["psycopg2"], "listen": {"psycopg2": True}, "baseline": None,
              "modes": ["enqueue_on_commit", "outbox"]}
    return outbox_markdown(result, {"date": "d", "cpu": "c", "machine": "m", "commit": "x"})


def test_the_report_gives_the_cpu_a_transaction_costs_by_part():
    summary = {}
    for mode, parts in (("enqueue_on_commit", (842, 0, 375, 114)), ("outbox", (643, 155, 535, 52))):
        for load in ("load", "idle"):
            row = _row(1500)
            row["cpu_us_per_tx"] = dict(zip(("writers", "relay", "postgres", "redis"), parts))
            row["cpu_us_per_tx_total"] = sum(parts)
            summary[f"psycopg2 {mode} {load}"] = row
    md = _psycopg2_report(summary, rounds=1)
    assert "| mode | writers | relay | PostgreSQL | Redis | total |" in md
    assert "| enqueue_on_commit | 842 | 0 | 375 | 114 | 1331 |" in md
    assert "| outbox | 643 | 155 | 535 | 52 | 1385 |" in md
    # the same CPU buys 1331 / 1385 of the transactions through the outbox
    assert "transactions/s 1.00, jobs/s 1.00, transactions the same CPU buys 0.96" in md


def test_each_round_is_paired_with_the_plain_run_of_the_same_round():
    """The ratio the report leads with is the median of each round's ratio against the
    enqueue_on_commit run of that round, not a ratio of medians taken across rounds."""
    from bench.outbox import paired_ratios

    runs = []
    for r, (plain, outbox, p_cpu, o_cpu) in enumerate(((2000, 1800, 600, 750), (1000, 950, 1200, 1300),
                                                       (3000, 2400, 400, 500))):
        runs.append({"driver": "psycopg2", "mode": "enqueue_on_commit", "load": "load", "round": r,
                     "writes_per_s": plain, "cpu_us_per_tx_total": p_cpu})
        runs.append({"driver": "psycopg2", "mode": "outbox", "load": "load", "round": r,
                     "writes_per_s": outbox, "cpu_us_per_tx_total": o_cpu})
        runs.append({"driver": "psycopg2", "mode": "outbox", "load": "idle", "round": r,
                     "writes_per_s": 1, "cpu_us_per_tx_total": 1})
    got = paired_ratios(runs, "psycopg2", "outbox")
    assert got["x_plain_rounds"] == [0.9, 0.95, 0.8]
    assert got["x_plain_median"] == 0.9
    assert got["x_plain_cpu_rounds"] == [0.8, 0.923, 0.8] and got["x_plain_cpu_median"] == 0.8
    runs[1]["writes_per_s"] = 2900  # round 1's outbox run on a fast moment: its own ratio moves, not the others'
    assert paired_ratios(runs, "psycopg2", "outbox")["x_plain_rounds"] == [1.45, 0.95, 0.8]

    summary = {}
    for load in ("load", "idle"):
        summary[f"psycopg2 enqueue_on_commit {load}"] = _row(2000)
        summary[f"psycopg2 outbox {load}"] = _row(1800)
    summary["psycopg2 outbox load"].update(got)
    md = _psycopg2_report(summary, rounds=3)
    assert "| outbox | **0.90** (0.90, 0.95, 0.80) | **0.80** (0.80, 0.92, 0.80) |" in md
