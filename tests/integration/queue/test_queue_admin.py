"""Queue and Job admin calls on a real Redis: clean, retry, promote, change delay/priority,
state probes (also through ``getState-8`` for servers without LPOS)."""
from __future__ import annotations

from typing import List

import pytest

from echomq_gevent import Job, Queue
from echomq_gevent.errors import InvalidOptionError, JobNotExist, JobNotInState
from echomq_gevent.queue.job import _lpos_support, parse_redis_version, server_has_lpos
from integration.queue_helpers import TOKEN, now_ms, take

@pytest.fixture
def q(queue):
    return queue


def finish(q: Queue, job_id: str, target: str = "completed", value: str = '"ok"',
           at: int = 0) -> None:
    field = "returnvalue" if target == "completed" else "failedReason"
    q.scripts.move_to_finished(job_id, at or now_ms(), field, value, target, False,
                               {"token": TOKEN, "keepJobs": {"count": -1}, "lockDuration": 30000,
                                "attempts": 1, "maxMetricsSize": ""})


def add_finished(q: Queue, n: int, target: str = "completed", at: int = 0) -> List[str]:
    ids = []
    for i in range(n):
        q.add("j", {"i": i})
        job_id = take(q)
        finish(q, job_id, target, '"ok"' if target == "completed" else "boom", at)
        ids.append(job_id)
    return ids




# -- clean ------------------------------------------------------------------------------
def test_clean_completed_older_than_grace(q, r, events):
    old = add_finished(q, 3, at=now_ms() - 60000)
    fresh = add_finished(q, 2)
    deleted = q.clean(30000)
    assert sorted(deleted) == sorted(old)
    assert sorted(r.zrange(q.keys.completed, 0, -1)) == sorted(fresh)
    for job_id in old:
        assert not r.exists(q.keys.job(job_id))
    cleaned = [e for e in events(q) if e["event"] == "cleaned"]
    assert cleaned[-1]["count"] == "3"


def test_clean_with_a_limit_stops_there(q, r):
    add_finished(q, 5, target="failed", at=now_ms() - 10000)
    first = q.clean(0, limit=2, type="failed")
    assert len(first) == 2
    assert r.zcard(q.keys.failed) == 3
    assert sorted(first + q.clean(0, type="failed")) == [str(i) for i in range(1, 6)]
    assert r.zcard(q.keys.failed) == 0


def test_clean_waiting_delayed_prioritized_paused_active(q, r):
    w = q.add("w", 1, {"timestamp": now_ms() - 60000})
    q.add("w-fresh", 1)
    d = q.add("d", 1, {"delay": 60000, "timestamp": now_ms() - 60000})
    p = q.add("p", 1, {"priority": 3, "timestamp": now_ms() - 60000})
    assert q.clean(1000, type="waiting") == [w.id]
    assert q.clean(1000, type="delayed") == [d.id]
    assert q.clean(1000, type="prioritized") == [p.id]
    assert q.get_job_counts("waiting", "delayed", "prioritized") == {
        "waiting": 1, "delayed": 0, "prioritized": 0}
    # legacy paused list: cleaned like wait
    r.rpush(q.keys.paused, "legacy")
    r.hset(q.keys.job("legacy"), mapping={"name": "x", "data": "{}", "timestamp": 1})
    assert q.clean(0, type="paused") == ["legacy"]
    # an active job whose lock is held is never cleaned
    active = take(q)
    r.set(q.keys.lock(active), TOKEN)
    assert q.clean(0, type="active") == []
    r.delete(q.keys.lock(active))
    assert q.clean(0, type="active") == [active]


def test_clean_loops_past_one_batch(q, r, monkeypatch):
    import echomq_gevent.queue.admin as queue_module
    monkeypatch.setattr(queue_module, "_CLEAN_BATCH", 2)
    add_finished(q, 5, at=now_ms() - 10000)
    calls = []
    from echomq_gevent.protocol.admin import AdminScripts

    original = AdminScripts.clean_jobs_in_set

    def counting(self, *args):
        calls.append(args)
        return original(self, *args)

    monkeypatch.setattr(AdminScripts, "clean_jobs_in_set", counting)
    assert len(q.clean(0)) == 5
    # 2 + 2 + 1: the short batch ends the loop
    assert [c[2] for c in calls] == [2, 2, 2]
    calls.clear()
    add_finished(q, 5, at=now_ms() - 10000)
    assert len(q.clean(0, limit=3)) == 3  # a second call asks only for the one left
    assert [c[2] for c in calls] == [2, 1]
    assert r.zcard(q.keys.completed) == 2


def test_clean_of_a_big_set_runs_in_calls_of_1000_and_removes_everything(q, r, monkeypatch):
    # 2,500 completed jobs written straight into Redis (the real batch size, no patch)
    ts = now_ms() - 10000
    pipe = r.pipeline(transaction=False)
    for i in range(1, 2501):
        pipe.hset(q.keys.job(str(i)), mapping={"name": "j", "data": "{}", "opts": "{}", "timestamp": ts,
                                               "finishedOn": ts, "returnvalue": "null"})
        pipe.zadd(q.keys.completed, {str(i): ts})
    pipe.execute()
    from echomq_gevent.protocol.admin import AdminScripts

    calls = []
    original = AdminScripts.clean_jobs_in_set

    def counting(self, *args):
        calls.append(args)
        return original(self, *args)

    monkeypatch.setattr(AdminScripts, "clean_jobs_in_set", counting)
    deleted = q.clean(0)
    assert len(deleted) == 2500 and len(set(deleted)) == 2500
    assert [c[2] for c in calls] == [1000, 1000, 1000]  # 1000 + 1000 + 500: the short one ends it
    assert r.zcard(q.keys.completed) == 0
    assert r.exists(q.keys.job("1"), q.keys.job("2500")) == 0


def test_clean_rejects_bad_arguments(q):
    with pytest.raises(ValueError, match="did you mean 'completed'"):
        q.clean(0, type="complete")
    with pytest.raises(ValueError, match="grace_ms"):
        q.clean(-1)
    with pytest.raises(ValueError, match="limit"):
        q.clean(0, limit=1.5)


# -- retry_jobs / promote_jobs ------------------------------------------------------------
def test_retry_jobs_moves_every_failed_job_back_in_batches(q, r, events):
    ids = add_finished(q, 5, target="failed")
    q.retry_jobs(count=2)
    assert r.zcard(q.keys.failed) == 0
    assert sorted(r.lrange(q.keys.wait, 0, -1)) == sorted(ids)
    fields = r.hgetall(q.keys.job(ids[0]))
    assert "failedReason" not in fields and "finishedOn" not in fields and "processedOn" not in fields
    waiting = [e for e in events(q) if e["event"] == "waiting" and e.get("prev") == "failed"]
    assert sorted(e["jobId"] for e in waiting) == sorted(ids)


def test_retry_jobs_completed_only_up_to_the_timestamp(q, r):
    old = add_finished(q, 2, at=now_ms() - 60000)
    new = add_finished(q, 2)
    q.retry_jobs(state="completed", timestamp=now_ms() - 30000)
    assert sorted(r.zrange(q.keys.completed, 0, -1)) == sorted(new)
    assert sorted(r.lrange(q.keys.wait, 0, -1)) == sorted(old)
    assert r.hget(q.keys.job(old[0]), "returnvalue") is None


def test_retry_jobs_rejects_bad_arguments(q):
    with pytest.raises(ValueError, match="'failed' or 'completed'"):
        q.retry_jobs(state="delayed")
    with pytest.raises(ValueError, match="count"):
        q.retry_jobs(count=0)


def test_promote_jobs(q, r):
    plain = [q.add("d", i, {"delay": 60000}).id for i in range(3)]
    prio = q.add("dp", 1, {"delay": 60000, "priority": 4}).id
    q.promote_jobs(count=2)
    assert r.zcard(q.keys.delayed) == 0
    assert sorted(r.lrange(q.keys.wait, 0, -1)) == sorted(plain)
    assert r.zrange(q.keys.prioritized, 0, -1) == [prio]
    assert all(r.hget(q.keys.job(i), "delay") == "0" for i in plain + [prio])
    with pytest.raises(ValueError, match="count"):
        q.promote_jobs(count=-5)


# -- Job admin methods --------------------------------------------------------------------
def test_job_retry_failed_and_completed(q, r):
    failed = add_finished(q, 1, target="failed")[0]
    job = q.get_job(failed)
    assert job.failed_reason == "boom" and job.attempts_made == 1
    job.retry(reset_attempts_made=True, reset_attempts_started=True)
    assert job.failed_reason is None and job.finished_on is None and job.processed_on is None
    assert job.attempts_made == 0 and job.attempts_started == 0
    stored = r.hgetall(q.keys.job(failed))
    assert "atm" not in stored and "ats" not in stored  # deleted, as Node does
    assert q.get_job(failed).attempts_made == 0
    assert job.is_waiting() and job.get_state() == "waiting"
    r.lrem(q.keys.wait, 0, failed)

    done = add_finished(q, 1)[0]
    job = q.get_job(done)
    job.retry("completed")
    assert job.returnvalue is None and r.hget(q.keys.job(done), "returnvalue") is None
    assert r.hget(q.keys.job(done), "atm") == "1"  # not reset unless asked
    assert q.get_job_state(done) == "waiting"


def test_job_retry_lifo_goes_to_the_front(q, r):
    q.add("first", 1)
    q.add("lifo", 1, {"lifo": True})
    job_id = take(q)
    assert job_id == "2"
    finish(q, job_id, "failed", "x")
    q.get_job(job_id).retry()
    # the running end of wait is the right one
    assert r.lrange(q.keys.wait, -1, -1) == ["2"]


def test_job_retry_errors_name_the_job_and_its_state(q, r):
    job = q.add("w", 1)
    with pytest.raises(JobNotInState, match=rf"job {job.id} of queue .* is waiting, not failed"):
        job.retry()
    with pytest.raises(ValueError, match="retry state"):
        job.retry("active")
    job.remove()
    with pytest.raises(JobNotExist, match=rf"cannot retry it: job {job.id} .* does not exist"):
        job.retry("completed")


def test_job_promote(q, r):
    job = q.add("d", 1, {"delay": 60000})
    assert job.is_delayed() and job.delay == 60000
    job.promote()
    assert job.delay == 0 and job.is_waiting()
    assert r.hget(q.keys.job(job.id), "delay") == "0"
    with pytest.raises(JobNotInState, match=rf"cannot promote it: job {job.id} .* is waiting, not delayed"):
        job.promote()


def test_job_change_delay(q, r, events):
    job = q.add("d", 1, {"delay": 60000})
    before = now_ms()
    job.change_delay(120000)
    assert job.delay == 120000
    due = r.zscore(q.keys.delayed, job.id) // 4096
    assert before + 120000 <= due <= now_ms() + 120000
    assert r.hget(q.keys.job(job.id), "delay") == "120000"
    delayed = [e for e in events(q) if e["event"] == "delayed"]
    assert int(delayed[-1]["delay"]) == due
    with pytest.raises(ValueError, match="delay must be"):
        job.change_delay(-1)
    waiting = q.add("w", 1)
    with pytest.raises(JobNotInState, match=rf"job {waiting.id} .* is waiting, not delayed"):
        waiting.change_delay(1000)
    with pytest.raises(JobNotExist, match="does not exist"):
        Job(q.scripts, "missing").change_delay(10)


def test_job_change_priority(q, r):
    a = q.add("a", 1)
    b = q.add("b", 1)
    b.change_priority(5)
    assert b.priority == 5 and b.is_prioritized() and not b.is_waiting()
    assert r.hget(q.keys.job(b.id), "priority") == "5"
    b.change_priority(0, lifo=True)
    assert b.priority == 0 and r.lrange(q.keys.wait, 0, -1) == [a.id, b.id]
    assert take(q) == b.id  # lifo: next to run
    for bad in (-1, 2 ** 21, 1.5, True, "3"):
        with pytest.raises(InvalidOptionError, match="priority"):
            a.change_priority(bad)
    with pytest.raises(InvalidOptionError, match="lifo"):
        a.change_priority(1, lifo="yes")
    gone = q.add("g", 1)
    gone.remove()
    with pytest.raises(JobNotExist, match=rf"cannot change its priority: job {gone.id}"):
        gone.change_priority(2)


def test_job_state_probes_and_remove(q, r):
    job = q.add("d", 1, {"delay": 60000})
    assert (job.is_delayed(), job.is_waiting(), job.is_active(), job.is_completed(),
            job.is_failed(), job.is_waiting_children()) == (True, False, False, False, False, False)
    with pytest.raises(ValueError, match="unknown job state"):
        job.is_in_state("done")
    job.remove()
    assert job.get_state() == "unknown" and not job.is_delayed()
    r.rpush(q.keys.paused, "legacy")
    assert Job(q.scripts, "legacy").is_waiting()


# -- getState-8 fallback ----------------------------------------------------------------
def test_redis_version_parsing():
    assert parse_redis_version("6.0.5") < (6, 0, 6) <= parse_redis_version("6.0.6")
    assert parse_redis_version("7.2.4-rc1") == (7, 2, 4)
    assert parse_redis_version("255.255.255") > (6, 0, 6)
    assert parse_redis_version("x") == ()


def test_version_is_read_once_per_client(q, redis_url):
    _lpos_support.pop(q.client, None)
    assert server_has_lpos(q.client) is True  # the test server is 6.2+
    assert _lpos_support[q.client] is True
    q.client.info = None  # a second INFO would fail: the answer must come from the cache
    try:
        assert server_has_lpos(q.client) is True
    finally:
        del q.client.info


def test_get_job_state_without_lpos_uses_get_state_8(q, r, monkeypatch):
    q.add("active", 1)
    take(q)
    add_finished(q, 1)
    add_finished(q, 1, target="failed")
    q.add("w", 1)
    q.add("p", 1, {"priority": 2})
    q.add("d", 1, {"delay": 60000})
    r.zadd(q.keys.waiting_children, {"wc": 1})
    r.rpush(q.keys.paused, "legacy")
    ids = ["1", "2", "3", "4", "5", "6", "wc", "legacy", "nope"]
    modern = {i: q.get_job_state(i) for i in ids}
    assert modern["legacy"] == "waiting" and modern["1"] == "active"

    # A server older than 6.0.6 (the answer INFO would give is cached per client).
    monkeypatch.setitem(_lpos_support, q.client, False)
    called = []
    from echomq_gevent.protocol.admin import AdminScripts

    original = AdminScripts.get_state_without_lpos
    monkeypatch.setattr(AdminScripts, "get_state_without_lpos",
                        lambda self, job_id: called.append(job_id) or original(self, job_id))
    assert {i: q.get_job_state(i) for i in ids} == modern
    assert called == ids
    job = q.get_job("4")
    assert job.get_state() == "waiting" and job.is_waiting() and not job.is_active()
    assert q.get_job("1").is_active()
