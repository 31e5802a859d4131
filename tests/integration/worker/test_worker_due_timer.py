"""The fetch loop's wake-up at a delayed job's due time (``worker/due_timer.py``): an idle
worker arms its due timer for the earliest delayed job, the timer's call ends the wait and
the job starts, not before its time; without a timerfd the loop's own timer does it; a
closed worker cancels its wake-up."""
from __future__ import annotations

import sys

import pytest

from echomq_gevent.worker import fetch as fetch_module
from integration.worker_helpers import make_worker, marker_wait_blocked, running


def test_an_idle_worker_wakes_on_its_due_timer_and_starts_the_job_at_its_time(redis_url, prefix, qname, queue, r,
                                                                             wait_for):
    if not sys.platform.startswith("linux"):
        pytest.skip("timerfd is Linux's")
    w = make_worker(redis_url, prefix, qname, lambda j: j.name, drain_delay=5)
    with running(w):
        wait_for(lambda: marker_wait_blocked(w, r), what="the idle worker blocked on the marker")
        timer = w._fetch.due_timer
        assert timer is not None
        calls = []
        real = timer.on_due
        timer.on_due = lambda: calls.append(1) or real()
        job = queue.add("later", {}, {"delay": 400})
        due = job.timestamp + 400
        wait_for(lambda: timer.armed == due, what="the due timer armed for the delayed job")
        wait_for(lambda: w.completed_count == 1, timeout=10, what="the delayed job")
        assert calls == [1]  # the due timer's call ended the wait
        assert int(r.hget(queue.keys.job(job.id), "processedOn")) >= due  # never before its time
    assert timer.closed  # the closed worker cancelled its wake-up


def test_without_a_timerfd_the_loop_wakes_on_its_own_timer(redis_url, prefix, qname, queue, r, wait_for,
                                                          monkeypatch):
    monkeypatch.setattr(fetch_module, "make_due_timer", lambda on_due: None)  # a platform without timerfd
    w = make_worker(redis_url, prefix, qname, lambda j: j.name, drain_delay=5)
    with running(w):
        wait_for(lambda: marker_wait_blocked(w, r), what="the idle worker blocked on the marker")
        assert w._fetch.due_timer is None
        job = queue.add("later", {}, {"delay": 300})
        wait_for(lambda: w.completed_count == 1, timeout=10, what="the delayed job")
        assert int(r.hget(queue.keys.job(job.id), "processedOn")) >= job.timestamp + 300
