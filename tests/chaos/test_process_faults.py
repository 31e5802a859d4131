"""Faults of whole processes: Redis killed and restarted mid-run (AOF, fsync always), the
worker SIGKILLed again and again and restarted, Redis at ``maxmemory`` (noeviction) while
jobs are added and finished. Every job ends, none is lost, duplicates only where the
guarantees table allows them (a job in flight in a killed worker), and the worker serves
afterwards."""
from __future__ import annotations

import random
import signal
import time

import pytest
import redis

from echomq_gevent import Queue
from echomq_gevent.protocol.keys import QueueKeys

from chaos_helpers import add_jobs, assert_every_job_ended_once, record_figure, runs_of

OPTIONS = dict(concurrency=8, lock_duration=2000, stalled_interval=500, drain_delay=1)
# Redis refuses lock renewals (writes) at maxmemory: locks must outlast the squeeze
OOM_OPTIONS = dict(OPTIONS, lock_duration=30000)
SETTINGS = {"socket_timeout": 2, "socket_connect_timeout": 1, "health_check_interval": 1}


def test_redis_restarted_mid_run_loses_nothing(own_redis, own_r, r, workers, prefix, qname, wait_for):
    keys = QueueKeys(qname, prefix)
    ids = add_jobs(own_redis.url, qname, prefix, 300, 0.01)
    child = workers.start(own_redis.url, SETTINGS, **OPTIONS)
    wait_for(lambda: own_r.zcard(keys.completed) >= 60, what="a first part of the jobs done")
    own_redis.kill()
    down_at = time.monotonic()
    time_down = 1.0
    while time.monotonic() - down_at < time_down:  # the worker meets a dead server for a while
        assert child.poll() is None
        time.sleep(0.1)
    own_redis.start()
    rr = redis.Redis.from_url(own_redis.url, decode_responses=True, socket_timeout=5)
    t0 = time.monotonic()
    wait_for(lambda: rr.zcard(keys.completed) >= len(ids), timeout=60, what="every job after the restart")
    recovered_in = time.monotonic() - t0
    assert_every_job_ended_once(rr, keys, ids)
    runs = runs_of(r, prefix)
    record_figure("Redis restart (1 s down, AOF): rest of 300 jobs done after the restart", recovered_in, "s")
    record_figure("Redis restart: jobs run twice", sum(1 for n in runs.values() if n > 1), "jobs")
    # a job that ran before the kill and whose result was acknowledged is never run again;
    # one in flight at the kill may run twice (its lock and result died with the server's
    # last moments, or it stalled): at most one slot's worth per worker
    dup = {i: n for i, n in runs.items() if n > 1}
    assert len(dup) <= OPTIONS["concurrency"], dup
    more = add_jobs(own_redis.url, qname, prefix, 10, 0)
    wait_for(lambda: all(rr.zscore(keys.completed, i) is not None for i in more), timeout=30,
             what="jobs added after the restart")
    assert child.poll() is None
    assert recovered_in < 45, f"{recovered_in:.1f} s to finish after the restart"
    rr.close()


@pytest.mark.parametrize("rounds,jobs", [
    (5, 400),
    pytest.param(25, 3000, marks=pytest.mark.chaos_long),
], ids=["5-kills", "25-kills"])
def test_sigkill_loop_with_restarts_loses_nothing(own_redis, own_r, r, workers, prefix, qname, rounds, jobs, wait_for):
    keys = QueueKeys(qname, prefix)
    ids = add_jobs(own_redis.url, qname, prefix, jobs, 0.02)
    rng = random.Random(7)
    kills = 0
    in_flight_at_kills = 0
    for _ in range(rounds):
        child = workers.start(own_redis.url, SETTINGS, **OPTIONS)
        before = own_r.zcard(keys.completed)
        wait_for(lambda b=before: own_r.zcard(keys.completed) >= b + 20 or own_r.zcard(keys.completed) >= len(ids),
                 timeout=30, what="the restarted worker to make progress")
        time.sleep(rng.uniform(0.05, 0.3))
        in_flight_at_kills += own_r.llen(keys.active)
        child.send_signal(signal.SIGKILL)
        child.wait(5)
        kills += 1
    last = workers.start(own_redis.url, SETTINGS, **OPTIONS)
    t0 = time.monotonic()
    wait_for(lambda: own_r.zcard(keys.completed) >= len(ids), timeout=90, what="every job after the kills")
    record_figure(f"SIGKILL x{rounds}: last worker done after its start (lock 2 s, stalled check 0.5 s)",
                  time.monotonic() - t0, "s")
    assert_every_job_ended_once(own_r, keys, ids)
    runs = runs_of(r, prefix)
    assert all(runs.get(i, 0) >= 1 for i in ids)
    dup = {i: n for i, n in runs.items() if n > 1}
    # duplicates: only jobs that were in flight when a worker was killed
    assert len(dup) <= in_flight_at_kills + kills * OPTIONS["concurrency"], dup
    record_figure(f"SIGKILL x{rounds} ({jobs} jobs): jobs run twice (in flight at a kill)", len(dup), "jobs")
    record_figure(f"SIGKILL x{rounds} ({jobs} jobs): jobs in active at the kills", in_flight_at_kills, "jobs")
    stalled = {e.get("jobId") for _i, e in own_r.xrange(keys.events) if e.get("event") == "stalled"}
    assert set(dup) <= stalled, f"ran twice without having stalled: {set(dup) - stalled}"
    assert last.poll() is None
    assert kills == rounds


def test_maxmemory_during_adds_and_finishes(own_redis, own_r, r, workers, prefix, qname, wait_for):
    keys = QueueKeys(qname, prefix)
    ids = add_jobs(own_redis.url, qname, prefix, 80, 0.5)
    child = workers.start(own_redis.url, SETTINGS, **OOM_OPTIONS)
    wait_for(lambda: own_r.zcard(keys.completed) >= 10, what="the worker to start finishing jobs")
    used = int(own_r.info("memory")["used_memory"])
    own_r.config_set("maxmemory", str(max(used - 1024 * 1024, 1024 * 1024)))
    q = Queue(qname, connection=own_redis.url, prefix=prefix)
    refused = 0
    try:
        # adds are refused with Redis's OOM error, whole: no job half written
        for _ in range(5):
            with pytest.raises(redis.ResponseError, match="OOM|maxmemory"):
                q.add("work", {"s": 0})
            refused += 1
        ids_before = int(own_r.get(keys.base + "id") or 0)
        assert ids_before == len(ids), "a refused add moved the id counter"
        # a plain pick-up is refused whole too; finishing goes on (a script that has written
        # once may go on writing at maxmemory, and a finish starts by deleting the lock), and
        # with it the pick-up of the next job in the same call
        def pickup_refused() -> bool:
            return any("fetching failed" in line and "maxmemory" in line
                       for line in workers.log_text().splitlines())

        wait_for(pickup_refused, timeout=30, what="the worker's pick-up refused for memory")
        wait_for(lambda: own_r.llen(keys.active) == 0, timeout=30, what="the jobs in flight to finish at maxmemory")
        assert child.poll() is None
        own_r.config_set("maxmemory", "0")
        wait_for(lambda: own_r.zcard(keys.completed) >= len(ids), timeout=60, what="every job after memory came back")
        assert_every_job_ended_once(own_r, keys, ids)
        runs = runs_of(r, prefix)
        dup = {i: n for i, n in runs.items() if n > 1}
        assert not dup, f"jobs run twice although their worker never lost them: {dup}"
        more = [q.add("work", {"s": 0}).id for _ in range(5)]
        wait_for(lambda: all(own_r.zscore(keys.completed, i) is not None for i in more), timeout=30,
                 what="jobs added after memory came back")
    finally:
        q.close()
    assert refused == 5
