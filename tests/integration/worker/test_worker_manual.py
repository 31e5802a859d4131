"""Manual processing: Worker.get_next_job, job.move_to_completed / move_to_failed / extend_lock."""
from __future__ import annotations

import gevent
import pytest

from echomq_gevent import Worker
from echomq_gevent.errors import EchoMQError, JobLockMismatch, UnrecoverableError

from integration.worker_helpers import running


@pytest.fixture
def manual(redis_url, prefix, qname):
    w = Worker(qname, None, connection=redis_url, prefix=prefix, lock_duration=5000, drain_delay=0.2,
               remove_on_complete=False, metrics={"maxDataPoints": 5})
    yield w
    w.close(timeout=1)


def _snapshot(r, queue):
    return {k: r.dump(k) for k in r.scan_iter(match=queue.keys.base + "*") if not k.endswith(":events")}


def test_take_extend_complete_and_fetch_next(manual, queue, r):
    first = queue.add("a", {"n": 1})
    second = queue.add("b", {"n": 2})
    job = manual.get_next_job("tok-1")
    assert (job.id, job.data, job.token) == (first.id, {"n": 1}, "tok-1")
    assert r.get(queue.keys.lock(job.id)) == "tok-1" and queue.get_job_state(job.id) == "active"
    assert job.extend_lock("tok-1", 20000) is True and r.pttl(queue.keys.lock(job.id)) > 10000
    assert job.extend_lock("not-mine", 20000) is False
    before = _snapshot(r, queue)
    with pytest.raises(JobLockMismatch, match=f"job {job.id}"):
        job.move_to_completed({"ok": 1}, "not-mine")
    assert _snapshot(r, queue) == before, "a wrong token changed Redis"
    nxt = job.move_to_completed({"ok": 1}, "tok-1", fetch_next=True)
    assert queue.get_job(first.id).returnvalue == {"ok": 1}
    assert queue.get_job_state(first.id) == "completed"
    assert (nxt.id, nxt.token) == (second.id, "tok-1") and queue.get_job_state(second.id) == "active"
    assert nxt.move_to_completed(None, "tok-1", fetch_next=True) is None
    assert queue.get_metrics("completed")["meta"]["count"] == 2  # the worker's options apply


def test_move_to_failed_follows_the_attempt_rules(manual, queue):
    job = queue.add("flaky", {}, {"attempts": 2})
    taken = manual.get_next_job("t")
    taken.move_to_failed(ValueError("first"), "t")
    assert queue.get_job_state(job.id) == "waiting" and queue.get_job(job.id).attempts_made == 1
    taken = manual.get_next_job("t")
    taken.move_to_failed(ValueError("second"), "t")
    back = queue.get_job(job.id)
    assert queue.get_job_state(job.id) == "failed" and back.failed_reason == "second" and back.attempts_made == 2
    doomed = queue.add("doomed", {}, {"attempts": 5, "backoff": {"type": "fixed", "delay": 1000}})
    manual.get_next_job("t").move_to_failed(UnrecoverableError("no way"), "t")
    assert queue.get_job_state(doomed.id) == "failed"
    later = queue.add("later", {}, {"attempts": 3, "backoff": {"type": "fixed", "delay": 60000}})
    manual.get_next_job("t").move_to_failed(RuntimeError("try later"), "t")
    assert queue.get_job_state(later.id) == "delayed"


def test_blocking_take_waits_for_a_job(manual, queue):
    assert manual.get_next_job("t", block=False) is None
    assert manual.get_next_job("t", timeout=0.05) is None
    adder = gevent.spawn_later(0.1, queue.add, "late", {})
    job = manual.get_next_job("t", timeout=5)
    assert job is not None and job.id == adder.get().id


def test_bad_input_and_closed_worker(redis_url, prefix, qname, queue, r, wait_for):
    job = queue.add("x", {})
    w = Worker(qname, None, connection=redis_url, prefix=prefix)
    with pytest.raises(ValueError, match="token must be a non-empty string"):
        w.get_next_job("")
    plain = queue.get_job(job.id)
    with pytest.raises(EchoMQError, match="was not taken with Worker.get_next_job"):
        plain.move_to_completed(1, "t")
    with pytest.raises(ValueError, match="duration_ms"):
        plain.extend_lock("t", 0)
    w.close(timeout=1)
    before = _snapshot(r, queue)
    with pytest.raises(EchoMQError, match="is closed"):
        w.get_next_job("t")
    assert _snapshot(r, queue) == before and queue.get_job_state(job.id) == "waiting"
    runner = Worker(qname, lambda j: None, connection=redis_url, prefix=prefix, drain_delay=0.2)
    with running(runner):
        wait_for(lambda: runner.last_fetch_at, what="the worker to run")
        with pytest.raises(EchoMQError, match="running its own fetch loop"):
            runner.get_next_job("t")
