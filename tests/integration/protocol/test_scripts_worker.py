"""moveToActive-11 on a real Redis: what a worker's fetch does to the queue (docs/protocol.md, "Fetching and finishing")."""
from __future__ import annotations

import pytest

from integration.worker_scripts_helpers import (
    LOCK_MS, TOKEN, activate, add_delayed, add_prioritized, add_waiting, as_dict, fetch, now_ms,
)


def test_empty_queue_returns_nothing_and_writes_nothing(r, keys, scripts):
    assert fetch(scripts) == [0, 0, 0, 0]
    assert r.exists(keys.events, keys.active, keys.marker, keys.limiter) == 0


def test_fetch_moves_job_to_active_and_prepares_it(r, keys, scripts, events):
    add_waiting(r, keys, "1", data={"x": 1})
    now = now_ms()
    res = fetch(scripts, now=now, name="w1")
    flat, job_id, ttl, due, ready = res
    assert (job_id, ttl, due, ready) == ("1", 0, 0, 0)
    fields = as_dict(flat)
    assert fields["data"] == '{"x": 1}'
    assert fields["processedOn"] == str(now)
    assert fields["ats"] == "1"
    assert fields["pb"] == "w1"
    assert r.lrange(keys.active, 0, -1) == ["1"]
    assert r.llen(keys.wait) == 0
    assert r.get(keys.lock("1")) == TOKEN
    assert 0 < r.pttl(keys.lock("1")) <= LOCK_MS
    assert events(keys) == [{"event": "active", "jobId": "1", "prev": "waiting"}]
    # the last ready job: no base marker is left to wake a worker for an empty fetch
    assert r.zrange(keys.marker, 0, -1, withscores=True) == []


def test_a_pickup_counts_the_jobs_still_ready_and_leaves_the_base_marker_for_them(r, keys, scripts):
    add_waiting(r, keys, "1")
    add_waiting(r, keys, "2")
    add_prioritized(r, keys, "3", priority=5)
    r.zadd(keys.marker, {"0": 0})
    res = fetch(scripts)
    assert res[1:] == ["1", 0, 0, 2]  # wait's "2" and prioritized's "3" are still ready
    # another blocked worker is woken for them, as BullMQ's pick-up does
    assert r.zrange(keys.marker, 0, -1, withscores=True) == [("0", 0.0)]
    assert fetch(scripts)[1:] == ["2", 0, 0, 1]
    assert r.zrange(keys.marker, 0, -1, withscores=True) == [("0", 0.0)]


def test_the_last_ready_job_says_when_the_next_delayed_job_is_due(r, keys, scripts):
    now = now_ms()
    add_delayed(r, keys, "d", due_ms=now + 60_000, seq=3)
    add_delayed(r, keys, "e", due_ms=now - 5)  # due: promoted by this pick-up and taken
    r.zadd(keys.marker, {"1": now + 60_000})   # the delay marker stays: it is not the base one
    res = fetch(scripts, now=now)
    assert res[1:] == ["e", 0, now + 60_000, 0]
    # the promotion's base marker would only wake a worker for an empty fetch: removed
    assert r.zrange(keys.marker, 0, -1, withscores=True) == [("1", float(now + 60_000))]


def test_without_worker_name_no_pb_and_ats_counts_every_start(r, keys, scripts):
    add_waiting(r, keys, "1")
    r.hset(keys.job("1"), "ats", 4)
    fields = as_dict(activate(scripts, "1")[0])
    assert "pb" not in fields
    assert fields["ats"] == "5"


def _flat_hash(r, key):
    """The hash as one HGETALL reads it, flat and in Redis' order."""
    return [part for pair in r.hgetall(key).items() for part in pair]


@pytest.mark.parametrize("stored, name", [
    ({}, None),                                                    # a fresh job
    ({}, "w1"),
    ({"processedOn": "1", "ats": "4", "pb": "old", "x": "y"}, "w2"),  # a job started before
    ({"ats": "0", "defa": "pending"}, None),
])
def test_the_pickup_reply_is_the_hash_as_written(r, keys, scripts, stored, name):
    # the fields come from the read made before the pick-up's write, patched: they must
    # equal a read made after it, field for field and in the same order
    add_waiting(r, keys, "1")
    if stored:
        r.hset(keys.job("1"), mapping=stored)
    flat = fetch(scripts, name=name)[0]
    assert flat == _flat_hash(r, keys.job("1"))
    assert as_dict(flat)["ats"] == str(int(stored.get("ats", 0)) + 1)


@pytest.mark.parametrize("stored, after", [
    ("1234567890123", "1234567890124"),   # past what the script counts itself: Redis counts it
    ("-3", "-2"),
])
def test_an_integer_ats_of_any_size_is_counted_as_redis_counts(r, keys, scripts, stored, after):
    add_waiting(r, keys, "1")
    r.hset(keys.job("1"), "ats", stored)
    flat = fetch(scripts)[0]
    assert as_dict(flat)["ats"] == after
    assert r.hget(keys.job("1"), "ats") == after
    assert not r.hexists(keys.job("1"), "defa")
    assert flat == _flat_hash(r, keys.job("1"))


def test_a_missing_job_hash_is_created_by_the_pickup(r, keys, scripts):
    r.lpush(keys.wait, "ghost")
    flat = fetch(scripts)[0]
    assert as_dict(flat) == {"processedOn": as_dict(flat)["processedOn"], "ats": "1"}
    assert flat == _flat_hash(r, keys.job("ghost"))


def test_token_zero_takes_no_lock(r, keys, scripts):
    add_waiting(r, keys, "1")
    activate(scripts, "1", token="0")
    assert not r.exists(keys.lock("1"))


def test_wait_is_fifo_and_lifo_jobs_go_first(r, keys, scripts):
    for job_id in ("1", "2", "3"):
        add_waiting(r, keys, job_id)
    add_waiting(r, keys, "L", lifo=True)
    got = [fetch(scripts)[1] for _ in range(4)]
    assert got == ["L", "1", "2", "3"]
    # active holds the newest fetch at its left end
    assert r.lrange(keys.active, 0, -1) == ["3", "2", "1", "L"]


def test_wait_before_prioritized_then_priority_order_then_fifo(r, keys, scripts):
    add_prioritized(r, keys, "p5a", 5)
    add_prioritized(r, keys, "p1", 1)
    add_prioritized(r, keys, "p5b", 5)
    add_waiting(r, keys, "w")
    got = [fetch(scripts)[1] for _ in range(4)]
    assert got == ["w", "p1", "p5a", "p5b"]
    assert r.exists(keys.pc) == 1
    # prioritized empty: the fetch finds nothing and drops the priority counter
    assert fetch(scripts) == [0, 0, 0, 0]
    assert r.exists(keys.pc) == 0


def test_legacy_markers_in_wait_are_skipped_and_removed(r, keys, scripts):
    add_waiting(r, keys, "1")
    r.rpush(keys.wait, "0:123", "0:0")  # the right end is popped first
    assert fetch(scripts)[1] == "1"
    assert r.lrange(keys.active, 0, -1) == ["1"]
    assert r.llen(keys.wait) == 0


def test_legacy_marker_alone_falls_through_to_prioritized(r, keys, scripts):
    r.rpush(keys.wait, "0:0")
    add_prioritized(r, keys, "p", 3)
    assert fetch(scripts)[1] == "p"
    assert r.lrange(keys.active, 0, -1) == ["p"]


# -- delayed promotion ------------------------------------------------------------------
def test_due_delayed_jobs_are_promoted_exactly_at_the_cutoff(r, keys, scripts, events):
    now = now_ms()
    add_delayed(r, keys, "due", now, seq=4095)        # last score of this millisecond
    add_delayed(r, keys, "late", now + 1)             # first score of the next one
    r.hset(keys.meta, "paused", 1)                    # promote only, take nothing
    assert fetch(scripts, now=now) == [0, 0, 0, 0]
    assert r.lrange(keys.wait, 0, -1) == ["due"]
    assert r.zrange(keys.delayed, 0, -1) == ["late"]
    assert r.hget(keys.job("due"), "delay") == "0"
    assert r.hget(keys.job("late"), "delay") == "1000"
    assert events(keys) == [{"event": "waiting", "jobId": "due", "prev": "delayed"}]
    # paused: no marker for the promoted job
    assert r.exists(keys.marker) == 0


def test_promotion_respects_priority_and_adds_marker(r, keys, scripts, events):
    now = now_ms()
    add_delayed(r, keys, "a", now - 10)
    add_delayed(r, keys, "b", now - 5, priority=2)
    add_waiting(r, keys, "w")
    res = fetch(scripts, now=now)
    assert res[1] == "w"  # wait first: promoted jobs go to the back of wait
    assert r.lrange(keys.wait, 0, -1) == ["a"]
    assert r.zscore(keys.prioritized, "b") == 2 * 2 ** 32 + 1
    names = [(e["event"], e["jobId"]) for e in events(keys)]
    assert names == [("waiting", "a"), ("waiting", "b"), ("active", "w")]
    assert r.zscore(keys.marker, "0") == 0


def test_promotion_moves_at_most_1000_per_call(r, keys, scripts):
    now = now_ms()
    pipe = r.pipeline()
    for i in range(1003):
        pipe.hset(keys.job(str(i)), mapping={"name": "n", "data": "{}", "opts": "{}",
                                             "timestamp": now, "delay": 5, "priority": 0})
        pipe.zadd(keys.delayed, {str(i): (now - 100) * 4096 + (i % 4096)})
    pipe.hset(keys.meta, "paused", 1)
    pipe.execute()
    fetch(scripts, now=now)
    assert r.llen(keys.wait) == 1000
    assert r.zcard(keys.delayed) == 3
    fetch(scripts, now=now)
    assert r.llen(keys.wait) == 1003
    assert r.zcard(keys.delayed) == 0


def test_only_future_delayed_jobs_returns_next_due_time(r, keys, scripts):
    now = now_ms()
    add_delayed(r, keys, "d", now + 5000, seq=7)
    assert fetch(scripts, now=now) == [0, 0, 0, now + 5000]
    assert r.llen(keys.active) == 0


# -- the base marker after an empty fetch ----------------------------------------------------
def test_a_fetch_that_finds_nothing_removes_the_stale_base_marker_only(r, keys, scripts):
    add_waiting(r, keys, "1")
    activate(scripts, "1")
    # a base marker for a next job that is not there (BullMQ's pick-up leaves one after
    # the last job; ours does not, see above)
    r.zadd(keys.marker, {"0": 0})
    due = now_ms() + 60000
    add_delayed(r, keys, "d", due)
    r.zadd(keys.marker, {"1": due})
    assert fetch(scripts) == [0, 0, 0, due]
    # the delay marker still says when the delayed job is due
    assert r.zrange(keys.marker, 0, -1, withscores=True) == [("1", float(due))]


def test_a_fetch_held_back_with_jobs_waiting_keeps_the_base_marker(r, keys, scripts):
    for job_id in ("1", "2"):
        add_waiting(r, keys, job_id)
    lim = {"max": 1, "duration": 10000}
    activate(scripts, "1", limiter=lim)
    assert fetch(scripts, limiter=lim)[2] > 0  # rate limited, job 2 still waiting
    assert r.zscore(keys.marker, "0") == 0
    r.hset(keys.meta, "concurrency", 1)
    assert fetch(scripts) == [0, 0, 0, 0]  # maxed
    assert r.zscore(keys.marker, "0") == 0


# -- paused and maxed -------------------------------------------------------------------
def test_paused_queue_returns_nothing(r, keys, scripts):
    add_waiting(r, keys, "1")
    r.hset(keys.meta, "paused", "any value")
    assert fetch(scripts) == [0, 0, 0, 0]
    assert r.lrange(keys.wait, 0, -1) == ["1"]


def test_global_concurrency_maxes_the_queue(r, keys, scripts):
    add_waiting(r, keys, "1")
    add_waiting(r, keys, "2")
    r.hset(keys.meta, "concurrency", 1)
    activate(scripts, "1")
    assert fetch(scripts) == [0, 0, 0, 0]
    r.hset(keys.meta, "concurrency", 2)
    activate(scripts, "2")


# -- rate limits ----------------------------------------------------------------------------
def test_worker_limiter_counts_starts_and_reports_ttl(r, keys, scripts):
    for job_id in ("1", "2", "3"):
        add_waiting(r, keys, job_id)
    lim = {"max": 2, "duration": 5000}
    activate(scripts, "1", limiter=lim)
    assert 0 < r.pttl(keys.limiter) <= 5000
    activate(scripts, "2", limiter=lim)
    assert r.get(keys.limiter) == "2"
    flat, job_id, ttl, due = fetch(scripts, limiter=lim)
    assert (flat, job_id, due) == (0, 0, 0)
    assert 0 < ttl <= 5000
    assert r.lrange(keys.wait, 0, -1) == ["3"]
    # a worker without a limit is not held back by the counter
    activate(scripts, "3")


def test_global_max_wins_over_worker_max(r, keys, scripts):
    add_waiting(r, keys, "1")
    add_waiting(r, keys, "2")
    r.hset(keys.meta, mapping={"max": 1, "duration": 4000})
    lim = {"max": 10, "duration": 3000}
    activate(scripts, "1", limiter=lim)
    res = fetch(scripts, limiter=lim)
    assert res[0] == 0 and 0 < res[2] <= 3000  # worker duration wins over meta duration
    # global max also applies to a worker that has no limiter of its own
    res = fetch(scripts)
    assert res[0] == 0 and res[2] > 0


def test_meta_duration_used_when_worker_has_no_limiter(r, keys, scripts):
    add_waiting(r, keys, "1")
    r.hset(keys.meta, mapping={"max": 5, "duration": 60000})
    activate(scripts, "1")
    assert r.get(keys.limiter) == "1"
    assert 50000 < r.pttl(keys.limiter) <= 60000


def test_manual_rate_limit_only_holds_workers_with_a_maximum(r, keys, scripts):
    add_waiting(r, keys, "1")
    add_waiting(r, keys, "2")
    r.set(keys.limiter, 9007199254740991, px=20000)
    res = fetch(scripts, limiter={"max": 100, "duration": 1000})
    assert res[0] == 0 and 10000 < res[2] <= 20000
    activate(scripts, "1")  # no maximum configured: the key is ignored


def test_deferred_failure_jobs_skip_the_limiter(r, keys, scripts):
    add_waiting(r, keys, "doomed", defa="job stalled more than allowable limit")
    add_waiting(r, keys, "ok")
    lim = {"max": 1, "duration": 10000}
    fields = as_dict(activate(scripts, "doomed", limiter=lim)[0])
    assert fields["defa"] == "job stalled more than allowable limit"
    assert r.exists(keys.limiter) == 0
    activate(scripts, "ok", limiter=lim)
    assert r.get(keys.limiter) == "1"


def test_rate_limit_is_checked_before_paused(r, keys, scripts):
    add_waiting(r, keys, "1")
    r.set(keys.limiter, 3, px=10000)
    r.hset(keys.meta, "paused", 1)
    res = fetch(scripts, limiter={"max": 3, "duration": 10000})
    assert res[2] > 0


def test_limiter_counter_without_expiry_does_not_block(r, keys, scripts):
    add_waiting(r, keys, "1")
    r.set(keys.limiter, 50)  # no TTL: PTTL is -1, so not rate limited
    activate(scripts, "1", limiter={"max": 2, "duration": 1000})


@pytest.mark.parametrize("with_name", [True, False])
def test_fetch_opts_packing_roundtrip(r, keys, scripts, with_name):
    add_waiting(r, keys, "1")
    fields = as_dict(activate(scripts, "1", name="n1" if with_name else None)[0])
    assert ("pb" in fields) is with_name
