"""updateJobSchedulerMany-11 on a real Redis (docs/protocol.md, "Job schedulers"): the next
runs of several taken runs created in one call leave Redis exactly as the same
updateJobScheduler-12 calls one after the other, each answered as its own call would be, and
an error of one run leaves the others created."""
from __future__ import annotations

import pytest
from redis.exceptions import ResponseError

from echomq_gevent import Queue
from echomq_gevent.protocol import schedulers as protocol_schedulers
from echomq_gevent.queue import schedulers as queue_schedulers
from echomq_gevent.queue.job import Job
from integration.worker_scripts_helpers import queue_state

NOW = 1_900_000_000_000


@pytest.fixture
def frozen(monkeypatch):
    """One clock for both queues, so their job hashes and events can be compared."""
    monkeypatch.setattr(queue_schedulers, "now_ms", lambda: NOW)


def _scene(r, redis_url, prefix, name):
    """Runs taken from four schedulers (two every, one cron, one removed after its run was
    taken), one of them twice, and a scheduler whose hash is not a hash; the calls that
    create the runs after them, in the order a worker would send them."""
    queue = Queue(name, connection=redis_url, prefix=prefix)
    for sid, repeat in (("e1", {"every": 60_000}), ("e2", {"every": 5_000}), ("c1", {"pattern": "7 * * * * *"}),
                        ("gone", {"every": 60_000}), ("bad", {"every": 60_000})):
        queue.upsert_job_scheduler(sid, repeat, {"name": sid, "data": {"s": sid}})
    scripts = queue.scripts
    runs = {}
    for job_id in r.lrange(queue.keys.wait, 0, -1) + r.zrange(queue.keys.delayed, 0, -1):
        job = Job.from_fields(scripts, job_id, r.hgetall(queue.keys.job(job_id)))
        runs[job.repeat_job_key] = job
    calls = [queue_schedulers.next_run_call(scripts, runs[sid], NOW) for sid in ("e1", "c1", "gone", "bad", "e2")]
    calls.insert(2, calls[0])  # e1's run again: no longer the upcoming one
    queue.remove_job_scheduler("gone")
    bad = queue.keys.scheduler("bad")
    r.delete(bad)
    r.set(bad, "not a hash")
    return queue, calls


def _shape(answers):
    return [type(x).__name__ if isinstance(x, BaseException) else x for x in answers]


def _one_call_and_one_by_one(one, seq_calls, many, many_calls):
    """The answers of the calls one by one on ``one``, and of the same calls in one
    ``updateJobSchedulerMany`` on ``many``."""
    expected = []
    for c in seq_calls:
        try:
            res = one.scripts.call(c.name, c.keys, c.args)
            expected.append(None if res is None else str(res))
        except ResponseError as exc:
            expected.append(exc)
    return expected, many.scripts.schedulers.update_job_scheduler_many(many_calls)


def test_many_next_runs_in_one_call_leave_redis_as_the_calls_one_by_one(r, redis_url, prefix, qname, frozen):
    one, seq_calls = _scene(r, redis_url, prefix, qname + "-one")
    many, many_calls = _scene(r, redis_url, prefix, qname + "-many")
    expected, got = _one_call_and_one_by_one(one, seq_calls, many, many_calls)
    shape = _shape(got)
    assert shape == _shape(expected)
    assert shape[:4] == ["repeat:e1:%d" % (NOW + 60_000), shape[1], None, None]
    assert shape[1].startswith("repeat:c1:") and shape[5].startswith("repeat:e2:")
    # the error stays with its run; the run after it is created
    assert isinstance(got[4], ResponseError) and "WRONGTYPE" in str(got[4])
    assert queue_state(r, many.keys) == queue_state(r, one.keys)


def test_more_runs_than_one_call_takes_go_in_several_calls_of_one_round_trip(r, queue, frozen):
    n = protocol_schedulers.UPDATE_MANY_MAX * 2 + 1
    for i in range(n):
        queue.upsert_job_scheduler(f"s{i}", {"every": 60_000}, {"name": "s"})
    scripts = queue.scripts
    calls = [queue_schedulers.next_run_call(scripts, Job.from_fields(scripts, job_id, r.hgetall(queue.keys.job(job_id))),
                                            NOW)
             for job_id in r.lrange(queue.keys.wait, 0, -1)]
    before = r.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0)
    got = scripts.schedulers.update_job_scheduler_many(calls)
    assert len(got) == n and all(x and x.startswith("repeat:s") for x in got)
    assert r.zcard(queue.keys.delayed) == n
    assert r.info("commandstats")["cmdstat_evalsha"]["calls"] - before == 3


def test_a_marker_that_cannot_be_moved_fails_the_delayed_runs_as_the_calls_one_by_one(r, redis_url, prefix, qname,
                                                                                      frozen):
    """The call moves the delay marker once, after all its runs: when that fails (a marker
    key of the wrong type), each run that went to delayed answers the error, as its own
    call would have, and Redis is left as by those calls."""
    one, seq_calls = _scene(r, redis_url, prefix, qname + "-one")
    many, many_calls = _scene(r, redis_url, prefix, qname + "-many")
    for queue in (one, many):
        r.delete(queue.keys.marker)
        r.set(queue.keys.marker, "not a sorted set")
    expected, got = _one_call_and_one_by_one(one, seq_calls, many, many_calls)
    shape = _shape(got)
    assert shape == _shape(expected)
    assert "ResponseError" in shape and any(isinstance(x, str) for x in shape)
    assert queue_state(r, many.keys) == queue_state(r, one.keys)
