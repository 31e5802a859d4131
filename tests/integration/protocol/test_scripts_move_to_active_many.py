"""moveToActiveMany-11 on a real Redis (docs/protocol.md, "Fetching and finishing"): several
pick-ups in one call leave Redis exactly as the same moveToActive-11 calls one after the
other, answer each as its own call would, stop where a worker would stop asking, and an
error ends the answers after the jobs already taken."""
from __future__ import annotations

from typing import Any, Callable, List, Optional

import pytest
from redis.exceptions import ResponseError

from echomq_gevent.protocol.keys import QueueKeys
from echomq_gevent.protocol.scripts import Scripts
from integration.worker_scripts_helpers import (LOCK_MS, add_delayed, add_prioritized, add_waiting, as_dict,
                                               queue_state)

NOW = 1_700_000_000_000
PREFIX = "w1:"


def _one_by_one(scripts: Scripts, most: int, now: int = NOW, **kw: Any) -> List[Any]:
    """What a worker asking one pick-up at a time gets: moveToActive-11 with the tokens
    the batch would use, until one takes no job, leaves nothing ready, or ``most``."""
    answers = []
    for i in range(most):
        res = scripts.move_to_active(f"{PREFIX}{i}", LOCK_MS, now, **kw)
        answers.append(res)
        if not res[1] or res[4] == 0:
            break
    return answers


def _scene(r, keys):
    """Three waiting jobs, two prioritized, one delayed job due (promoted by the first
    pick-up) and one due later, and the markers an add leaves."""
    for job_id in ("w1", "w2", "w3"):
        add_waiting(r, keys, job_id, timestamp=NOW - 100)
    add_prioritized(r, keys, "p1", 5, timestamp=NOW - 100)
    add_prioritized(r, keys, "p2", 1, timestamp=NOW - 100)
    add_delayed(r, keys, "d1", NOW - 10, timestamp=NOW - 100)
    add_delayed(r, keys, "d2", NOW + 5000, timestamp=NOW - 100)
    r.zadd(keys.marker, {"0": 0, "1": NOW - 10})


def _compare(r, prefix, qname, scene: Callable[[Any, QueueKeys], None], most: int, **kw: Any) -> List[Any]:
    one, many = QueueKeys(qname + "-one", prefix), QueueKeys(qname + "-many", prefix)
    seq, batch = Scripts(r, one), Scripts(r, many)
    scene(r, one)
    scene(r, many)
    expected = _one_by_one(seq, most, **kw)
    got = batch.move_to_active_many(PREFIX, 0, most, LOCK_MS, NOW, **kw)
    assert _ttl_blind(got) == _ttl_blind(expected)
    assert queue_state(r, many) == queue_state(r, one)
    return got


def _ttl_blind(answers: List[Any]) -> List[Any]:
    """The answers with a rate limit's time to live (read from the clock) as "ttl"."""
    return [[a[0], a[1], "ttl", a[3]] if a[1] == 0 and a[2] > 0 else a for a in answers]


def test_a_batch_takes_every_ready_job_as_the_calls_one_by_one_and_stops_at_the_last(r, prefix, qname):
    got = _compare(r, prefix, qname, _scene, 10)
    # wait from its right end (the delayed job due was promoted to its left end), then
    # prioritized in priority order
    assert [a[1] for a in got] == ["w1", "w2", "w3", "d1", "p2", "p1"]
    assert [a[4] for a in got] == [5, 4, 3, 2, 1, 0]
    # the last pick-up left nothing ready: it removed the base marker and says when the
    # next delayed job is due (d2's score is due * 4096)
    assert got[-1][3] == NOW + 5000
    many = QueueKeys(qname + "-many", prefix)
    assert r.zscore(many.marker, "0") is None
    # each job is locked with its own token, numbered from the first
    assert [r.get(many.lock(a[1])) for a in got] == [f"{PREFIX}{i}" for i in range(6)]
    assert as_dict(got[0][0])["processedOn"] == str(NOW)


def test_a_batch_stops_at_its_most_with_jobs_still_ready(r, prefix, qname):
    got = _compare(r, prefix, qname, _scene, 2)
    assert [a[1] for a in got] == ["w1", "w2"]
    assert got[-1][4] == 4
    assert r.zscore(QueueKeys(qname + "-many", prefix).marker, "0") is not None


def test_a_batch_stops_where_the_rate_limit_does(r, prefix, qname):
    got = _compare(r, prefix, qname, _scene, 10, limiter={"max": 2, "duration": 60_000})
    assert [a[1] for a in got] == ["w1", "w2", 0]
    assert 0 < got[-1][2] <= 60_000  # the limit's time to live, as a single call says


@pytest.mark.parametrize("meta", [{"paused": 1}, {"concurrency": 0}])
def test_a_paused_or_maxed_queue_answers_as_one_call(r, prefix, qname, meta):
    def scene(r, keys):
        _scene(r, keys)
        r.hset(keys.meta, mapping=meta)

    got = _compare(r, prefix, qname, scene, 10)
    assert got == [[0, 0, 0, 0]]


@pytest.mark.parametrize("later", [None, NOW + 700])
def test_nothing_ready_answers_as_one_call(r, prefix, qname, later: Optional[int]):
    def scene(r, keys):
        if later is not None:
            add_delayed(r, keys, "d", later, timestamp=NOW - 100)

    got = _compare(r, prefix, qname, scene, 10)
    assert got == [[0, 0, 0, later or 0]]


def test_an_error_ends_the_answers_after_the_jobs_already_taken(r, keys, scripts):
    add_waiting(r, keys, "a")
    add_waiting(r, keys, "b")
    # counting what is still ready fails once a job is taken (prioritized is not a zset)
    r.set(keys.prioritized, "not a zset")
    got = scripts.move_to_active_many(PREFIX, 7, 10, LOCK_MS, NOW)
    assert len(got) == 2
    assert got[0][1] == "a" and r.get(keys.lock("a")) == f"{PREFIX}7"
    assert isinstance(got[1], ResponseError) and "WRONGTYPE" in str(got[1])
    assert r.lrange(keys.active, 0, -1) == ["a"] and r.lrange(keys.wait, 0, -1) == ["b"]

    # a pick-up that fails before taking a job answers only its error
    r.delete(keys.prioritized)
    r.set(keys.meta, "not a hash")
    got = scripts.move_to_active_many(PREFIX, 8, 10, LOCK_MS, NOW)
    assert len(got) == 1 and isinstance(got[0], ResponseError)
    assert r.lrange(keys.wait, 0, -1) == ["b"]
