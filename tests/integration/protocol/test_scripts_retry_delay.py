"""moveToDelayed-11, retryJob-11 and moveJobFromActiveToWait-9 on a real Redis
(docs/protocol.md, "Fetching and finishing")."""
from __future__ import annotations

import json

import pytest

from echomq_gevent.errors import JobLockMismatch, JobLockNotExist, JobNotExist, JobNotInState
from integration.worker_scripts_helpers import (
    LOCK_MS, TOKEN, activate, add_delayed, add_prioritized, add_waiting, as_dict, fetch, make_job, now_ms,
)

FETCH_OPTS = {"token": TOKEN, "lockDuration": LOCK_MS}


def running(r, keys, scripts, job_id, **kw):
    add_waiting(r, keys, job_id, **kw)
    activate(scripts, job_id)
    return job_id


# -- moveToDelayed ----------------------------------------------------------------------------
def test_move_to_delayed_error_codes(r, keys, scripts):
    with pytest.raises(JobNotExist):
        scripts.move_to_delayed("nope", now_ms(), TOKEN, 100)
    running(r, keys, scripts, "1")
    with pytest.raises(JobLockMismatch):
        scripts.move_to_delayed("1", now_ms(), "other", 100)
    r.delete(keys.lock("1"))
    with pytest.raises(JobLockNotExist):
        scripts.move_to_delayed("1", now_ms(), TOKEN, 100)
    r.lrem(keys.active, 0, "1")
    with pytest.raises(JobNotInState):
        scripts.move_to_delayed("1", now_ms(), "0", 100)


def test_move_to_delayed_counts_attempt_and_sets_delay_and_marker(r, keys, scripts, events):
    running(r, keys, scripts, "1")
    r.sadd(keys.stalled, "1")
    now = now_ms()
    stack = json.dumps(["e1"])
    res = scripts.move_to_delayed("1", now, TOKEN, 1500,
                                  fields_to_update=["failedReason", "oops", "stacktrace", stack])
    assert res == 0
    due = now + 1500
    job = r.hgetall(keys.job("1"))
    assert (job["atm"], job["delay"], job["failedReason"], job["stacktrace"]) == ("1", "1500", "oops", stack)
    assert r.zscore(keys.delayed, "1") == due * 4096
    assert r.llen(keys.active) == 0
    assert r.exists(keys.lock("1")) == 0 and r.sismember(keys.stalled, "1") == 0
    assert events(keys)[-1] == {"event": "delayed", "jobId": "1", "delay": str(due)}
    assert r.zscore(keys.marker, "1") == due


def test_move_to_delayed_skip_attempt_and_same_millisecond_order(r, keys, scripts):
    running(r, keys, scripts, "1")
    running(r, keys, scripts, "2")
    now = now_ms()
    scripts.move_to_delayed("1", now, TOKEN, 1000, skip_attempt=True)
    scripts.move_to_delayed("2", now, TOKEN, 1000, skip_attempt=True)
    assert r.hget(keys.job("1"), "atm") is None
    assert r.zrange(keys.delayed, 0, -1, withscores=True) == [
        ("1", float((now + 1000) * 4096)), ("2", float((now + 1000) * 4096 + 1))]


def test_move_to_delayed_fetch_next_returns_a_job(r, keys, scripts):
    running(r, keys, scripts, "1")
    add_waiting(r, keys, "2")
    res = scripts.move_to_delayed("1", now_ms(), TOKEN, 5000, fetch_next=True,
                                  fetch_opts=dict(FETCH_OPTS, name="wn"))
    assert res[1:] == ["2", 0, 0]
    assert as_dict(res[0])["pb"] == "wn"
    # a job was handed over: the delay marker is left alone
    assert r.zscore(keys.marker, "1") is None


def test_move_to_delayed_fetch_next_without_job_sets_marker(r, keys, scripts):
    running(r, keys, scripts, "1")
    now = now_ms()
    res = scripts.move_to_delayed("1", now, TOKEN, 5000, fetch_next=True, fetch_opts=FETCH_OPTS)
    assert res == 0
    assert r.zscore(keys.marker, "1") == now + 5000


def test_move_to_delayed_with_zero_delay_and_fetch_runs_it_again(r, keys, scripts, events):
    running(r, keys, scripts, "1")
    res = scripts.move_to_delayed("1", now_ms(), TOKEN, 0, skip_attempt=True, fetch_next=True,
                                  fetch_opts=FETCH_OPTS)
    assert res[1] == "1"
    assert events.names(keys)[-3:] == ["delayed", "waiting", "active"]


# -- retryJob ----------------------------------------------------------------------------------------
def test_retry_job_error_codes(r, keys, scripts):
    with pytest.raises(JobNotExist):
        scripts.retry_job("nope", now_ms(), TOKEN)
    running(r, keys, scripts, "1")
    with pytest.raises(JobLockMismatch):
        scripts.retry_job("1", now_ms(), "other")
    r.delete(keys.lock("1"))
    with pytest.raises(JobLockNotExist):
        scripts.retry_job("1", now_ms(), TOKEN)
    r.lrem(keys.active, 0, "1")
    with pytest.raises(JobNotInState):
        scripts.retry_job("1", now_ms(), "0")


def test_retry_job_requeues_at_the_back_and_counts_attempt(r, keys, scripts, events):
    running(r, keys, scripts, "1")
    add_waiting(r, keys, "2")
    r.delete(keys.marker)
    assert scripts.retry_job("1", now_ms(), TOKEN, fields_to_update=["failedReason", "x"]) == 0
    job = r.hgetall(keys.job("1"))
    assert job["atm"] == "1" and job["failedReason"] == "x"
    assert r.lrange(keys.wait, 0, -1) == ["1", "2"]  # 2 runs first
    assert r.exists(keys.lock("1")) == 0
    assert events(keys)[-1] == {"event": "waiting", "jobId": "1", "prev": "active"}
    assert r.zscore(keys.marker, "0") == 0


def test_retry_job_lifo_goes_first(r, keys, scripts):
    running(r, keys, scripts, "1")
    add_waiting(r, keys, "2")
    scripts.retry_job("1", now_ms(), TOKEN, lifo=True)
    assert fetch(scripts)[1] == "1"


def test_retry_job_prioritized_gets_a_fresh_counter(r, keys, scripts):
    add_prioritized(r, keys, "p", 2)
    activate(scripts, "p")
    add_prioritized(r, keys, "q", 2)  # counter 2
    scripts.retry_job("p", now_ms(), TOKEN)
    assert r.zrange(keys.prioritized, 0, -1, withscores=True) == [
        ("q", float(2 * 2 ** 32 + 2)), ("p", float(2 * 2 ** 32 + 3))]


def test_retry_job_promotes_due_delayed_jobs_first(r, keys, scripts, events):
    running(r, keys, scripts, "1")
    now = now_ms()
    add_delayed(r, keys, "d", now - 1)
    scripts.retry_job("1", now, TOKEN)
    assert r.lrange(keys.wait, 0, -1) == ["1", "d"]
    assert [(e["event"], e["jobId"]) for e in events(keys)[-2:]] == [("waiting", "d"),
                                                                        ("waiting", "1")]


def test_retry_job_paused_adds_no_marker(r, keys, scripts):
    running(r, keys, scripts, "1")
    r.delete(keys.marker)
    r.hset(keys.meta, "paused", 1)
    scripts.retry_job("1", now_ms(), TOKEN)
    assert r.lrange(keys.wait, 0, -1) == ["1"]
    assert r.exists(keys.marker) == 0


def test_retry_job_frees_global_concurrency_for_the_marker(r, keys, scripts):
    running(r, keys, scripts, "1")
    r.delete(keys.marker)
    r.hset(keys.meta, "concurrency", 1)  # maxed while the job is active, not after
    scripts.retry_job("1", now_ms(), TOKEN)
    assert r.zscore(keys.marker, "0") == 0


# -- moveJobFromActiveToWait --------------------------------------------------------------------
def test_hand_back_error_codes(r, keys, scripts):
    with pytest.raises(JobNotExist):
        scripts.move_job_from_active_to_wait("nope", TOKEN)
    running(r, keys, scripts, "1")
    with pytest.raises(JobLockMismatch):
        scripts.move_job_from_active_to_wait("1", "other")
    r.delete(keys.lock("1"))
    with pytest.raises(JobLockNotExist):
        scripts.move_job_from_active_to_wait("1", TOKEN)


def test_hand_back_puts_job_at_the_front_without_counting(r, keys, scripts, events):
    running(r, keys, scripts, "1")
    add_waiting(r, keys, "2")
    r.delete(keys.marker)
    assert scripts.move_job_from_active_to_wait("1", TOKEN) == 0
    assert r.lrange(keys.wait, 0, -1) == ["2", "1"]
    assert r.hget(keys.job("1"), "atm") is None
    assert r.exists(keys.lock("1")) == 0 and r.llen(keys.active) == 0
    assert r.zscore(keys.marker, "0") == 0
    assert events(keys)[-1] == {"event": "waiting", "jobId": "1", "prev": "active"}
    assert fetch(scripts)[1] == "1"


def test_hand_back_prioritized_goes_ahead_of_its_priority(r, keys, scripts):
    add_prioritized(r, keys, "p", 3)
    activate(scripts, "p")
    add_prioritized(r, keys, "q", 3)
    scripts.move_job_from_active_to_wait("p", TOKEN)
    assert r.zscore(keys.prioritized, "p") == 3 * 2 ** 32
    assert fetch(scripts)[1] == "p"


def test_hand_back_returns_limiter_ttl(r, keys, scripts):
    running(r, keys, scripts, "1")
    r.set(keys.limiter, 9007199254740991, px=8000)
    ttl = scripts.move_job_from_active_to_wait("1", TOKEN)
    assert 0 < ttl <= 8000


def test_hand_back_of_a_job_not_active_only_reports_ttl(r, keys, scripts):
    make_job(r, keys, "1")
    assert scripts.move_job_from_active_to_wait("1", "0") == 0
    assert r.llen(keys.wait) == 0
    assert r.exists(keys.events) == 0


def test_hand_back_paused_adds_no_marker(r, keys, scripts):
    running(r, keys, scripts, "1")
    r.delete(keys.marker)
    r.hset(keys.meta, "paused", 1)
    scripts.move_job_from_active_to_wait("1", TOKEN)
    assert r.lrange(keys.wait, 0, -1) == ["1"]
    assert r.exists(keys.marker) == 0
