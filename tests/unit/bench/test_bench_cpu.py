"""bench/cpu.py: the processor the offload children import, its calibration and the report."""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))

from bench.cpu import MODES, burn, calibrate, cpu_markdown  # noqa: E402

from echomq_gevent.worker.offload import processor_spec  # noqa: E402


def test_the_processor_can_cross_to_a_child_by_name():
    assert processor_spec(burn) == "bench.cpu:burn"


def test_calibration_gives_a_loop_count():
    assert calibrate(target_ms=0.2) >= 1000


def test_report_names_the_ratio_and_every_mode():
    runs = [{"mode": m, "round": 0, "jobs_per_s": rate, "load1_before": 0.5} for m, rate in zip(MODES, (300, 540))]
    result = {"n": 10, "rounds": 1, "loops": 1000, "job_ms": 2.0, "concurrency": 4, "processes": 2, "cpus": 2,
              "runs": runs, "medians": {"thread": 300, "process": 540}, "ratio": 1.8}
    meta = {"date": "d", "commit": "c", "cpu": "x", "python": "3", "redis": "7", "uptime": "up"}
    text = cpu_markdown(result, meta)
    assert "| offload: thread | 300 | 300 |" in text and "**1.80×**" in text and "Redis 7" in text


def test_scaling_report_names_both_implementations_and_the_ratios():
    from bench.cpu import scaling_markdown

    runs = [{"impl": i, "processes": p, "round": 0, "jobs_per_s": 1.0, "load1_before": 0.3}
            for i in ("ours", "node") for p in (1, 2)]
    result = {"n": 10, "rounds": 1, "cpus": 2, "py_loops": 1, "js_loops": 2, "runs": runs,
              "medians": {"ours x1": 300, "ours x2": 540, "node x1": 400, "node x2": 700},
              "scaling": {"ours": 1.8, "node": 1.75}, "to_node": {1: 0.75, 2: 540 / 700}}
    text = scaling_markdown(result)
    assert "| echomq-gevent | 300 | 540 | 1.80× |" in text and "| BullMQ Node | 400 | 700 | 1.75× |" in text
    assert "ours ÷ Node: 0.75 with 1 process, 0.77 with 2" in text


def test_a_case_run_on_its_own_writes_one_history_row_of_the_table():
    from bench.run import _history_row

    meta = {"date": "d", "commit": "c", "machine": "x86_64, 2 CPUs, Linux 6", "cpu": "Xeon", "redis": "7.0.15"}
    row = _history_row(meta, 3, [0.5, 1.25, 0.75], "what it measured", 1.964)
    assert row == "| d | c | x86_64, 2 CPUs, Linux 6, Xeon | 7.0.15 | 3 | 0.50–1.25 | what it measured | 1.96 |\n"
    # the same columns as the table it is appended to
    assert row.count("|") == 9
