"""Worker option ``metrics`` and ``Queue.get_metrics`` against a real Redis."""
from __future__ import annotations

import time

import pytest

from echomq_gevent.errors import ConfigError

from integration.worker_helpers import make_worker, running


def _proc(job):
    if job.name == "bad":
        raise RuntimeError("no")
    return job.data


def _run(wait_for, redis_url, prefix, qname, queue, r, jobs, **opts):
    before = r.zcard(queue.keys.completed) + r.zcard(queue.keys.failed)
    added = queue.add_bulk(jobs)
    with running(make_worker(redis_url, prefix, qname, _proc, **opts)):
        wait_for(lambda: r.zcard(queue.keys.completed) + r.zcard(queue.keys.failed) == before + len(added),
                 what="every job finished")
    return added


def test_a_worker_with_metrics_counts_each_final_outcome(redis_url, prefix, qname, queue, r, wait_for):
    jobs = [("ok", {"i": i}, None) for i in range(4)] + [
        ("bad", {}, {"attempts": 2, "backoff": {"type": "fixed", "delay": 10}})]
    _run(wait_for, redis_url, prefix, qname, queue, r, jobs, metrics={"maxDataPoints": 5})
    done = queue.get_metrics("completed")
    failed = queue.get_metrics("failed")
    assert done["meta"]["count"] == 4 and failed["meta"]["count"] == 1  # the retry is not counted
    for m in (done, failed):
        assert m["meta"]["prevTS"] > 0 and m["meta"]["prevCount"] == 0
        assert m["count"] == len(m["data"]) and m["count"] <= 1  # one minute boundary at most


def test_without_the_option_nothing_is_recorded(redis_url, prefix, qname, queue, r, wait_for):
    _run(wait_for, redis_url, prefix, qname, queue, r, [("ok", {}, None)])
    assert r.exists(queue.keys.metrics("completed"), queue.keys.metrics("completed") + ":data") == 0
    assert queue.get_metrics("completed") == {"meta": {"count": 0, "prevTS": 0, "prevCount": 0},
                                              "data": [], "count": 0}


def test_minutes_that_passed_become_data_points(redis_url, prefix, qname, queue, r, wait_for):
    key = queue.keys.metrics("completed")
    minutes_ago = int(time.time() * 1000) - 3 * 60000
    r.hset(key, mapping={"count": 7, "prevTS": minutes_ago, "prevCount": 2})
    _run(wait_for, redis_url, prefix, qname, queue, r, [("ok", {}, None)], metrics={"maxDataPoints": 10})
    m = queue.get_metrics("completed")
    # 5 jobs since the last point, then a zero per further minute (3 minutes passed), pushed
    # in that order onto the head of the list, as BullMQ does
    assert m["data"][:3] == [0, 0, 5] and m["meta"]["count"] == 8 and m["meta"]["prevCount"] == 7
    assert queue.get_metrics("completed", 2, 2)["data"] == [5]
    assert queue.get_metrics("completed", 0, 1) == {**m, "data": [0, 0]}
    r.hset(key, "prevTS", int(time.time() * 1000) - 50 * 60000)
    _run(wait_for, redis_url, prefix, qname, queue, r, [("ok", {}, None)], metrics={"maxDataPoints": 10})
    assert queue.get_metrics("completed")["count"] == 10  # trimmed to maxDataPoints


def test_bad_input_is_refused(redis_url, prefix, qname, queue, r):
    with pytest.raises(ValueError, match="'completed' or 'failed'"):
        queue.get_metrics("complete")
    with pytest.raises(ValueError, match="start must be an integer"):
        queue.get_metrics("failed", "0")
    for bad, match in (({"maxDatapoints": 5}, "unknown key"), ({"maxDataPoints": 0}, ">= 1"),
                       ({}, "maxDataPoints is missing"), ([5], "mapping")):
        with pytest.raises(ConfigError, match=match):
            make_worker(redis_url, prefix, qname, _proc, metrics=bad)
    r.hset(queue.keys.metrics("failed"), mapping={"count": "x", "prevTS": "", "prevCount": "3"})
    r.rpush(queue.keys.metrics("failed") + ":data", "4", "junk")
    assert queue.get_metrics("failed") == {"meta": {"count": 0, "prevTS": 0, "prevCount": 3},
                                           "data": [4, 0], "count": 2}
