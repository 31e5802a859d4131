"""One marker wait for the idle workers of many queues (``shared_wait.py``), on a real
Redis: a marker wakes its own queue's worker only, and soon (the workers' own timers are
10 s here, so a lost wake-up would show as a pick-up seconds late); a marker popped while
its worker was not waiting is kept for its next wait; a pause leaves the wait; a killed
connection is replaced; closing with waits in flight loses no job and no job runs twice."""
from __future__ import annotations

import collections
import time

import gevent
import gevent.event
import pytest

from echomq_gevent import Queue
from echomq_gevent.connection.clients import make_client
from echomq_gevent.worker.shared_wait import SHARED_WAIT_NAME, SharedMarkerWait
from echomq_gevent.worker.worker import Worker

#: the workers' own timer: a wake-up lost would leave a job this long (the longest wait)
SLOW = 10.0
#: a woken worker picks its job up well within this (milliseconds are expected)
BOUND_S = 2.0


class Setup:
    """``n`` queues, one worker each, all in one shared marker wait on one client."""

    def __init__(self, redis_url, prefix, qname, n, concurrency=1):
        self.client = make_client(redis_url)
        self.shared = SharedMarkerWait(self.client)
        self.names = [f"{qname}{i}" for i in range(n)]
        self.runs = collections.Counter()
        self.started = {}
        self.workers = [Worker(name, self.proc, connection=self.client, prefix=prefix, concurrency=concurrency,
                               drain_delay=SLOW, marker_wait=self.shared)
                        for name in self.names]
        self.queues = {name: Queue(name, connection=redis_url, prefix=prefix) for name in self.names}

    def proc(self, job):
        self.runs[(job.queue_name, job.id)] += 1
        self.started[(job.queue_name, job.id)] = time.monotonic()
        return None

    def start(self, r, wait_for):
        for w in self.workers:
            w.start()
        # settled: every worker in the wait, and the wait in flight over all of them
        wait_for(lambda: all(w._fetch.marker is not None and w._fetch.marker.waiting for w in self.workers)
                 and self.shared._inflight >= {w.keys.marker for w in self.workers}
                 and _blocked(r), what="every worker in the shared wait")

    def close(self):
        gevent.joinall([gevent.spawn(w.close, 5) for w in self.workers])
        self.shared.close()
        for q in self.queues.values():
            q.close()
        self.client.close()


def _blocked(r):
    return any(c.get("name") == SHARED_WAIT_NAME and "b" in c.get("flags", "") for c in r.client_list())


@pytest.fixture
def setup(redis_url, prefix, qname):
    made = []

    def make(n, **kw):
        s = Setup(redis_url, prefix, qname, n, **kw)
        made.append(s)
        return s

    yield make
    for s in made:
        s.close()


def test_a_marker_wakes_its_own_queues_worker_only_and_soon(setup, r, wait_for):
    s = setup(8)
    s.start(r, wait_for)
    for rnd in range(2):  # the second round: the woken queue joined the wait again meanwhile
        for k in (3, 0, 7):
            name = s.names[k]
            others = {w.queue_name: w.last_fetch_at for w in s.workers if w.queue_name != name}
            added = time.monotonic()
            job = s.queues[name].add("probe", {"k": k})
            wait_for(lambda: (name, job.id) in s.started, timeout=BOUND_S + 3, what=f"the job of queue {name}")
            assert s.started[(name, job.id)] - added < BOUND_S
            # back in the wait (its marker asked for again) before the next probe
            wait_for(lambda: s.workers[k]._fetch.marker.waiting and s.workers[k].keys.marker in s.shared._inflight,
                     what="the woken worker back in the shared wait")
            # nobody else was woken: their loops did not come out of the wait
            assert {w.queue_name: w.last_fetch_at for w in s.workers if w.queue_name != name} == others
    assert s.shared.stats["markers"] >= 6
    assert s.shared.stats["unblocks"] >= 1  # a queue joined while the wait was in flight
    assert set(s.runs.values()) == {1}


def test_a_marker_popped_while_its_worker_was_not_waiting_is_kept_for_its_next_wait(redis_url, prefix, qname, r):
    client = make_client(redis_url)
    shared = SharedMarkerWait(client)
    try:
        a = shared.attach(f"{prefix}:{qname}a:marker")
        b = shared.attach(f"{prefix}:{qname}b:marker")
        wake_a, wake_b = gevent.event.Event(), gevent.event.Event()
        waiter_b = gevent.spawn(b.wait, 10.0, wake_b)
        # a waits briefly and leaves: its marker stays in the wait in flight (no unblock)
        assert a.wait(0.3, wake_a) == ("timeout", 0.0)
        assert a.key in shared._inflight and not a.waiting
        r.zadd(a.key, {"0": 0})
        deadline = time.monotonic() + 5
        while a.missed is None and time.monotonic() < deadline:
            gevent.sleep(0.01)
        assert a.missed == 0.0 and wake_a.is_set()  # its loop is told to look again
        assert not waiter_b.ready()  # b is not woken by a's marker
        wake_a.clear()
        assert a.wait(10.0, wake_a) == ("marker", 0.0)  # at once
        r.zadd(b.key, {"0": 0})
        assert waiter_b.get(timeout=5) == ("marker", 0.0)
        assert shared.stats["missed"] == 1
    finally:
        shared.close()
        client.close()


def test_a_paused_worker_leaves_the_wait_and_takes_nothing_until_resumed(setup, r, wait_for):
    s = setup(3)
    s.start(r, wait_for)
    w = s.workers[1]
    w.pause()
    # at once, not when the wait in flight ends by itself (10 s)
    wait_for(lambda: w.keys.marker not in s.shared._inflight and _blocked(r), timeout=5,
             what="the wait sent again without it")
    job = s.queues[w.queue_name].add("held", {})
    gevent.sleep(0.5)
    assert (w.queue_name, job.id) not in s.started
    assert r.zcard(w.keys.marker) == 1  # its wake-up is left for other workers of the queue
    w.resume()
    wait_for(lambda: (w.queue_name, job.id) in s.started, timeout=BOUND_S + 3, what="the job after the resume")


def test_a_killed_connection_is_replaced_and_wakes_still_arrive(setup, r, wait_for):
    s = setup(3)
    s.start(r, wait_for)
    victim = next(c for c in r.client_list() if c.get("name") == SHARED_WAIT_NAME)
    r.client_kill_filter(_id=victim["id"])
    wait_for(lambda: s.shared.stats["errors"] >= 1, what="the failed wait")
    wait_for(lambda: _blocked(r) and s.shared._inflight, what="the wait on a new connection")
    name = s.names[2]
    added = time.monotonic()
    job = s.queues[name].add("after-kill", {})
    wait_for(lambda: (name, job.id) in s.started, timeout=BOUND_S + 3, what="the job after the kill")
    assert s.started[(name, job.id)] - added < BOUND_S


def test_closing_with_waits_in_flight_loses_no_job_and_runs_none_twice(setup, r, wait_for):
    s = setup(10, concurrency=2)
    s.start(r, wait_for)
    added = []
    stop = gevent.event.Event()

    def feed():
        i = 0
        while not stop.is_set():
            name = s.names[i % len(s.names)]
            added.append((name, s.queues[name].add("j", {"i": i}).id))
            i += 1
            gevent.sleep(0.002)

    feeder = gevent.spawn(feed)
    gevent.sleep(1.0)
    closer = gevent.spawn(lambda: gevent.joinall([gevent.spawn(w.close, 5) for w in s.workers]))
    gevent.sleep(0.3)
    stop.set()
    feeder.join()
    closer.join()
    assert added and s.runs
    assert max(s.runs.values()) == 1
    left = set()
    for name in s.names:
        keys = s.queues[name].keys
        assert r.llen(keys.active) == 0
        left |= {(name, i) for i in r.lrange(keys.wait, 0, -1)}
    done = set(s.runs)
    assert done.isdisjoint(left)
    assert done | left == set(added)  # every job ran once or waits for the next worker
