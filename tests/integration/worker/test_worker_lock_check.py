"""The lock check before a job starts (``worker/lock_check.py``): a fresh pick-up costs no
Redis command more; an old one has its lock extended first, the checks of one hub turn in one
``extendLocks`` call, and a job whose lock is no longer ours is not started, failed or moved.
(The real frozen process: ``tests/chaos/test_freeze.py``.)"""
from __future__ import annotations

from typing import Any, List

import gevent.event

from echomq_gevent.plugins.hookspecs import hookimpl
from echomq_gevent.worker.lock_check import marker_pickup_stamp, start_margin
from integration.worker_helpers import host_with, make_worker, running


def _commands(r) -> int:
    """The commands clients sent that reach queue state: script calls and marker waits
    (``INFO commandstats`` also counts the commands a script runs, which these leave out)."""
    stats = r.info("commandstats")
    return sum(int(stats.get(k, {}).get("calls", 0)) for k in ("cmdstat_evalsha", "cmdstat_eval", "cmdstat_bzpopmin"))


def _run_jobs(redis_url, prefix, qname, queue, r, wait_for, n, margin=None, **opts) -> Any:
    """Run ``n`` jobs added before the worker starts; (Redis commands the run cost, worker)."""
    queue.add_bulk([{"name": "j", "data": {}} for _ in range(n)])
    before = _commands(r)
    w = make_worker(redis_url, prefix, qname, lambda job: None, lock_duration=30000, skip_stalled_check=True,
                    **opts)
    if margin is not None:
        w._fetch.runner.start_check.margin = margin
    with running(w):
        wait_for(lambda: w.completed_count == n, what=f"{n} jobs")
    return _commands(r) - before, w


def test_fresh_pickups_cost_no_command_more(redis_url, prefix, qname, queue, r, wait_for):
    n = 200
    cost, w = _run_jobs(redis_url, prefix, qname, queue, r, wait_for, n)
    assert w._fetch.runner.start_check.checked == 0
    # every start checked: one extendLocks call more for each job (one slot: a turn each)
    checked_cost, wc = _run_jobs(redis_url, prefix, qname + "b", queue.__class__(qname + "b", connection=redis_url,
                                                                                prefix=prefix), r, wait_for, n,
                                 margin=-1.0)
    assert wc._fetch.runner.start_check.calls == n
    # the same run without the check costs the same but for those calls (a little slack for
    # the start and the close, whose waits vary by a command or two)
    assert abs((checked_cost - n) - cost) <= 3, (cost, checked_cost)
    assert cost <= n + 5, cost  # one finish a job (bringing the next job), the first pick-up, a wait or two


class _TakeOver:
    """An ``active`` hook that gives the job's lock to another worker's token, as another
    worker's stalled check and pick-up would while this process was frozen."""

    def __init__(self, r) -> None:
        self.r = r

    @hookimpl
    def echomq_job_active(self, worker, job):
        self.r.set(worker.keys.lock(job.id), "another-worker-token", px=30000)


def test_an_old_pickup_whose_lock_is_gone_is_not_started(redis_url, prefix, qname, queue, r, wait_for):
    ran: List[str] = []
    w = make_worker(redis_url, prefix, qname, lambda job: ran.append(job.id), lock_duration=30000,
                    plugins=host_with(_TakeOver(r)))
    w._fetch.runner.start_check.margin = -1.0  # every pick-up counts as old
    job = queue.add("j", {})
    with running(w):
        wait_for(lambda: w.counters["lock_lost"] == 1, what="the lock check to refuse the job")
        assert ran == []
        # not failed, not moved: the job stays active, with the other worker's lock
        assert queue.get_job_state(job.id) == "active"
        assert r.get(queue.keys.lock(job.id)) == "another-worker-token"
        assert w._fetch.runner.start_check.refused == 1
        wait_for(lambda: not w.active_jobs, what="the slot to be freed")
        assert w.failed_count == 0


def test_the_checks_of_one_turn_go_in_one_call_and_extend_the_locks(redis_url, prefix, qname, queue, r, wait_for):
    release = gevent.event.Event()
    started: List[str] = []

    def proc(job):
        started.append(job.id)
        release.wait(10)

    jobs = queue.add_bulk([{"name": "j", "data": {}} for _ in range(5)])
    w = make_worker(redis_url, prefix, qname, proc, concurrency=5, lock_duration=30000)
    w._fetch.runner.start_check.margin = -1.0
    with running(w):
        wait_for(lambda: len(started) == 5, what="the five jobs to start")
        check = w._fetch.runner.start_check
        assert (check.checked, check.calls, check.refused) == (5, 1, 0)
        for job in jobs:  # extended by the check: the whole duration again
            assert r.pttl(queue.keys.lock(job.id)) > 25000
        release.set()
        wait_for(lambda: w.completed_count == 5, what="the five jobs")


def test_the_margin_and_the_marker_pickups_stamp():
    assert start_margin(30000) == 7.5 and start_margin(2000) == 0.5
    import time

    from echomq_gevent.protocol.clock import now_ms

    read_at = time.monotonic()
    assert marker_pickup_stamp(read_at, None) == read_at
    assert marker_pickup_stamp(read_at, now_ms() + 5000) == read_at  # the server's clock ahead: the read
    # the pick-up ran 3 s before the answer was read (the process stopped while blocked)
    assert read_at - 3.1 < marker_pickup_stamp(read_at, now_ms() - 3000) < read_at - 2.9


def test_a_lock_that_cannot_be_checked_leaves_the_job_unstarted(redis_url, prefix, qname, queue, r, wait_for):
    """Redis unreachable for the check (here: the check's client points at a port nothing
    listens on): the lock cannot be known to be ours, so the job is not started; it stays
    active, for the stalled check of any worker once its lock lapses."""
    import socket

    import redis as redis_lib

    from echomq_gevent.protocol.scripts import Scripts

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    ran: List[str] = []
    w = make_worker(redis_url, prefix, qname, lambda job: ran.append(job.id), lock_duration=30000)
    check = w._fetch.runner.start_check
    check.margin = -1.0
    check.scripts = Scripts(redis_lib.Redis(port=port, socket_connect_timeout=1), w.keys)
    job = queue.add("j", {})
    with running(w):
        wait_for(lambda: check.checked == 1 and not w.active_jobs, what="the failed check to free the slot")
        assert ran == [] and w.failed_count == 0
        assert queue.get_job_state(job.id) == "active"
