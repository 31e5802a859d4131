"""A worker process frozen (SIGSTOP) after it picked a job up, for longer than the job's lock:
meanwhile the stalled check of a second worker hands the job over and that worker runs it.
Woken (SIGCONT), the frozen worker must not start the processor: its lock check before the
start finds the lock gone (``worker/lock_check.py``). Frozen twice: between the pick-up and
the start (the process stops itself in the job's ``active`` hook), and while its marker wait
is blocked, before it read the answer of the pick-up written behind the wait."""
from __future__ import annotations

import signal

from echomq_gevent.protocol.keys import QueueKeys

from chaos_helpers import add_jobs, runs_of

OPTIONS = dict(concurrency=4, lock_duration=1000, stalled_interval=300, drain_delay=5)
REFUSED = "it is not started here"


def _wait_log(workers, text, wait_for, timeout=20):
    wait_for(lambda: text in workers.log_text(), timeout=timeout, what=f"{text!r} in the worker logs")


def _takeover(own_r, keys, job_id, frozen, workers, url, wait_for):
    """The job's lock lapses while ``frozen`` is stopped; a second worker takes the job over
    and completes it; then the frozen one wakes."""
    wait_for(lambda: not own_r.exists(keys.lock(job_id)), timeout=10, what="the frozen worker's lock to lapse")
    workers.start(url, **OPTIONS)
    wait_for(lambda: own_r.zscore(keys.completed, job_id) is not None, timeout=20,
             what="the second worker to complete the job")
    frozen.send_signal(signal.SIGCONT)


def test_a_worker_frozen_between_pickup_and_start_does_not_start_the_job(own_redis, own_r, r, workers, prefix,
                                                                         qname, wait_for):
    keys = QueueKeys(qname, prefix)
    [job_id] = add_jobs(own_redis.url, qname, prefix, 1, 0)
    own_r.hset(keys.job(job_id), "data", '{"freeze": true}')
    frozen = workers.start(own_redis.url, extra={"freeze_on_active": True}, **OPTIONS)
    wait_for(lambda: r.lrange(f"{prefix}:chaos:frozen", 0, -1) == [job_id], timeout=10,
             what="the worker to stop itself after the pick-up")
    _takeover(own_r, keys, job_id, frozen, workers, own_redis.url, wait_for)
    _wait_log(workers, REFUSED, wait_for)
    assert runs_of(r, prefix) == {job_id: 1}  # the second worker's run only
    # the frozen worker goes on serving
    more = add_jobs(own_redis.url, qname, prefix, 20, 0)
    wait_for(lambda: all(own_r.zscore(keys.completed, i) is not None for i in more), timeout=20,
             what="the jobs added after the freeze")
    assert frozen.poll() is None


def test_a_worker_frozen_in_its_marker_wait_does_not_start_the_job_its_pickup_took(own_redis, own_r, r, workers,
                                                                                    prefix, qname, wait_for):
    keys = QueueKeys(qname, prefix)
    # one slot: its first pick-up (a job run to warm it up) loads the script that the pick-up
    # behind the marker wait calls
    frozen = workers.start(own_redis.url, **dict(OPTIONS, concurrency=1))
    warm = add_jobs(own_redis.url, qname, prefix, 1, 0)
    wait_for(lambda: own_r.zscore(keys.completed, warm[0]) is not None, what="the warm-up job")
    name = f"{prefix}:"

    def blocked():
        return any(c.get("name", "").startswith(name) and "b" in c.get("flags", "") and int(c.get("qbuf", 0)) > 0
                   for c in own_r.client_list())

    wait_for(blocked, timeout=10, what="the idle worker blocked with its pick-up behind the wait")
    frozen.send_signal(signal.SIGSTOP)
    [job_id] = add_jobs(own_redis.url, qname, prefix, 1, 0)
    # the pick-up behind the wait runs in Redis although its worker is stopped
    wait_for(lambda: own_r.lrange(keys.active, 0, -1) == [job_id], timeout=10, what="the pick-up to take the job",
             details=lambda: f"{own_r.lrange(keys.wait, 0, -1)} {own_r.lrange(keys.active, 0, -1)} {own_r.client_list()}")
    _takeover(own_r, keys, job_id, frozen, workers, own_redis.url, wait_for)
    _wait_log(workers, REFUSED, wait_for)
    assert runs_of(r, prefix) == {warm[0]: 1, job_id: 1}
    assert frozen.poll() is None
