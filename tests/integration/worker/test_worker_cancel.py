"""Worker.cancel_job / cancel_all_jobs and lock-lost cancellation against a real Redis."""
from __future__ import annotations

import time

import gevent
import gevent.event
import pytest

from echomq_gevent.errors import EchoMQError, JobCancelled

from integration.worker_helpers import Recorder, host_with, make_worker, running


def test_a_sleeping_greenlet_job_is_interrupted_and_fails_once(redis_url, prefix, qname, queue, r, wait_for):
    victim = queue.add("long", {"s": 30})
    other = queue.add("short", {"s": 0.3})
    rec = Recorder()
    seen = []

    def proc(job):
        try:
            gevent.sleep(job.data["s"])
        except JobCancelled as exc:
            seen.append((job.id, exc.reason, job.cancelled))
            raise
        return "slept"

    w = make_worker(redis_url, prefix, qname, proc, concurrency=2, plugins=host_with(rec))
    with running(w):
        wait_for(lambda: len(w.active_jobs) == 2, what="both jobs running")
        w.cancel_job(victim.id, "user pressed stop")
        wait_for(lambda: rec.names("failed") and rec.names("completed"), what="both jobs settled")
    assert seen == [(victim.id, "user pressed stop", True)]
    assert rec.names("failed") == [victim.id] and rec.names("completed") == [other.id]
    back = queue.get_job(victim.id)
    assert back.failed_reason == "job cancelled: user pressed stop" and back.attempts_made == 1
    assert queue.get_job(other.id).returnvalue == "slept"
    assert w.counters["failed"] == 1 and w.counters["completed"] == 1


def test_a_cancelled_attempt_is_retried_when_attempts_are_left(redis_url, prefix, qname, queue, wait_for):
    job = queue.add("retry-me", {}, {"attempts": 2})
    starts = []

    def proc(j):
        starts.append(j.attempts_made)
        if len(starts) == 1:
            gevent.sleep(30)
        return "second time"

    w = make_worker(redis_url, prefix, qname, proc)
    with running(w):
        wait_for(lambda: starts, what="first attempt")
        assert w.cancel_all_jobs() == 1
        wait_for(lambda: queue.get_job_state(job.id) == "completed", what="the retry to complete")
    assert starts == [0, 1] and queue.get_job(job.id).returnvalue == "second time"


def test_a_thread_offloaded_job_sees_the_flag(redis_url, prefix, qname, queue, wait_for):
    job = queue.add("cpu", {})
    polls = []

    def proc(j):
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # CPU-bound work in chunks, checking the flag
            sum(range(20000))
            polls.append(1)
            j.check_cancelled()
        return "finished anyway"

    w = make_worker(redis_url, prefix, qname, proc, offload="thread")
    with running(w):
        wait_for(lambda: polls, what="the thread to run")
        w.cancel_job(job.id)
        wait_for(lambda: queue.get_job_state(job.id) == "failed", what="the job to fail")
    assert queue.get_job(job.id).failed_reason == "job cancelled"


def test_a_job_whose_lock_is_lost_is_cancelled_and_nothing_is_written(redis_url, prefix, qname, queue, r, wait_for):
    job = queue.add("stolen", {})
    lock_key = queue.keys.lock(job.id)
    rec = Recorder()
    interrupted = []

    def proc(j):
        r.set(lock_key, "another-worker", px=10000)
        try:
            gevent.sleep(30)
        except JobCancelled as exc:
            interrupted.append(exc.reason)
            raise
        return "mine"

    w = make_worker(redis_url, prefix, qname, proc, lock_duration=400, plugins=host_with(rec))
    with running(w):
        wait_for(lambda: interrupted, what="the processor to be interrupted")
        wait_for(lambda: not w.active_jobs, what="slot freed")
    assert interrupted == ["the job's lock was lost"] and rec.names("lock_lost") == [job.id]
    h = r.hgetall(queue.keys.job(job.id))
    assert "returnvalue" not in h and "failedReason" not in h and r.get(lock_key) == "another-worker"
    assert w.counters["failed"] == 0 and w.completed_count == 0


def test_cancel_of_an_unknown_job_is_refused_and_changes_nothing(redis_url, prefix, qname, queue, r):
    job = queue.add("waiting", {})
    before = {k: r.dump(k) for k in r.scan_iter(match=queue.keys.base + "*")}
    w = make_worker(redis_url, prefix, qname, lambda j: None)
    with pytest.raises(EchoMQError, match=f"cannot cancel job {job.id}.*is not active on this worker"):
        w.cancel_job(job.id, "why")
    with pytest.raises(ValueError, match="job_id must be a non-empty string"):
        w.cancel_job(7)
    with pytest.raises(ValueError, match="reason must be a string"):
        w.cancel_all_jobs(reason=5)
    assert w.cancel_all_jobs() == 0
    assert {k: r.dump(k) for k in r.scan_iter(match=queue.keys.base + "*")} == before


# ------------------------------------------------------------------ runtime concurrency
def test_concurrency_grows_and_shrinks_while_running_without_dropping_a_job(redis_url, prefix, qname, queue, wait_for):
    jobs = queue.add_bulk([("work", {"i": i}) for i in range(8)])
    gate = gevent.event.Event()
    state = {"now": 0, "max_after_shrink": 0, "shrunk": False}
    done = []

    def proc(job):
        state["now"] += 1
        if state["shrunk"]:
            state["max_after_shrink"] = max(state["max_after_shrink"], state["now"])
        try:
            gate.wait()
            gevent.sleep(0.05)
        finally:
            state["now"] -= 1
        done.append(job.id)
        return job.data["i"]

    w = make_worker(redis_url, prefix, qname, proc, concurrency=1)
    with running(w):
        wait_for(lambda: len(w.active_jobs) == 1, what="one job at concurrency 1")
        w.concurrency = 4
        wait_for(lambda: len(w.active_jobs) == 4, what="four jobs after growing")
        w.concurrency = 1
        state["shrunk"] = True
        gate.set()
        wait_for(lambda: len(done) == 8, timeout=15, what="every job")
        with pytest.raises(EchoMQError, match="concurrency"):
            w.concurrency = 0
        assert w.concurrency == 1
    assert sorted(done) == sorted(j.id for j in jobs) and w.completed_count == 8
    # the four running when it shrank finished; after them, one at a time
    assert state["max_after_shrink"] == 1 and w.options["concurrency"] == 1
