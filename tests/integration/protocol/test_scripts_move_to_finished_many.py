"""moveToFinishedMany-11 on a real Redis (docs/protocol.md, "Fetching and finishing"): several
finishes in one call leave Redis exactly as the same moveToFinished-14 calls one after the
other, answer each job as its own call would, and an error of one job leaves the others
finished."""
from __future__ import annotations

import pytest
from redis.exceptions import ResponseError

from echomq_gevent.errors import JobLockMismatch, JobNotExist, JobPendingChildren
from echomq_gevent.protocol.keys import QueueKeys
from echomq_gevent.protocol.library import pack
from echomq_gevent.protocol.scripts import FINISH_MANY_MAX, Scripts
from integration.worker_scripts_helpers import (TOKEN, activate, add_delayed, add_waiting, finish_opts, now_ms,
                                               queue_state)

NOW = 1_700_000_000_000


def _scene(r, keys, scripts):
    """Jobs 1-6 active and locked with TOKEN, 7-9 waiting, a delayed job due, a parent
    waiting for child 3, and a job 6 whose finish cannot be written (pending children)."""
    for job_id in ("1", "2", "3", "4", "5", "6"):
        kw = {"timestamp": NOW - 100}
        if job_id == "3":
            kw["parentKey"] = keys.job("p")
            kw["parent"] = '{"id": "p", "queueKey": "%s"}' % keys.base[:-1]
        add_waiting(r, keys, job_id, **kw)
    add_waiting(r, keys, "p", timestamp=NOW - 100)
    r.lrem(keys.wait, 1, "p")
    r.zadd(keys.waiting_children, {"p": 0})
    r.sadd(keys.dependencies("p"), keys.job("3"))
    for job_id in ("1", "2", "3", "4", "5", "6"):
        activate(scripts, job_id, now=NOW)
    r.sadd(keys.dependencies("6"), keys.job("elsewhere"))
    for job_id in ("7", "8", "9"):
        add_waiting(r, keys, job_id, timestamp=NOW - 100)
    add_delayed(r, keys, "d", NOW - 10, timestamp=NOW - 100)


def _calls(scripts):
    ok, other = pack(finish_opts()), pack(finish_opts(token="not-ours"))
    drop = pack(finish_opts(keep={"count": 0}))
    return [
        scripts.move_to_finished_call("1", NOW + 1, "returnvalue", '"a"', "completed", True, ok),
        scripts.move_to_finished_call("2", NOW + 2, "failedReason", "boom", "failed", True, ok,
                                      ["stacktrace", '["at x"]']),
        scripts.move_to_finished_call("3", NOW + 3, "returnvalue", "1", "completed", False, ok),
        scripts.move_to_finished_call("4", NOW + 4, "returnvalue", "null", "completed", True, other),
        scripts.move_to_finished_call("nope", NOW + 5, "returnvalue", "null", "completed", True, ok),
        scripts.move_to_finished_call("6", NOW + 6, "returnvalue", "null", "completed", True, ok),
        scripts.move_to_finished_call("5", NOW + 7, "returnvalue", "2", "completed", True, drop),
    ]


def _answers(results):
    return [type(x).__name__ if isinstance(x, BaseException) else x for x in results]


def test_many_finishes_in_one_call_leave_redis_as_the_calls_one_by_one(r, prefix, qname):
    one, many = QueueKeys(qname + "-one", prefix), QueueKeys(qname + "-many", prefix)
    seq, batch = Scripts(r, one), Scripts(r, many)
    _scene(r, one, seq)
    _scene(r, many, batch)
    expected = seq.run_many(_calls(seq))  # pipelined, one call each
    got = batch.move_to_finished_many(_calls(batch))
    assert _answers(got) == _answers(expected)
    assert [type(x) for x in got[3:6]] == [JobLockMismatch, JobNotExist, JobPendingChildren]
    assert got[0][1] == "7" and got[1][1] == "8"  # each fetched its own next job
    assert queue_state(r, many) == queue_state(r, one)


def test_an_error_of_one_job_is_its_own_and_the_others_are_finished(r, keys, scripts):
    for job_id in ("1", "2", "3"):
        add_waiting(r, keys, job_id)
        activate(scripts, job_id)
    # job 2's key held a hash, now a string: its finish fails with WRONGTYPE after its
    # lock was checked
    fields = r.hgetall(keys.job("2"))
    r.delete(keys.job("2"))
    r.set(keys.job("2"), "not a hash")
    opts = pack(finish_opts())
    calls = [scripts.move_to_finished_call(j, now_ms(), "returnvalue", "1", "completed", False, opts)
             for j in ("1", "2", "3")]
    got = scripts.move_to_finished_many(calls)
    assert got[0] == 0 and got[2] == 0
    assert isinstance(got[1], ResponseError) and "WRONGTYPE" in str(got[1])
    assert r.zrange(keys.completed, 0, -1) == ["1", "3"]
    assert fields  # the job was a real one before


def test_more_finishes_than_one_call_takes_go_in_several_calls_of_one_round_trip(r, keys, scripts):
    n = FINISH_MANY_MAX * 2 + 3
    for i in range(n):
        add_waiting(r, keys, str(i))
        activate(scripts, str(i))
    opts = pack(finish_opts())
    before = r.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0)
    got = scripts.move_to_finished_many([
        scripts.move_to_finished_call(str(i), now_ms(), "returnvalue", "1", "completed", False, opts)
        for i in range(n)])
    assert got == [0] * n
    assert r.zcard(keys.completed) == n
    assert r.info("commandstats")["cmdstat_evalsha"]["calls"] - before == 3


@pytest.mark.parametrize("token", [TOKEN])
def test_a_finish_fetches_with_the_rules_of_a_single_call(r, keys, scripts, token):
    # the queue is paused: finishing fetches nothing, and each answer says so as one call would
    add_waiting(r, keys, "1")
    add_waiting(r, keys, "2")
    activate(scripts, "1")
    activate(scripts, "2")
    add_waiting(r, keys, "3")
    r.hset(keys.meta, "paused", 1)
    opts = pack(finish_opts(token=token))
    got = scripts.move_to_finished_many([
        scripts.move_to_finished_call(j, now_ms(), "returnvalue", "1", "completed", True, opts) for j in ("1", "2")])
    assert got == [[0, 0, 0, 0], [0, 0, 0, 0]]
    assert r.lrange(keys.wait, 0, -1) == ["3"]
