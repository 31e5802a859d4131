"""bench/pools_redis.py, the pools bench's ``redis`` case, run small on a private Redis:
every job of every layout is finished by its scripts (a lost or refused finish fails
the run), BullMQ's own scripts included when its package is installed, and the report
names each layout with its ratio against the one queue of its scripts."""
from __future__ import annotations

import os
import shutil
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, ROOT)

from bench.harness import Bench, BenchError  # noqa: E402
from bench.pools_redis import LAYOUTS, _job_id, markdown, redis_alone_case, run_layout  # noqa: E402

NODE_READY = shutil.which("node") and os.path.isdir(os.path.join(ROOT, "tests", "node_modules", "bullmq"))


@pytest.fixture(scope="module")
def bench():
    with Bench(verbose=False) as b:
        yield b


def test_every_layout_finishes_every_job_and_reads_against_its_one_queue(bench):
    logged = []
    res = redis_alone_case(bench, n=600, rounds=2, log=logged.append)
    cases = [row["case"] for row in res["rows"]]
    if NODE_READY:
        assert res["bullmq_skipped"] is None
        assert cases == [lay[0] for lay in LAYOUTS]
    else:
        assert res["bullmq_skipped"] and all(row["source"] == "ours" for row in res["rows"])
    for row in res["rows"]:
        assert row["jobs"] == 600 and len(row["x_redis_rounds"]) == 2
        assert row["redis_us_per_job"] > 0 and row["script_us_per_job"] > 0
        if row["queues"] == 1:
            assert row["x_redis"] == 1.0 and row["x_scripts"] == 1.0
    assert len(logged) == 2 * len(res["rows"])
    text = "\n".join(markdown(res))
    for case in cases:
        assert f"| {case} |" in text


def test_the_jobs_leave_the_queues_completed_by_the_scripts(bench):
    run_layout(bench, None, 100, "queues", 500)
    assert bench.client is not None
    completed = sum(bench.client.zcard(f"bredis:r100-{i}:completed") for i in range(100))
    waiting = sum(bench.client.llen(f"bredis:r100-{i}:wait") for i in range(100))
    assert (completed, waiting) == (500, 0)


def test_a_finish_that_answers_an_error_code_stops_the_run():
    with pytest.raises(BenchError, match="answered -2"):
        _job_id(-2)  # the lock was not the driver's: nothing is counted as done
    assert _job_id(0) is None and _job_id(None) is None and _job_id([0, 0, 0, 1700000000000]) is None and _job_id([["f", "v"], "7", 0, 0]) == "7"
