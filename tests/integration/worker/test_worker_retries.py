"""Failures as BullMQ 6.7.0 decides them: attempts, backoff, UnrecoverableError,
stackTraceLimit, defa, max_started_attempts, DelayedError, RateLimitError, the
limiter, job_timeout, offload to threads, failure-policy plugins."""
from __future__ import annotations

import json
import threading
import time

import gevent
import gevent.monkey
import pytest

from echomq_gevent import DelayedError, Queue, RateLimitError, UnrecoverableError
from echomq_gevent.plugins.hookspecs import FailureDecision, hookimpl

from integration.worker_helpers import Recorder, host_with, make_worker, running


blocking_sleep = gevent.monkey.get_original("time", "sleep")


def job_hash(r, prefix, qname, job_id):
    return r.hgetall(f"{prefix}:{qname}:{job_id}")


def test_fails_twice_then_completes_with_three_attempts(redis_url, prefix, qname, queue, r, wait_for, events):
    job = queue.add("flaky", {}, {"attempts": 3, "backoff": {"type": "fixed", "delay": 100}})
    starts = []
    rec = Recorder()

    def proc(j):
        starts.append(time.time())
        if len(starts) < 3:
            raise ValueError(f"failure {len(starts)}")
        return "finally"

    w = make_worker(redis_url, prefix, qname, proc, plugins=host_with(rec))
    with running(w):
        wait_for(lambda: w.completed_count == 1, what="completion")
    h = job_hash(r, prefix, qname, job.id)
    assert h["atm"] == "3" and h["ats"] == "3"
    assert h["returnvalue"] == '"finally"'
    assert h["failedReason"] == "failure 2"
    stack = json.loads(h["stacktrace"])
    assert len(stack) == 2 and "ValueError: failure 1" in stack[0] and "ValueError: failure 2" in stack[1]
    assert all(b - a >= 0.095 for a, b in zip(starts, starts[1:])), "backoff delay not respected"
    evs = [e["event"] for e in events() if e.get("jobId") == job.id]
    assert evs.count("delayed") == 2 and evs[-1] == "completed" and "failed" not in evs
    assert [c[2] for c in rec.calls if c[0] == "retried"] == [100, 100]
    assert w.counters["retried"] == 2


def test_exponential_backoff_waits_double(redis_url, prefix, qname, queue, r, wait_for, events):
    job = queue.add("exp", {}, {"attempts": 3, "backoff": {"type": "exponential", "delay": 150}})
    starts = []

    def proc(j):
        starts.append(time.time())
        if len(starts) < 3:
            raise RuntimeError("again")
        return len(starts)

    w = make_worker(redis_url, prefix, qname, proc)
    with running(w):
        wait_for(lambda: w.completed_count == 1, what="completion")
    assert starts[1] - starts[0] >= 0.145
    assert starts[2] - starts[1] >= 0.295
    delayed = [e for e in events() if e["event"] == "delayed" and e["jobId"] == job.id]
    assert len(delayed) == 2


def test_retry_without_backoff_goes_straight_back_to_wait(redis_url, prefix, qname, queue, r, wait_for, events):
    job = queue.add("again", {}, {"attempts": 2})
    calls = []

    def proc(j):
        calls.append(j.attempts_made)
        if len(calls) == 1:
            raise ValueError("first")
        return "second"

    w = make_worker(redis_url, prefix, qname, proc)
    with running(w):
        wait_for(lambda: w.completed_count == 1, what="completion")
    assert calls == [0, 1]
    evs = [(e["event"], e.get("prev")) for e in events() if e.get("jobId") == job.id]
    assert ("waiting", "active") in evs and not any(ev == "delayed" for ev, _ in evs)


def test_attempts_exhausted_fails_with_retries_exhausted_event(redis_url, prefix, qname, queue, r, wait_for, events):
    job = queue.add("doomed", {}, {"attempts": 2, "backoff": 50})
    rec = Recorder()

    def proc(j):
        raise KeyError("missing thing")

    w = make_worker(redis_url, prefix, qname, proc, plugins=host_with(rec))
    with running(w):
        wait_for(lambda: w.failed_count == 1, what="final failure")
    h = job_hash(r, prefix, qname, job.id)
    assert h["atm"] == "2" and h["failedReason"] == "'missing thing'"
    evs = [e for e in events() if e.get("jobId") == job.id]
    names = [e["event"] for e in evs]
    assert names[-2:] == ["failed", "retries-exhausted"]
    assert evs[-1]["attemptsMade"] == "2"
    assert rec.names("failed") == [job.id] and rec.names("retried") == [job.id]


def test_unrecoverable_error_skips_remaining_attempts(redis_url, prefix, qname, queue, r, wait_for):
    job = queue.add("fatal", {}, {"attempts": 5, "backoff": 10})
    calls = []

    def proc(j):
        calls.append(1)
        raise UnrecoverableError("bad input")

    w = make_worker(redis_url, prefix, qname, proc)
    with running(w):
        wait_for(lambda: w.failed_count == 1, what="failure")
    assert len(calls) == 1
    h = job_hash(r, prefix, qname, job.id)
    assert h["failedReason"] == "bad input" and h["atm"] == "1"


@pytest.mark.parametrize("limit,expected", [(1, 1), (0, 0)])
def test_stack_trace_limit(redis_url, prefix, qname, queue, r, limit, expected, wait_for):
    job = queue.add("st", {}, {"attempts": 3, "stackTraceLimit": limit})

    def proc(j):
        raise ValueError("x")

    w = make_worker(redis_url, prefix, qname, proc)
    with running(w):
        wait_for(lambda: w.failed_count == 1, what="failure")
    assert len(json.loads(job_hash(r, prefix, qname, job.id)["stacktrace"])) == expected


def test_deferred_failure_fails_without_running(redis_url, prefix, qname, queue, r, wait_for):
    queue.pause()
    job = queue.add("defa", {}, {"attempts": 3})
    r.hset(f"{prefix}:{qname}:{job.id}", "defa", "job stalled more than allowable limit")
    ran = []
    w = make_worker(redis_url, prefix, qname, lambda j: ran.append(1))
    with running(w):
        queue.resume()
        wait_for(lambda: w.failed_count == 1, what="failure")
    assert ran == []
    h = job_hash(r, prefix, qname, job.id)
    assert h["failedReason"] == "job stalled more than allowable limit" and "defa" not in h


def test_max_started_attempts(redis_url, prefix, qname, queue, r, wait_for):
    queue.pause()
    job = queue.add("restarted", {}, {"attempts": 10})
    r.hset(f"{prefix}:{qname}:{job.id}", "ats", "3")  # the pick-up makes it 4
    ran = []
    w = make_worker(redis_url, prefix, qname, lambda j: ran.append(1), max_started_attempts=3)
    with running(w):
        queue.resume()
        wait_for(lambda: w.failed_count == 1, what="failure")
    assert ran == []
    assert job_hash(r, prefix, qname, job.id)["failedReason"] == "job started more than allowable limit"


def test_delayed_error_leaves_the_job_where_the_processor_put_it(redis_url, prefix, qname, queue, r, wait_for):
    job = queue.add("later", {}, {"attempts": 1})
    runs = []

    def proc(j):
        runs.append(time.time())
        if len(runs) == 1:
            j.move_to_delayed(int(time.time() * 1000) + 300, j.token)
            raise DelayedError()
        return "second run"

    w = make_worker(redis_url, prefix, qname, proc)
    with running(w):
        wait_for(lambda: w.completed_count == 1, what="completion")
    assert runs[1] - runs[0] >= 0.29
    h = job_hash(r, prefix, qname, job.id)
    assert h["returnvalue"] == '"second run"' and h["atm"] == "1"  # the delay was no attempt
    assert w.failed_count == 0


def test_rate_limit_error_puts_the_job_back_and_waits(redis_url, prefix, qname, queue, r, wait_for, events):
    job = queue.add("limited", {}, {"attempts": 1})
    runs = []
    holder = {}

    def proc(j):
        runs.append(time.time())
        if len(runs) == 1:
            holder["w"].rate_limit(400)
            raise RateLimitError()
        return "ok"

    w = make_worker(redis_url, prefix, qname, proc, limiter={"max": 100, "duration": 1000})
    holder["w"] = w
    with running(w):
        wait_for(lambda: w.completed_count == 1, what="completion")
    assert runs[1] - runs[0] >= 0.35
    h = job_hash(r, prefix, qname, job.id)
    assert h["atm"] == "1" and h["ats"] == "2"
    evs = [(e["event"], e.get("prev")) for e in events() if e.get("jobId") == job.id]
    assert ("waiting", "active") in evs


def test_rate_limit_sets_the_limiter_key(redis_url, prefix, qname, r):
    w = make_worker(redis_url, prefix, qname, lambda j: 1)
    w.rate_limit(5000)
    assert int(r.get(f"{prefix}:{qname}:limiter")) == 9007199254740991
    assert 0 < r.pttl(f"{prefix}:{qname}:limiter") <= 5000
    with pytest.raises(ValueError, match="ms"):
        w.rate_limit(0)


def test_worker_limiter_spaces_out_starts(redis_url, prefix, qname, queue, wait_for):
    queue.add_bulk([("l", {"i": i}, None) for i in range(6)])
    starts = []
    w = make_worker(redis_url, prefix, qname, lambda j: starts.append(time.time()), concurrency=5,
                    limiter={"max": 2, "duration": 400})
    with running(w):
        wait_for(lambda: w.completed_count == 6, what="all jobs", timeout=15)
    starts.sort()
    # no more than 2 starts in any 400 ms window
    assert all(starts[i + 2] - starts[i] >= 0.35 for i in range(len(starts) - 2))


def test_job_timeout_fails_the_attempt_and_frees_the_slot(redis_url, prefix, qname, queue, r, wait_for):
    slow = queue.add("slow", {}, {"attempts": 2})
    fast = queue.add("fast", {})
    calls = []

    def proc(j):
        calls.append(j.name)
        if j.name == "slow":
            gevent.sleep(5)
        return j.name

    w = make_worker(redis_url, prefix, qname, proc, job_timeout=200, concurrency=1)
    with running(w):
        wait_for(lambda: w.failed_count == 1 and w.completed_count == 1, what="timeouts and completion")
    h = job_hash(r, prefix, qname, slow.id)
    assert "job_timeout" in h["failedReason"] and h["atm"] == "2"
    assert calls.count("slow") == 2 and "fast" in calls
    assert not r.exists(f"{prefix}:{qname}:{slow.id}:lock")
    assert job_hash(r, prefix, qname, fast.id)["returnvalue"] == '"fast"'


def test_offload_thread_runs_blocking_code_in_parallel_threads(redis_url, prefix, qname, queue, wait_for):
    queue.add_bulk([("block", {"i": i}, None) for i in range(3)])
    idents = set()
    state = {"now": 0, "max": 0}
    lock = threading.Lock()
    ticks = []

    def proc(j):
        with lock:
            state["now"] += 1
            state["max"] = max(state["max"], state["now"])
        idents.add(threading.get_ident())
        blocking_sleep(0.8)  # a call that does not yield, even in a patched process
        with lock:
            state["now"] -= 1
        return j.data["i"]

    def ticker():
        while True:
            ticks.append(time.monotonic())
            gevent.sleep(0.05)

    t = gevent.spawn(ticker)
    w = make_worker(redis_url, prefix, qname, proc, concurrency=3, offload="thread")
    try:
        with running(w):
            wait_for(lambda: w.completed_count == 3, what="completions")
    finally:
        t.kill()
    assert state["max"] == 3
    assert threading.main_thread().ident not in idents
    gaps = [b - a for a, b in zip(ticks, ticks[1:])]
    assert gaps and max(gaps) < 0.5, "the hub was blocked while the threads slept"


def test_offload_thread_with_job_timeout(redis_url, prefix, qname, queue, r, wait_for):
    job = queue.add("stuck", {})

    finished = gevent.monkey.get_original("threading", "Event")()

    def proc(j):
        blocking_sleep(1.0)
        finished.set()
        return "late"

    w = make_worker(redis_url, prefix, qname, proc, offload="thread", job_timeout=150)
    with running(w):
        wait_for(lambda: w.failed_count == 1, what="timeout failure")
        h = job_hash(r, prefix, qname, job.id)
        assert "job_timeout" in h["failedReason"] and "thread runs on" in h["failedReason"]
        wait_for(finished.is_set, what="the timed-out processor's thread to finish")
    # the worker has closed after its thread returned: nothing can write the result any more
    assert w.closed and "returnvalue" not in job_hash(r, prefix, qname, job.id)


def test_failure_policy_moves_job_to_another_queue(redis_url, prefix, qname, queue, r, wait_for):
    class DeadLetter:
        @hookimpl
        def echomq_failure_decision(self, worker, job, error):
            return FailureDecision.move_to(qname + "-dlq")

    job = queue.add("to-dlq", {"x": 1}, {"attempts": 5})
    w = make_worker(redis_url, prefix, qname, lambda j: 1 / 0, plugins=host_with(DeadLetter()))
    with running(w):
        wait_for(lambda: w.failed_count == 1, what="failure")
    assert job_hash(r, prefix, qname, job.id)["failedReason"] == "division by zero"
    dlq = Queue(qname + "-dlq", connection=redis_url, prefix=prefix)
    try:
        (copy,) = dlq.get_jobs(["wait"])
        assert copy.name == "to-dlq" and copy.data == {"x": 1} and copy.attempts_made == 0
    finally:
        dlq.close()


def test_failure_policy_retry_overrides_attempts(redis_url, prefix, qname, queue, r, wait_for):
    class RetryOnce:
        seen = 0

        @hookimpl
        def echomq_failure_decision(self, worker, job, error):
            RetryOnce.seen += 1
            return FailureDecision.retry(50) if RetryOnce.seen == 1 else None

    job = queue.add("policy", {})  # attempts 0: BullMQ would not retry
    runs = []

    def proc(j):
        runs.append(1)
        raise ValueError("x")

    w = make_worker(redis_url, prefix, qname, proc, plugins=host_with(RetryOnce()))
    with running(w):
        wait_for(lambda: w.failed_count == 1, what="final failure")
    assert len(runs) == 2 and job_hash(r, prefix, qname, job.id)["atm"] == "2"
