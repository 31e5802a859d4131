"""Locks and stalls: renewal from the native thread (also while the hub is blocked),
lost locks never overwrite another owner's result, stalled jobs are recovered."""
from __future__ import annotations

import logging
import time

import gevent
import gevent.event

from echomq_gevent.protocol.keys import QueueKeys
from echomq_gevent.protocol.scripts import Scripts

from integration.worker_helpers import Recorder, host_with, make_worker, running


def spin(seconds: float) -> int:
    """Pure-Python CPU work that never yields to the hub."""
    n = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        n += 1
    return n


def test_cooperative_job_longer_than_lock_duration_keeps_its_lock(redis_url, prefix, qname, queue, r, wait_for, events):
    job = queue.add("long", {})
    ttls = []

    def proc(j):
        for _ in range(12):
            gevent.sleep(0.25)
            ttls.append(r.pttl(f"{prefix}:{qname}:{j.id}:lock"))
        return "done"

    w = make_worker(redis_url, prefix, qname, proc, lock_duration=1000, stalled_interval=500)
    with running(w):
        wait_for(lambda: w.completed_count == 1, what="completion")
    assert min(ttls) > 0
    assert r.hget(f"{prefix}:{qname}:{job.id}", "atm") == "1"
    assert not any(e["event"] == "stalled" for e in events())


def test_hub_blocking_job_keeps_its_lock_and_is_named(redis_url, prefix, qname, queue, r, caplog, wait_for):
    job = queue.add("cpu", {})
    lock_key = f"{prefix}:{qname}:{job.id}:lock"
    seen = {}

    def proc(j):
        spin(1.5)  # 3 x lock_duration, without yielding once
        seen["ttl"] = r.pttl(lock_key)
        return "crunched"

    caplog.set_level(logging.WARNING, logger="echomq_gevent.hub")
    w = make_worker(redis_url, prefix, qname, proc, lock_duration=500, hub_block_threshold=0.3)
    with running(w):
        wait_for(lambda: w.completed_count == 1, what="completion")
    assert seen["ttl"] > 0, "the lock expired while the hub was blocked"
    assert r.hget(f"{prefix}:{qname}:{job.id}", "returnvalue") == '"crunched"'
    blocked = [rec.getMessage() for rec in caplog.records if "hub has been blocked" in rec.getMessage()]
    assert blocked and f"job {job.id} ('cpu')" in blocked[0] and "spin" in blocked[0]


def test_renewal_refused_reports_lock_lost_and_does_not_write(redis_url, prefix, qname, queue, r, wait_for):
    job = queue.add("stolen", {})
    rec = Recorder()
    lock_key = f"{prefix}:{qname}:{job.id}:lock"

    def proc(j):
        r.set(lock_key, "someone-else", px=10000)
        wait_for(lambda: rec.names("lock_lost"), timeout=5, what="lock lost report")
        return "mine"

    w = make_worker(redis_url, prefix, qname, proc, lock_duration=400, plugins=host_with(rec))
    with running(w):
        wait_for(lambda: rec.names("lock_lost"), what="lock lost")
        wait_for(lambda: not w.active_jobs, what="slot freed")
    assert rec.names("lock_lost") == [job.id]
    assert w.counters["lock_lost"] == 1 and w.completed_count == 0
    h = r.hgetall(f"{prefix}:{qname}:{job.id}")
    assert "returnvalue" not in h and r.get(lock_key) == "someone-else"
    assert job.id in r.lrange(f"{prefix}:{qname}:active", 0, -1)


def test_lock_taken_before_finish_is_reported_at_finish(redis_url, prefix, qname, queue, r, wait_for):
    job = queue.add("late", {})
    rec = Recorder()
    lock_key = f"{prefix}:{qname}:{job.id}:lock"

    def proc(j):
        r.set(lock_key, "other-owner", px=10000)  # renewal ticks far apart: finish sees -6
        return "mine"

    w = make_worker(redis_url, prefix, qname, proc, lock_duration=20000, plugins=host_with(rec))
    with running(w):
        wait_for(lambda: rec.names("lock_lost"), what="lock lost at finish")
    assert "returnvalue" not in r.hgetall(f"{prefix}:{qname}:{job.id}")
    assert r.get(lock_key) == "other-owner" and w.completed_count == 0


def _orphan_active_job(redis_url, prefix, qname, queue, r, **opts):
    """A job taken by a 'worker' that died: active, no lock."""
    job = queue.add("orphan", {"v": 1}, opts or None)
    keys = QueueKeys(qname, prefix)
    res = Scripts(r, keys).move_to_active("dead-worker:0", 1000, int(time.time() * 1000))
    assert res[1] == job.id
    r.delete(keys.lock(job.id))
    return job


def test_stalled_job_is_recovered_and_completed(redis_url, prefix, qname, queue, r, wait_for, events):
    job = _orphan_active_job(redis_url, prefix, qname, queue, r)
    rec = Recorder()
    w = make_worker(redis_url, prefix, qname, lambda j: j.data["v"] + 1, stalled_interval=300, plugins=host_with(rec))
    with running(w):
        wait_for(lambda: w.completed_count == 1, what="recovered job completion")
    h = r.hgetall(f"{prefix}:{qname}:{job.id}")
    assert h["returnvalue"] == "2" and h["stc"] == "1"
    assert rec.names("stalled") == [job.id] and w.counters["stalled"] == 1
    assert any(e["event"] == "stalled" and e["jobId"] == job.id for e in events())


def test_job_stalled_too_often_fails(redis_url, prefix, qname, queue, r, wait_for):
    job = _orphan_active_job(redis_url, prefix, qname, queue, r)
    ran = []
    w = make_worker(redis_url, prefix, qname, lambda j: ran.append(1), stalled_interval=300, max_stalled_count=0)
    with running(w):
        wait_for(lambda: w.failed_count == 1, what="failure")
    assert ran == []
    assert r.hget(f"{prefix}:{qname}:{job.id}", "failedReason") == "job stalled more than allowable limit"


def test_skip_stalled_check(redis_url, prefix, qname, queue, r, wait_for):
    _orphan_active_job(redis_url, prefix, qname, queue, r)
    w = make_worker(redis_url, prefix, qname, lambda j: 1, stalled_interval=200, skip_stalled_check=True)
    with running(w):
        # a stalled check would run at start (then every 200 ms); the fetch loop answering
        # twice from its marker wait (drain_delay 0.5 s) shows the worker ran well past it
        first = wait_for(lambda: w.last_fetch_at, what="the first fetch")
        wait_for(lambda: w.last_fetch_at > first + 0.4, what="a full marker wait")
        assert w.completed_count == 0
    assert not r.exists(f"{prefix}:{qname}:stalled-check")


def test_jobs_finishing_together_share_a_pipeline_and_keep_errors_apart(redis_url, prefix, qname, queue, r, wait_for):
    jobs = queue.add_bulk([("together", {"i": i}, None) for i in range(10)])
    rec = Recorder()
    gate = gevent.event.Event()
    victim = jobs[3].id

    def proc(j):
        gate.wait(10)
        if j.id == victim:
            r.set(f"{prefix}:{qname}:{j.id}:lock", "intruder", px=10000)
        return j.data["i"]

    # 20 slots: a worker of fewer sends its finishes one by one
    w = make_worker(redis_url, prefix, qname, proc, concurrency=20, lock_duration=20000, plugins=host_with(rec))
    with running(w):
        wait_for(lambda: len(w.active_jobs) == 10, what="ten jobs in flight")
        scripts_before = r.info("commandstats")["cmdstat_evalsha"]["calls"]
        gate.set()
        wait_for(lambda: w.completed_count == 9 and rec.names("lock_lost"), what="results")
        script_calls = r.info("commandstats")["cmdstat_evalsha"]["calls"] - scripts_before
    assert rec.names("lock_lost") == [victim]
    assert w._settler.batcher.batches < w._settler.batcher.calls, "finishes were not batched"
    # the first finish of the turn went alone, the other nine as one moveToFinishedMany-11
    # (a pick-up may follow)
    assert script_calls <= 3, script_calls
    assert "returnvalue" not in r.hgetall(f"{prefix}:{qname}:{victim}")
    assert r.zcard(f"{prefix}:{qname}:completed") == 9
