"""A worker process talks to Redis through a TCP proxy the test controls. Its connections
are muted (held open, nothing forwarded, as after a NAT or failover dropped their state),
reset, or slowed down while jobs run. Every job ends, none is lost, none runs twice while
the worker holds its lock, and the worker is still serving afterwards."""
from __future__ import annotations

import time
from echomq_gevent.keys import QueueKeys

from chaos_helpers import add_jobs, assert_every_job_ended_once, runs_of, wait_for

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


def test_muted_connections_are_noticed_and_replaced(proxy, own_redis, own_r, r, workers, prefix, qname):
    keys = QueueKeys(qname, prefix)
    ids = add_jobs(own_redis.url, qname, prefix, 120, 0.05)
    child = workers.start(proxy.url, SETTINGS, **OPTIONS)
    wait_for(lambda: own_r.zcard(keys.completed) >= 30, what="a first part of the jobs done")
    muted = proxy.mute()
    assert muted >= 2  # the script connection, the blocking one, the lock-renewal one...
    t0 = time.monotonic()
    wait_for(lambda: own_r.zcard(keys.completed) >= len(ids), timeout=60, what="every job after the mute")
    recovered_in = time.monotonic() - t0
    check(own_r, r, keys, prefix, ids)
    # still serving: jobs added now complete
    more = add_jobs(own_redis.url, qname, prefix, 10, 0)
    wait_for(lambda: all(own_r.zscore(keys.completed, i) is not None for i in more), timeout=30,
             what="jobs added after the mute")
    assert child.poll() is None
    assert recovered_in < 30, f"took {recovered_in:.1f} s to finish after the mute"


def test_reset_connections_lose_nothing(proxy, own_redis, own_r, r, workers, prefix, qname):
    keys = QueueKeys(qname, prefix)
    ids = add_jobs(own_redis.url, qname, prefix, 200, 0.02)
    child = workers.start(proxy.url, SETTINGS, **OPTIONS)
    for target in (40, 80, 120, 160):
        wait_for(lambda t=target: own_r.zcard(keys.completed) >= t, timeout=60, what=f"{target} jobs done")
        proxy.reset()
    wait_for(lambda: own_r.zcard(keys.completed) >= len(ids), timeout=60, what="every job after the resets")
    check(own_r, r, keys, prefix, ids)
    more = add_jobs(own_redis.url, qname, prefix, 10, 0)
    wait_for(lambda: all(own_r.zscore(keys.completed, i) is not None for i in more), timeout=30,
             what="jobs added after the resets")
    assert child.poll() is None


def test_latency_slows_but_loses_nothing(proxy, own_redis, own_r, r, workers, prefix, qname):
    keys = QueueKeys(qname, prefix)
    ids = add_jobs(own_redis.url, qname, prefix, 60, 0)
    proxy.latency = 0.05
    workers.start(proxy.url, SETTINGS, **OPTIONS)
    wait_for(lambda: own_r.zcard(keys.completed) >= len(ids), timeout=60, what="every job through a slow link")
    check(own_r, r, keys, prefix, ids)
    assert "lost its lock" not in workers.log_text()
