"""A worker process talks to Redis through a TCP proxy the test controls. Its connections
are muted (held open, nothing forwarded, as after a NAT or failover dropped their state),
reset, or slowed down while jobs run. Every job ends, none is lost, none runs twice while
the worker holds its lock, and the worker is still serving afterwards."""
from __future__ import annotations

import time
import pytest

from echomq_gevent.protocol.keys import QueueKeys

from chaos_helpers import add_jobs, assert_every_job_ended_once, record_figure, runs_of

# short timeouts so a dead connection is noticed within seconds
SETTINGS = {"socket_timeout": 1.5, "socket_connect_timeout": 1.0, "health_check_interval": 1}
OPTIONS = dict(concurrency=8, lock_duration=6000, stalled_interval=1000, drain_delay=1)


def check(own_r, r, keys: QueueKeys, prefix: str, ids: list) -> None:
    """Every job ended once and ran exactly once (the worker never lost a lock here)."""
    assert_every_job_ended_once(own_r, keys, ids)
    runs = runs_of(r, prefix)
    missing = [i for i in ids if runs.get(i, 0) == 0]
    assert not missing, f"completed without running: {missing[:10]}"
    dup = {i: n for i, n in runs.items() if n > 1}
    assert not dup, f"jobs that ran more than once: {dup}"


def test_muted_connections_are_noticed_and_replaced(proxy, own_redis, own_r, r, workers, prefix, qname, wait_for):
    keys = QueueKeys(qname, prefix)
    ids = add_jobs(own_redis.url, qname, prefix, 120, 0.05)
    child = workers.start(proxy.url, SETTINGS, **OPTIONS)
    wait_for(lambda: own_r.zcard(keys.completed) >= 30, what="a first part of the jobs done")
    muted = proxy.mute()
    assert muted >= 2  # the script connection, the blocking one, the lock-renewal one...
    t0 = time.monotonic()
    wait_for(lambda: own_r.zcard(keys.completed) >= len(ids), timeout=60, what="every job after the mute")
    recovered_in = time.monotonic() - t0
    record_figure("mute: rest of 120 jobs (0.05 s each, 8 slots) done after the mute",
                  recovered_in, "s")
    check(own_r, r, keys, prefix, ids)
    # still serving: jobs added now complete
    more = add_jobs(own_redis.url, qname, prefix, 10, 0)
    wait_for(lambda: all(own_r.zscore(keys.completed, i) is not None for i in more), timeout=30,
             what="jobs added after the mute")
    assert child.poll() is None
    assert recovered_in < 30, f"took {recovered_in:.1f} s to finish after the mute"


def test_reset_connections_lose_nothing(proxy, own_redis, own_r, r, workers, prefix, qname, wait_for):
    keys = QueueKeys(qname, prefix)
    ids = add_jobs(own_redis.url, qname, prefix, 200, 0.02)
    child = workers.start(proxy.url, SETTINGS, **OPTIONS)
    t0 = time.monotonic()
    for target in (40, 80, 120, 160):
        wait_for(lambda t=target: own_r.zcard(keys.completed) >= t, timeout=60, what=f"{target} jobs done")
        proxy.reset()
    wait_for(lambda: own_r.zcard(keys.completed) >= len(ids), timeout=60, what="every job after the resets")
    record_figure("reset x4: 200 jobs (0.02 s each, 8 slots) done", time.monotonic() - t0, "s")
    check(own_r, r, keys, prefix, ids)
    more = add_jobs(own_redis.url, qname, prefix, 10, 0)
    wait_for(lambda: all(own_r.zscore(keys.completed, i) is not None for i in more), timeout=30,
             what="jobs added after the resets")
    assert child.poll() is None


def test_latency_slows_but_loses_nothing(proxy, own_redis, own_r, r, workers, prefix, qname, wait_for):
    keys = QueueKeys(qname, prefix)
    ids = add_jobs(own_redis.url, qname, prefix, 60, 0)
    proxy.latency = 0.05
    workers.start(proxy.url, SETTINGS, **OPTIONS)
    wait_for(lambda: own_r.zcard(keys.completed) >= len(ids), timeout=60, what="every job through a slow link")
    assert proxy.delayed > 100  # the link was slow all along
    check(own_r, r, keys, prefix, ids)
    assert "lost its lock" not in workers.log_text()


# --- no blind replay: a command ran, its answer never came back ---------------------------------
def worker_is_blocked(own_r) -> bool:
    return any(c.get("cmd") == "bzpopmin" for c in own_r.client_list())


def test_an_add_whose_answer_is_lost_is_not_sent_again(proxy, own_redis, own_r, prefix, qname):
    from echomq_gevent import ConnectionSettings, Queue
    from echomq_gevent.connection.kept import AmbiguousCallError

    keys = QueueKeys(qname, prefix)
    q = Queue(qname, connection=proxy.url, prefix=prefix,
              connection_settings=ConnectionSettings(socket_timeout=1, health_check_interval=0))
    try:
        q.add("warm-up", {})  # the queue's connection is open
        assert proxy.hold_replies() >= 1
        with pytest.raises(AmbiguousCallError, match="may have run"):
            q.add("once", {})
        names = [own_r.hget(keys.job(i), "name") for i in own_r.lrange(keys.wait, 0, -1)]
        assert sorted(names) == ["once", "warm-up"], names  # it ran, once
        # with a custom id a second send is harmless (a duplicate id is refused), so it is sent
        q.add("warm-up again", {})  # a new connection, open
        assert proxy.hold_replies() >= 1
        job = q.add("custom", {}, {"jobId": "order-7"})
        assert job.id == "order-7"
        assert own_r.llen(keys.wait) == 4
    finally:
        q.close()


def test_a_pickup_whose_answer_is_lost_is_read_back(proxy, own_redis, own_r, r, workers, prefix, qname, wait_for):
    keys = QueueKeys(qname, prefix)
    # locks and stalled checks far longer than the test: only the read-back can save the job
    child = workers.start(proxy.url, {"socket_timeout": 1.5, "health_check_interval": 0},
                          concurrency=1, lock_duration=60000, stalled_interval=60000, drain_delay=1)
    wait_for(lambda: worker_is_blocked(own_r), what="the worker waiting on the marker")
    assert proxy.hold_replies() >= 2
    t0 = time.monotonic()
    [job_id] = add_jobs(own_redis.url, qname, prefix, 1)
    wait_for(lambda: own_r.zscore(keys.completed, job_id) is not None, timeout=20,
             what="the job taken by the lost pick-up to complete")
    record_figure("lost pick-up answer: job done after it was added (socket_timeout 1.5 s)",
                  time.monotonic() - t0, "s")
    assert runs_of(r, prefix) == {job_id: 1}
    assert_every_job_ended_once(own_r, keys, [job_id])
    assert "found by their lock and started" in workers.log_text()
    assert child.poll() is None


def test_a_finish_whose_answer_is_lost_is_read_back(proxy, own_redis, own_r, r, workers, prefix, qname, wait_for):
    keys = QueueKeys(qname, prefix)
    # the first job loads the finish script (a lost answer of an unloaded script is a
    # NOSCRIPT that never ran: read back as such, and sent again)
    [warm] = add_jobs(own_redis.url, qname, prefix, 1)
    [slow] = add_jobs(own_redis.url, qname, prefix, 1, seconds=2)
    [fast] = add_jobs(own_redis.url, qname, prefix, 1)
    child = workers.start(proxy.url, {"socket_timeout": 1.5, "health_check_interval": 0},
                          concurrency=1, lock_duration=60000, stalled_interval=60000, drain_delay=1)
    wait_for(lambda: runs_of(r, prefix).get(slow), what="the slow job running")
    assert proxy.hold_replies() >= 2  # its finish (and the fetch of the next job) run, unanswered
    wait_for(lambda: own_r.zscore(keys.completed, fast) is not None, timeout=20,
             what="the next job, fetched by the lost finish, to complete")
    assert runs_of(r, prefix) == {warm: 1, slow: 1, fast: 1}
    assert_every_job_ended_once(own_r, keys, [warm, slow, fast])
    assert "the write happened" in workers.log_text()
    assert child.poll() is None
