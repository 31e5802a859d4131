"""bench/scale/: the start-order check of the prioritized case and the schedulers' plan."""
from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))

from bench.scale.backlogs import out_of_order  # noqa: E402
from bench.scale.lateness import scheduler_specs, slot_split  # noqa: E402
from bench.scale.section import median_rounds  # noqa: E402


def test_a_start_order_in_priority_order_has_nothing_out_of_order():
    assert out_of_order([1, 1, 2, 3, 3, 7], window=0) == (0, 0)


def test_starts_within_the_window_in_flight_are_allowed():
    # priority 1 starts two starts after a 5: an inversion, but within a window of 2
    assert out_of_order([5, 6, 1, 7], window=2) == (0, 1)
    # with a window of 1 the 5 started more than one start before it
    assert out_of_order([5, 6, 1, 7], window=1) == (1, 1)


def test_every_late_start_is_counted():
    order = [9, 1, 2, 3]  # the 9 went first; all three later starts are behind it
    assert out_of_order(order, window=0) == (3, 3)


def test_scheduler_specs_are_half_every_half_cron_inside_the_window():
    t0, window = 1_700_000_000_000, 60_000
    specs = scheduler_specs(10, t0, window)
    every = [s for s in specs if "every" in s[1]]
    cron = [s for s in specs if "pattern" in s[1]]
    assert len(every) == 5 and len(cron) == 5 and len({s[0] for s in specs}) == 10
    assert all(t0 <= s[1]["startDate"] < t0 + window // 2 and s[1]["every"] == window // 2 for s in every)
    # each cron scheduler is pinned to a second and a minute of the window (local time), so a
    # window of a whole minute runs each once, none before the window starts
    starts = {(time.localtime(t0 // 1000 + k).tm_sec, time.localtime(t0 // 1000 + k).tm_min): k
              for k in range(window // 1000)}
    at = sorted(starts[tuple(int(f) for f in s[1]["pattern"].split()[:2])] for s in cron)
    assert at == [0, 12, 24, 36, 48]  # spread evenly over the window's seconds
    assert all(s[1]["pattern"].split()[2:] == ["*"] * 4 for s in cron)
    assert all(s[2]["data"]["k"] in ("every", "cron") for s in specs)


def test_burst_scheduler_specs_are_all_cron_many_a_second():
    t0, window = 1_700_000_000_000, 2_000
    cron = scheduler_specs(250, t0, window, every=False)
    assert len(cron) == 250 and all("pattern" in s[1] and s[2]["data"]["k"] == "cron" for s in cron)
    per_second: dict = {}
    for s in cron:
        per_second[s[1]["pattern"]] = per_second.get(s[1]["pattern"], 0) + 1
    assert sorted(per_second.values()) == [125, 125]  # 125 due in the same millisecond, twice


def test_runs_beyond_the_concurrency_of_one_due_time_waited_for_a_slot():
    runs = [("cron", 1000.0, late) for late in (5.0, 1.0, 9.0, 3.0)]  # four due at once
    runs += [("every", 2000.0, 7.0), ("every", 2001.0, 8.0)]  # alone at their times
    slot, waited = slot_split(runs, concurrency=2)
    # the first two of the four to start found a slot, the other two waited; lone runs had one
    assert slot == [1.0, 3.0, 7.0, 8.0]
    assert waited == [5.0, 9.0]
    assert slot_split(runs, concurrency=10) == (sorted([5.0, 1.0, 9.0, 3.0, 7.0, 8.0]), [])


def test_history_has_a_row_per_new_case_with_its_ratio_to_node():
    from bench.scale.report import history_row

    meta = {"date": "d", "commit": "c", "machine": "m", "cpu": "x", "redis": "7", "load1_min": 0.5, "load1_max": 1}
    prio = {"n": 10, "priorities": 5, "window": 100, "out_of_order": 0}
    sched = {"n": 4, "every_p99_ms": 2.0, "cron_p99_ms": 4.0, "worker_cpu_pct": 1.0}
    res = {"backlog": [], "admin": [],
           "prioritized": [dict(prio, impl="ours", jobs_per_s=300.0), dict(prio, impl="node", jobs_per_s=200.0)],
           "schedulers": [dict(sched, impl="ours", all_p99_ms=4.0), dict(sched, impl="node", all_p99_ms=100.0)],
           "payloads": [{"impl": i, "n": 3, "payload_b": 102400, "jobs_per_s": v, "peak_rss_mb": 50.0}
                        for i, v in (("ours", 90.0), ("node", 60.0))],
           "dashboard": [{"impl": "ours", "what": "queues page", "path": "/", "n": 9, "max_ms": 12.0},
                         {"impl": "ours", "what": "first discovery: until listed", "path": "/", "n": 9, "max_ms": 900.0, "discovery": True}]}
    rows = history_row(res, meta).splitlines()
    assert len(rows) == 4
    assert "prioritized" in rows[0] and rows[0].endswith("| 1.50 |")
    assert "job schedulers" in rows[1] and rows[1].endswith("| 25.00 |")
    assert "100 KB payloads" in rows[2] and rows[2].endswith("| 1.50 |")
    assert "page max 12 ms (the first discovery of the queues 900 ms)" in rows[3] and rows[3].endswith("| – |")


def test_a_throughput_case_of_several_rounds_keeps_the_median_round_of_each_implementation():
    rows = [{"impl": "ours", "n": 1, "jobs_per_s": 50.0}, {"impl": "node", "n": 1, "jobs_per_s": 30.0},
            {"impl": "ours", "n": 1, "jobs_per_s": 90.0}, {"impl": "node", "n": 1, "jobs_per_s": 10.0},
            {"impl": "ours", "n": 1, "jobs_per_s": 70.0}, {"impl": "node", "n": 1, "jobs_per_s": 20.0}]
    out = median_rounds(rows, lambda r: r["impl"])
    assert [(r["impl"], r["jobs_per_s"]) for r in out] == [("ours", 70.0), ("node", 20.0)]
    assert out[0]["rounds_jobs_per_s"] == [50.0, 90.0, 70.0]  # in run order
    # an even count keeps the lower middle round; one round is kept as it is
    two = median_rounds(rows[:4], lambda r: r["impl"])
    assert [r["jobs_per_s"] for r in two] == [50.0, 10.0]
    assert median_rounds(rows[:1], lambda r: r["impl"])[0]["rounds_jobs_per_s"] == [50.0]
