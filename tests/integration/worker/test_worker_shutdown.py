"""Shutdown hands unfinished jobs back; a Redis restart does not stop the worker."""
from __future__ import annotations

import logging
import time

import gevent
import pytest

from echomq_gevent import Queue
from redis_server import RedisServer

from integration.worker_helpers import Recorder, host_with, make_worker, marker_wait_blocked, running


def test_close_waits_for_short_jobs_and_hands_back_long_ones(redis_url, prefix, qname, queue, r, wait_for):
    short = queue.add("short", {"s": 0.2})
    long_ = [queue.add("long", {"s": 30}) for _ in range(2)]
    rec = Recorder()

    def proc(j):
        gevent.sleep(j.data["s"])
        return j.name

    w = make_worker(redis_url, prefix, qname, proc, concurrency=3, plugins=host_with(rec))
    w.start()
    wait_for(lambda: len(w.active_jobs) == 3, what="three jobs in flight")
    t0 = time.monotonic()
    w.close(timeout=0.8)
    took = time.monotonic() - t0
    assert 0.75 <= took < 1.8
    assert w.closed and not w.running
    assert r.hget(f"{prefix}:{qname}:{short.id}", "returnvalue") == '"short"'
    wait_ids = r.lrange(f"{prefix}:{qname}:wait", 0, -1)
    assert sorted(wait_ids) == sorted(j.id for j in long_)
    assert r.llen(f"{prefix}:{qname}:active") == 0
    assert not any(r.exists(f"{prefix}:{qname}:{j.id}:lock") for j in long_)
    assert sorted(rec.names("handed_back")) == sorted(j.id for j in long_)
    assert ("stopping", "close") in rec.calls
    assert w.counters["handed_back"] == 2


def test_second_close_with_zero_timeout_hands_back_at_once(redis_url, prefix, qname, queue, r, wait_for):
    job = queue.add("long", {})
    w = make_worker(redis_url, prefix, qname, lambda j: gevent.sleep(30))
    w.start()
    wait_for(lambda: len(w.active_jobs) == 1, what="job in flight")
    first = gevent.spawn(w.close, 20)
    gevent.sleep(0.2)
    t0 = time.monotonic()
    w.close(timeout=0)
    assert time.monotonic() - t0 < 1.5
    first.join(2)
    assert first.ready()
    assert r.lrange(f"{prefix}:{qname}:wait", 0, -1) == [job.id]


def test_close_of_an_idle_worker_is_quick_and_final(redis_url, prefix, qname, r, wait_for):
    w = make_worker(redis_url, prefix, qname, lambda j: 1, drain_delay=5)
    g = w.start()
    wait_for(lambda: w.last_fetch_at is not None, what="first fetch")
    gevent.sleep(0.1)
    t0 = time.monotonic()
    w.close()
    assert time.monotonic() - t0 < 2.0
    g.join(2)
    assert g.ready() and w.closed
    # the blocking connection is gone: no BZPOPMIN left behind to eat other workers' markers
    blocking_name = w._fetch.blocking_client_name()
    assert not [c for c in r.client_list() if c.get("name") == blocking_name]
    with pytest.raises(RuntimeError, match="closed"):
        w.run()


def test_close_from_inside_a_job_does_not_deadlock(redis_url, prefix, qname, queue):
    queue.add("closer", {})
    holder = {}

    def proc(j):
        holder["w"].close(timeout=2)
        return "closing"

    w = make_worker(redis_url, prefix, qname, proc)
    holder["w"] = w
    g = w.start()
    g.join(5)
    assert g.ready() and w.closed and w.completed_count == 1


def test_worker_survives_a_redis_restart(prefix, qname, caplog, wait_for):
    caplog.set_level(logging.WARNING)
    server = RedisServer().start()
    try:
        q = Queue(qname, connection=server.url, prefix=prefix)
        done = []
        w = make_worker(server.url, prefix, qname, lambda j: done.append(j.data["n"]) or j.data["n"],
                        drain_delay=0.3, lock_duration=1000, stalled_interval=500)
        with running(w):
            q.add("before", {"n": 1})
            wait_for(lambda: done == [1], what="job before the restart")
            port = server.port
            server.stop()
            wait_for(lambda: any("fetching failed" in rec.getMessage() for rec in caplog.records),
                     what="the worker to see Redis gone")
            server = RedisServer(port=port).start()
            wait_for(lambda: _try_add(q), timeout=10, what="Redis back")
            wait_for(lambda: 2 in done, timeout=15, what="job after the restart")
            assert w.running and not w.closing
        q.close()
        assert any("fetching failed" in rec.getMessage() for rec in caplog.records)
    finally:
        server.stop()


def _try_add(q: Queue) -> bool:
    try:
        q.add("after", {"n": 2})
        return True
    except Exception:
        return False


def test_worker_started_before_redis_waits_for_it(prefix, qname, caplog, wait_for):
    from redis_server import free_port

    caplog.set_level(logging.WARNING)
    port = free_port()
    url = f"redis://127.0.0.1:{port}/0"
    done = []
    w = make_worker(url, prefix, qname, lambda j: done.append(j.id), drain_delay=0.3, stalled_interval=500)
    server = RedisServer(port=port)
    try:
        with running(w):
            wait_for(lambda: any("fetching failed" in rec.getMessage() for rec in caplog.records),
                     what="the worker to try the missing Redis")
            assert w.running and not done
            server.start()
            q = Queue(qname, connection=server.url, prefix=prefix)
            job = q.add("late-redis", {})
            wait_for(lambda: done == [job.id], timeout=15, what="the job once Redis is up")
            q.close()
    finally:
        server.stop()
    messages = [rec.getMessage() for rec in caplog.records]
    assert any("not reachable yet" in m for m in messages)
    assert any("fetching failed" in m for m in messages)


def test_queue_pause_holds_the_worker_and_resume_wakes_it(redis_url, prefix, qname, queue, r, wait_for):
    done = []
    w = make_worker(redis_url, prefix, qname, lambda j: done.append(time.time()), drain_delay=5)

    with running(w):
        wait_for(lambda: marker_wait_blocked(w, r), what="the idle worker blocked on the marker")
        queue.pause()
        job = queue.add("held", {})
        # a paused queue gets no wake-up marker: the blocked worker has nothing to pop
        assert not r.exists(queue.keys.marker) and marker_wait_blocked(w, r)
        assert done == [] and queue.get_job_state(job.id) == "waiting"
        t0 = time.time()
        queue.resume()
        wait_for(lambda: done, timeout=6, what="job after resume")
    assert done[0] - t0 < 3.0, "resume's marker did not wake the blocked worker"


def test_killing_the_run_greenlet_still_hands_jobs_back(redis_url, prefix, qname, queue, r, wait_for):
    job = queue.add("long", {})
    w = make_worker(redis_url, prefix, qname, lambda j: gevent.sleep(30))
    g = w.start()
    wait_for(lambda: len(w.active_jobs) == 1, what="job in flight")
    g.kill()
    wait_for(lambda: w.closed, timeout=5, what="close after kill")
    assert r.lrange(f"{prefix}:{qname}:wait", 0, -1) == [job.id]
