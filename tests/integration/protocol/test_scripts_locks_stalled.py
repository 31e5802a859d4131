"""extendLock-2, extendLocks-1 and moveStalledJobsToWait-9 on a real Redis (docs/protocol.md, "Fetching and finishing")."""
from __future__ import annotations

import pytest

from integration.worker_scripts_helpers import (
    TOKEN, activate, add_waiting, fetch, make_job, now_ms,
)

INTERVAL = 30000


def running(r, keys, scripts, job_id, token=TOKEN, **kw):
    add_waiting(r, keys, job_id, **kw)
    activate(scripts, job_id, token=token)
    return job_id


# -- locks ---------------------------------------------------------------------------------------
def test_extend_lock(r, keys, scripts):
    running(r, keys, scripts, "1")
    r.pexpire(keys.lock("1"), 500)
    r.sadd(keys.stalled, "1")
    assert scripts.extend_lock("1", TOKEN, 60000) is True
    assert r.pttl(keys.lock("1")) > 50000
    assert r.sismember(keys.stalled, "1") == 0
    assert scripts.extend_lock("1", "other", 60000) is False
    assert r.get(keys.lock("1")) == TOKEN
    r.delete(keys.lock("1"))
    assert scripts.extend_lock("1", TOKEN, 60000) is False
    assert r.exists(keys.lock("1")) == 0


def test_extend_locks_returns_the_ids_that_failed(r, keys, scripts):
    for job_id in ("a", "b", "c"):
        running(r, keys, scripts, job_id, token="t-" + job_id)
        r.pexpire(keys.lock(job_id), 500)
    r.sadd(keys.stalled, "a", "b", "c")
    r.delete(keys.lock("c"))
    failed = scripts.extend_locks(["a", "b", "c"], ["t-a", "wrong", "t-c"], 60000)
    assert failed == ["b", "c"]
    assert r.pttl(keys.lock("a")) > 50000
    assert r.pttl(keys.lock("b")) <= 500
    assert r.get(keys.lock("b")) == "t-b"
    assert r.exists(keys.lock("c")) == 0
    assert r.smembers(keys.stalled) == {"b", "c"}
    assert scripts.extend_locks([], [], 1000) == []


# -- stall check -------------------------------------------------------------------------------
def check(scripts, max_stalled=1, now=None):
    return scripts.move_stalled_jobs_to_wait(max_stalled, now or now_ms(), INTERVAL)


def test_check_is_throttled_by_the_stalled_check_key(r, keys, scripts):
    running(r, keys, scripts, "1")
    now = now_ms()
    assert check(scripts, now=now) == []
    assert r.get(keys.stalled_check) == str(now)
    assert 0 < r.pttl(keys.stalled_check) <= INTERVAL
    assert r.smembers(keys.stalled) == {"1"}
    r.delete(keys.lock("1"))
    # within the interval nothing happens, not even the sweep
    assert check(scripts) == []
    assert r.lrange(keys.active, 0, -1) == ["1"]


def test_two_phase_detection_moves_unlocked_job_back(r, keys, scripts, events):
    running(r, keys, scripts, "1")
    running(r, keys, scripts, "2")
    check(scripts)                       # mark: both active jobs are suspects
    r.delete(keys.lock("1"))            # job 1's worker died
    r.delete(keys.stalled_check)
    r.delete(keys.marker)
    assert check(scripts) == ["1"]
    assert r.lrange(keys.active, 0, -1) == ["2"]
    assert r.lrange(keys.wait, 0, -1) == ["1"]
    assert r.hget(keys.job("1"), "stc") == "1"
    assert r.hget(keys.job("1"), "defa") is None
    assert events(keys)[-2:] == [{"event": "waiting", "jobId": "1", "prev": "active"},
                                    {"event": "stalled", "jobId": "1"}]
    assert r.zscore(keys.marker, "0") == 0
    # job 2 still active: marked again for the next check
    assert r.smembers(keys.stalled) == {"2"}


def test_job_marked_but_unlocked_only_after_the_mark_is_not_yet_stalled(r, keys, scripts):
    running(r, keys, scripts, "1")
    r.delete(keys.lock("1"))
    assert check(scripts) == []          # first sight: only marked
    assert r.lrange(keys.active, 0, -1) == ["1"]
    r.delete(keys.stalled_check)
    assert check(scripts) == ["1"]


def test_lock_renewal_unmarks_a_job(r, keys, scripts):
    running(r, keys, scripts, "1")
    check(scripts)
    scripts.extend_locks(["1"], [TOKEN], 30000)
    r.delete(keys.lock("1"))
    r.delete(keys.stalled_check)
    assert check(scripts) == []


def test_stalled_too_often_gets_deferred_failure(r, keys, scripts):
    running(r, keys, scripts, "1")
    check(scripts)
    r.delete(keys.lock("1"), keys.stalled_check)
    assert check(scripts, max_stalled=0) == ["1"]
    assert r.hget(keys.job("1"), "defa") == "job stalled more than allowable limit"
    assert r.lrange(keys.wait, 0, -1) == ["1"]


def test_stalled_count_accumulates_up_to_the_limit(r, keys, scripts):
    running(r, keys, scripts, "1")
    for round_no in (1, 2):
        if round_no == 2:
            activate(scripts, "1")
        check(scripts)
        r.delete(keys.lock("1"), keys.stalled_check)
        assert check(scripts, max_stalled=1) == ["1"]
        r.delete(keys.stalled_check)
    assert r.hget(keys.job("1"), "stc") == "2"
    assert r.hget(keys.job("1"), "defa") == "job stalled more than allowable limit"


@pytest.mark.parametrize("scheduler", ["hash", "legacy-zset"])
def test_live_scheduler_jobs_never_get_deferred_failure(r, keys, scripts, scheduler):
    running(r, keys, scripts, "repeat:s1:1000", rjk="s1")
    if scheduler == "hash":
        r.hset(keys.scheduler("s1"), mapping={"name": "tick", "every": 1000})
    else:
        r.zadd(keys.repeat, {"s1": 1000})
    check(scripts)
    r.delete(keys.lock("repeat:s1:1000"), keys.stalled_check)
    assert check(scripts, max_stalled=0) == ["repeat:s1:1000"]
    assert r.hget(keys.job("repeat:s1:1000"), "defa") is None


def test_job_of_a_removed_scheduler_does_get_deferred_failure(r, keys, scripts):
    running(r, keys, scripts, "repeat:gone:1", rjk="gone")
    check(scripts)
    r.delete(keys.lock("repeat:gone:1"), keys.stalled_check)
    check(scripts, max_stalled=0)
    assert r.hget(keys.job("repeat:gone:1"), "defa") is not None


def test_legacy_markers_and_finished_jobs_among_suspects(r, keys, scripts):
    r.lpush(keys.active, "0:1")
    r.sadd(keys.stalled, "0:1", "gone")   # "gone" finished since it was marked
    make_job(r, keys, "gone")
    assert check(scripts) == []
    assert r.llen(keys.active) == 0
    assert r.llen(keys.wait) == 0
    assert r.exists(keys.stalled) == 0


def test_stalled_job_in_paused_queue_gets_no_marker(r, keys, scripts):
    running(r, keys, scripts, "1")
    check(scripts)
    r.delete(keys.lock("1"), keys.stalled_check, keys.marker)
    r.hset(keys.meta, "paused", 1)
    assert check(scripts) == ["1"]
    assert r.exists(keys.marker) == 0


def test_mark_phase_handles_many_active_jobs(r, keys, scripts):
    ids = [str(i) for i in range(7005)]
    r.lpush(keys.active, *ids)
    check(scripts)
    assert r.scard(keys.stalled) == 7005


def test_stalled_job_with_deferred_failure_is_refetched_with_it(r, keys, scripts):
    running(r, keys, scripts, "1")
    check(scripts)
    r.delete(keys.lock("1"), keys.stalled_check)
    check(scripts, max_stalled=0)
    res = fetch(scripts, limiter={"max": 1, "duration": 10000})
    assert res[1] == "1"
    assert dict(zip(res[0][::2], res[0][1::2]))["defa"] == "job stalled more than allowable limit"
    assert r.exists(keys.limiter) == 0


def test_check_trims_events(r, keys, scripts):
    r.hset(keys.meta, "opts.maxLenEvents", 5)
    pipe = r.pipeline()
    for i in range(800):
        pipe.xadd(keys.events, {"event": "x"})
    pipe.execute()
    check(scripts)
    assert r.xlen(keys.events) < 800
