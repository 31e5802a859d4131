"""The Worker against a real Redis: the slot bound, results, events, keep-jobs, pause,
markers and delayed jobs, missing processors, bad data and return values."""
from __future__ import annotations

import json
import time

import gevent
import pytest

from echomq_gevent import Worker
from echomq_gevent.errors import ConfigError
from echomq_gevent.plugins.hookspecs import hookimpl
from integration.worker_helpers import Recorder, host_with, make_worker, marker_wait_blocked, running


# --------------------------------------------------------------------------- the bound
@pytest.mark.parametrize("concurrency", [1, 4])
def test_in_flight_never_exceeds_concurrency_and_reaches_it(redis_url, prefix, qname, queue, concurrency, wait_for):
    queue.add_bulk([("work", {"i": i}, None) for i in range(6 * concurrency + 3)])
    state = {"now": 0, "max": 0, "intervals": []}

    def proc(job):
        state["now"] += 1
        state["max"] = max(state["max"], state["now"])
        start = time.monotonic()
        gevent.sleep(0.03)
        state["intervals"].append((start, time.monotonic()))
        state["now"] -= 1
        return job.data["i"]

    w = make_worker(redis_url, prefix, qname, proc, concurrency=concurrency)
    with running(w):
        wait_for(lambda: w.completed_count == 6 * concurrency + 3, what="all jobs")
        assert len(w.active_jobs) == 0
    assert state["max"] == concurrency
    if concurrency == 1:
        spans = sorted(state["intervals"])
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:])), "jobs overlapped at concurrency 1"
    counts = queue.get_job_counts("completed", "active")
    assert counts["completed"] == 6 * concurrency + 3 and counts["active"] == 0


def test_active_jobs_view_is_read_only_and_shows_running_jobs(redis_url, prefix, qname, queue, wait_for):
    gate = gevent.event.Event()
    queue.add("a", {})
    w = make_worker(redis_url, prefix, qname, lambda job: gate.wait(5) and None, concurrency=2)
    with running(w):
        wait_for(lambda: len(w.active_jobs) == 1, what="job in flight")
        jid = next(iter(w.active_jobs))
        assert w.active_jobs[jid].name == "a"
        with pytest.raises(TypeError):
            w.active_jobs["x"] = None  # type: ignore[index]
        assert w.last_fetch_at is not None and w.lock_thread_alive()
        gate.set()
        wait_for(lambda: w.completed_count == 1, what="completion")


# --------------------------------------------------------------------------- results
def test_completed_job_fields_and_events(redis_url, prefix, qname, queue, r, wait_for, events):
    job = queue.add("sum", {"a": 2, "b": 3})
    rec = Recorder()
    w = make_worker(redis_url, prefix, qname, lambda j: {"sum": j.data["a"] + j.data["b"], "txt": "é/x"},
                    plugins=host_with(rec), name="w1")
    with running(w):
        wait_for(lambda: w.completed_count == 1, what="completion")
    h = r.hgetall(f"{prefix}:{qname}:{job.id}")
    assert json.loads(h["returnvalue"]) == {"sum": 5, "txt": "é/x"}
    assert h["atm"] == "1" and h["ats"] == "1" and h["pb"] == "w1"
    assert int(h["finishedOn"]) >= int(h["processedOn"]) >= int(h["timestamp"])
    assert not r.exists(f"{prefix}:{qname}:{job.id}:lock")
    evs = [e["event"] for e in events() if e.get("jobId") == job.id]
    assert evs == ["added", "waiting", "active", "completed"]
    assert rec.names("active") == [job.id] and rec.names("completed") == [job.id]
    assert ("started", None) in rec.calls and ("stopping", "close") in rec.calls


def test_none_return_value_is_stored_as_null(redis_url, prefix, qname, queue, r, wait_for):
    job = queue.add("n", {})
    w = make_worker(redis_url, prefix, qname, lambda j: None)
    with running(w):
        wait_for(lambda: w.completed_count == 1, what="completion")
    assert r.hget(f"{prefix}:{qname}:{job.id}", "returnvalue") == "null"


def test_non_serialisable_return_value_fails_the_job(redis_url, prefix, qname, queue, r, wait_for):
    job = queue.add("bad", {})
    w = make_worker(redis_url, prefix, qname, lambda j: {"when": object()})
    with running(w):
        wait_for(lambda: w.failed_count == 1, what="failure")
    reason = r.hget(f"{prefix}:{qname}:{job.id}", "failedReason")
    assert "not JSON-serialisable" in reason and job.id in reason


def test_nan_return_value_is_refused(redis_url, prefix, qname, queue, r, wait_for):
    job = queue.add("nan", {})
    w = make_worker(redis_url, prefix, qname, lambda j: float("nan"))
    with running(w):
        wait_for(lambda: w.failed_count == 1, what="failure")
    assert "not JSON-serialisable" in r.hget(f"{prefix}:{qname}:{job.id}", "failedReason")


def test_invalid_json_data_fails_unrecoverably_without_running(redis_url, prefix, qname, queue, r, wait_for):
    queue.pause()
    job = queue.add("broken", {}, {"attempts": 5})
    r.hset(f"{prefix}:{qname}:{job.id}", "data", "{not json")
    ran = []
    w = make_worker(redis_url, prefix, qname, lambda j: ran.append(j.id))
    with running(w):
        queue.resume()
        wait_for(lambda: w.failed_count == 1, what="failure")
    assert ran == []
    h = r.hgetall(f"{prefix}:{qname}:{job.id}")
    assert "data" in h["failedReason"] and h["atm"] == "1"
    assert r.zscore(f"{prefix}:{qname}:failed", job.id) is not None


@pytest.mark.parametrize("concurrency", [1, 3])
def test_bytes_that_are_not_utf8_fail_their_job_once_and_the_worker_goes_on(redis_url, prefix, qname, queue, r,
                                                                           wait_for, concurrency):
    """A foreign producer's job hash holding bytes that are not UTF-8 (in a value, in a
    field name): the job fails once before its processor with a reason naming the field;
    the answer it came in (a pick-up, or a finish that fetched it) is read whole, so the
    jobs around it run."""
    queue.pause()
    jobs = [queue.add("n", {"i": i}) for i in range(5)]
    import redis as _redis

    binary = _redis.Redis.from_url(redis_url)  # writes bytes as they are
    try:
        binary.hset(f"{prefix}:{qname}:{jobs[1].id}", "data", b'{"i":"\xff\xfe"}')
        binary.hset(f"{prefix}:{qname}:{jobs[3].id}", b"odd\xc3", b"1")
    finally:
        binary.close()
    ran = []
    w = make_worker(redis_url, prefix, qname, lambda j: ran.append(j.id) or j.data["i"], concurrency=concurrency)
    with running(w):
        queue.resume()
        wait_for(lambda: w.completed_count == 3 and w.failed_count == 2, what="every job ended")
    assert sorted(ran) == sorted(j.id for j in (jobs[0], jobs[2], jobs[4]))
    reason = r.hget(f"{prefix}:{qname}:{jobs[1].id}", "failedReason")
    assert "field 'data'" in reason and "not UTF-8" in reason and "\\udcff" in reason
    assert "not UTF-8 in its name" in r.hget(f"{prefix}:{qname}:{jobs[3].id}", "failedReason")
    assert queue.get_job_counts("active", "wait") == {"active": 0, "wait": 0}


def test_missing_processor_fails_with_queue_and_name_and_worker_goes_on(redis_url, prefix, qname, queue, r, wait_for):
    class Routes:
        @hookimpl
        def echomq_register_processors(self, registry):
            registry.add(qname, "known", lambda job: "ok")

    unknown = queue.add("unknown-name", {})
    known = queue.add("known", {})
    w = make_worker(redis_url, prefix, qname, None, plugins=host_with(Routes()))
    with running(w):
        wait_for(lambda: w.completed_count == 1 and w.failed_count == 1, what="both jobs")
    reason = r.hget(f"{prefix}:{qname}:{unknown.id}", "failedReason")
    assert "unknown-name" in reason and qname in reason
    assert r.hget(f"{prefix}:{qname}:{known.id}", "returnvalue") == '"ok"'


# --------------------------------------------------------------------------- keep jobs
def test_remove_on_complete_job_option_wins_over_worker(redis_url, prefix, qname, queue, r, wait_for, events):
    removed = queue.add("x", {}, {"removeOnComplete": True})
    kept = [queue.add("x", {}) for _ in range(4)]
    w = make_worker(redis_url, prefix, qname, lambda j: 1, remove_on_complete=2)
    with running(w):
        wait_for(lambda: w.completed_count == 5, what="completions")
    assert not r.exists(f"{prefix}:{qname}:{removed.id}")
    ids = r.zrange(f"{prefix}:{qname}:completed", 0, -1)
    assert len(ids) == 2 and set(ids) <= {k.id for k in kept}
    # the completed event is still emitted for the removed job
    assert any(e.get("jobId") == removed.id and e["event"] == "completed" for e in events())


def test_remove_on_fail_worker_option(redis_url, prefix, qname, queue, r, wait_for):
    jobs = [queue.add("x", {}) for _ in range(3)]

    def boom(job):
        raise ValueError("nope")

    w = make_worker(redis_url, prefix, qname, boom, remove_on_fail=True)
    with running(w):
        wait_for(lambda: w.failed_count == 3, what="failures")
    assert r.zcard(f"{prefix}:{qname}:failed") == 0
    assert not any(r.exists(f"{prefix}:{qname}:{j.id}") for j in jobs)


# --------------------------------------------------------------------------- waiting
def test_delayed_job_starts_at_its_due_time_not_at_drain_delay(redis_url, prefix, qname, queue, wait_for):
    started = []
    w = make_worker(redis_url, prefix, qname, lambda j: started.append(time.time()), drain_delay=5)
    with running(w):
        wait_for(lambda: w.last_fetch_at is not None, what="first fetch")
        gevent.sleep(0.1)  # the worker is now blocked on the marker
        t0 = time.time()
        queue.add("later", {}, {"delay": 400})
        wait_for(lambda: started, timeout=5, what="delayed job start")
    assert started[0] - t0 >= 0.39
    assert started[0] - t0 < 3.0, "the delay marker did not wake the blocked worker"


def test_new_job_wakes_an_idle_worker(redis_url, prefix, qname, queue, wait_for):
    started = []
    w = make_worker(redis_url, prefix, qname, lambda j: started.append(time.time()), drain_delay=5)
    with running(w):
        wait_for(lambda: w.last_fetch_at is not None, what="first fetch")
        gevent.sleep(0.2)
        t0 = time.time()
        queue.add("now", {})
        wait_for(lambda: started, timeout=4, what="job start")
    assert started[0] - t0 < 3.0, "the base marker did not wake the blocked worker"


def test_local_pause_and_resume(redis_url, prefix, qname, queue, r, wait_for):
    w = make_worker(redis_url, prefix, qname, lambda j: j.id, drain_delay=5)

    with running(w):
        wait_for(lambda: marker_wait_blocked(w, r), what="the idle worker blocked on the marker")
        w.pause()
        # the pause takes the loop out of its marker wait; from then on only resume wakes it
        wait_for(lambda: not marker_wait_blocked(w, r), timeout=3, what="the paused loop off the marker")
        job = queue.add("p", {})
        assert r.zcard(queue.keys.marker) == 1  # the add's wake-up marker, left for others
        assert w.completed_count == 0 and w.paused and queue.get_job_state(job.id) == "waiting"
        w.resume()
        wait_for(lambda: w.completed_count == 1, what="completion after resume")


def test_a_resume_while_the_pause_cancels_the_marker_wait_is_not_lost(redis_url, prefix, qname, queue, r, wait_for):
    # the paused loop cancels its marker wait (a call that yields); a resume in that window
    # sets the wake-up event, which the loop must see rather than clear before it waits
    w = make_worker(redis_url, prefix, qname, lambda j: j.id, drain_delay=5)
    with running(w):
        wait_for(lambda: marker_wait_blocked(w, r), what="the idle worker blocked on the marker")
        marker = w._fetch.marker
        cancel = marker.cancel

        def slow_cancel(*args, **kw):
            cancel(*args, **kw)
            gevent.spawn(w.resume)  # runs during the sleep below, inside the cancel
            gevent.sleep(0.1)

        marker.cancel = slow_cancel
        w.pause()
        wait_for(lambda: not w.paused, timeout=3, what="the resume")
        job = queue.add("p", {})
        wait_for(lambda: w.completed_count == 1, timeout=5, what="the job after the resume")
        assert queue.get_job_state(job.id) == "completed"


def test_worker_name_is_visible_as_blocking_client_name(redis_url, prefix, qname, queue, r, wait_for):
    w = make_worker(redis_url, prefix, qname, lambda j: 1, name="alpha")
    with running(w):
        wait_for(lambda: w.last_fetch_at is not None, what="first fetch")
        names = [c.get("name") for c in r.client_list()]
        assert any(n and n.startswith(f"{prefix}:") and n.endswith(":w:alpha") for n in names)


def test_bad_options_are_refused_with_their_name(redis_url, prefix, qname):
    with pytest.raises(ConfigError, match="concurency"):
        Worker(qname, lambda j: 1, connection=redis_url, prefix=prefix, concurency=3)
    with pytest.raises(ConfigError, match="lock_renew_time"):
        Worker(qname, lambda j: 1, connection=redis_url, prefix=prefix, lock_duration=1000, lock_renew_time=1000)
    with pytest.raises(TypeError, match="callable"):
        Worker(qname, "not callable", connection=redis_url, prefix=prefix)  # type: ignore[arg-type]


def test_docs_list_every_worker_option():
    """docs/worker.md documents every option of the one options table."""
    import os

    from echomq_gevent.worker.options import WORKER_OPTIONS

    path = os.path.join(os.path.dirname(__file__), "..", "..", "..", "docs", "worker.md")
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    missing = [name for name in WORKER_OPTIONS if f"| `{name}` |" not in text]
    assert not missing, f"docs/worker.md lacks the option(s) {missing}"


# --------------------------------------------------------------------------- health
def test_a_worker_still_setting_up_is_not_reported_as_fetching(redis_url, prefix, qname, wait_for):
    # a readiness probe asked while the set-up waits on Redis (its first PING) once saw the
    # fetch loop "alive" and the lock-renewal thread not yet made: ready 200, then live 503
    w = make_worker(redis_url, prefix, qname, lambda j: None)
    seen = []
    setup = w._lifecycle.setup

    def observed_setup():
        seen.append(w.health())
        setup()

    w._lifecycle.setup = observed_setup
    with running(w):
        wait_for(lambda: w.health().fetch_loop_alive, what="the fetch loop")
        assert w.health().lock_renewal_alive  # whenever the loop counts as alive
        (during,) = seen
        assert during.running and not during.fetch_loop_alive
    assert not w.health().fetch_loop_alive


def test_the_packed_finish_options_follow_the_job_and_the_worker(redis_url, prefix, qname):
    # ARGV[8] of moveToFinished is packed once per kind and reused; what is reused must
    # always equal what packing the options afresh gives
    import msgpack

    from echomq_gevent.queue.job import Job
    from echomq_gevent.protocol.library import pack

    w = make_worker(redis_url, prefix, qname, lambda job: None, limiter={"max": 5, "duration": 1000})
    cases = [({}, "t:1", "completed"), ({"attempts": 3}, "t:1", "completed"), ({}, "t:2", "failed"),
             ({"attempts": 3}, "t:1", "failed"), ({"removeOnComplete": 5}, "t:1", "completed"),
             ({"removeOnFail": {"age": 10}}, "t:1", "failed"), ({"attempts": True}, "t:1", "failed")]

    def check():
        for opts, token, target in cases:
            packed = w._settler.packed_finish_opts(Job(w.scripts, "1", "n", {}, dict(opts)), token, target)
            assert packed == pack(w._settler.finish_opts(Job(w.scripts, "1", "n", {}, dict(opts)), token, target))
        return msgpack.unpackb(packed)

    try:
        check()
        check()  # from the cache
        # each setting a worker exposes, changed on its own, reaches the packed options
        w.name = "renamed"
        assert check()["name"] == "renamed"
        w.lock_duration = 1234
        assert check()["lockDuration"] == 1234
        w.limiter["max"] = 9  # changed in place
        assert check()["limiter"] == {"max": 9, "duration": 1000}
        w.limiter = None
        assert check()["limiter"] is None
    finally:
        w.close()
