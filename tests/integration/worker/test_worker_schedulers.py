"""A scheduler's run in our worker: its next run is created beside the processor and before
the run settles, those of runs taken together in one round trip; a worker of a queue with
schedulers loads the cron library at its start; a burst of due jobs is taken in one call,
with no empty pick-ups."""
from __future__ import annotations

import time

import gevent

from echomq_gevent import Worker
from echomq_gevent.worker import next_runs as next_runs_module
from integration.worker_helpers import marker_wait_blocked
from running_command import run_python


def _wait(cond, timeout=30.0):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        gevent.sleep(0.02)


def _due_now(r, queue, ids):
    for job_id in ids:
        if r.zscore(queue.keys.delayed, job_id) is not None:
            r.zadd(queue.keys.delayed, {job_id: 0})


def test_the_next_run_is_created_beside_the_processor_and_before_the_run_settles(r, queue, redis_url,
                                                                                  monkeypatch):
    slow = 0.3
    real = next_runs_module.next_run_call

    def slow_call(scripts, job, now=None):  # the creation of the next run takes a while
        gevent.sleep(slow)
        return real(scripts, job, now)

    monkeypatch.setattr(next_runs_module, "next_run_call", slow_call)
    queue.upsert_job_scheduler("s", {"every": 60_000}, {"name": "s"})
    first = (r.zrange(queue.keys.delayed, 0, 0) or r.lrange(queue.keys.wait, 0, 0))[0]
    _due_now(r, queue, [first])
    started = {}

    def processor(job):
        started[job.id] = time.time() * 1000
    worker = Worker(queue.name, processor, connection=redis_url, prefix=queue.prefix, drain_delay=1)
    worker.start()
    try:
        _wait(lambda: queue.get_job_state(first) == "completed")
    finally:
        worker.close(timeout=5)
    nxt = [j for j in r.zrange(queue.keys.delayed, 0, -1) if j != first]
    assert len(nxt) == 1, nxt
    created = int(r.hget(queue.keys.job(nxt[0]), "timestamp"))
    finished = int(r.hget(queue.keys.job(first), "finishedOn"))
    # the processor did not wait for the creation...
    assert started[first] < created - slow * 1000 / 2
    # ...but the run was finished only once its next run existed
    assert created <= finished


def test_runs_taken_together_have_their_next_runs_made_in_one_round_trip_before_they_finish(r, queue,
                                                                                           redis_url):
    n = 20
    queue.pause()
    for i in range(n):  # an "every" scheduler's first run is ready at once
        queue.upsert_job_scheduler(f"s{i}", {"every": 60_000}, {"name": "s"})
    firsts = r.lrange(queue.keys.wait, 0, -1)
    assert len(firsts) == n
    worker = Worker(queue.name, lambda job: None, connection=redis_url, prefix=queue.prefix, concurrency=50,
                    drain_delay=5)
    worker.start()
    try:
        _wait(lambda: marker_wait_blocked(worker, r))
        queue.resume()  # all of them ready at once
        _wait(lambda: r.zcard(queue.keys.completed) == n and r.zcard(queue.keys.delayed) == n)
    finally:
        worker.close(timeout=5)
    made = worker._fetch.next_runs
    assert (made.calls, made.batches) == (n, 1)
    # in the order Redis ran them (the events stream), each run's next run was made before
    # the run completed, though the run did not wait for the answer
    events = [(f.get("event"), f.get("jobId")) for _, f in r.xrange(queue.keys.events)]
    for job_id in firsts:
        scheduler = job_id.split(":")[1]
        made_at = next(i for i, (ev, jid) in enumerate(events)
                       if ev == "delayed" and (jid or "").startswith(f"repeat:{scheduler}:") and jid != job_id)
        done_at = events.index(("completed", job_id))
        assert made_at < done_at, (job_id, events)


def test_a_worker_of_a_queue_with_schedulers_loads_the_cron_library_at_its_start(redis_url, prefix, qname):
    def croniter_loaded(with_scheduler):
        code = (
            "import sys\n"
            "from echomq_gevent import Queue, Worker\n"
            f"q = Queue({qname!r}, connection={redis_url!r}, prefix={prefix!r})\n"
            + ("q.upsert_job_scheduler('c', {'every': 3_600_000}, {'name': 'c'})\n" if with_scheduler
               else "q.obliterate(force=True)\n")
            + "assert 'croniter' not in sys.modules\n"
            f"w = Worker({qname!r}, lambda j: 1, connection={redis_url!r}, prefix={prefix!r}, drain_delay=0.2)\n"
            "w.start()\n"
            "import gevent\n"
            "while not w._ctx.set_up: gevent.sleep(0.01)\n"
            "w.close(timeout=5)\n"
            "print('croniter' in sys.modules)\n"
        )
        return run_python(code).strip()

    assert croniter_loaded(False) == "False"  # nothing of cron for a queue without schedulers
    assert croniter_loaded(True) == "True"


def test_a_burst_of_jobs_is_taken_without_empty_pickups(r, queue, redis_url):
    queue.pause()
    for i in range(40):
        queue.add("d", {"i": i})
    done = []
    worker = Worker(queue.name, lambda job: done.append(job.id), connection=redis_url, prefix=queue.prefix,
                    concurrency=50, drain_delay=5)
    worker.start()
    try:
        _wait(lambda: marker_wait_blocked(worker, r))
        before = r.info("commandstats").get("cmdstat_rpoplpush", {}).get("calls", 0)
        queue.resume()  # 40 jobs ready at once
        _wait(lambda: r.zcard(queue.keys.completed) == 40)
        pops = r.info("commandstats").get("cmdstat_rpoplpush", {}).get("calls", 0) - before
    finally:
        worker.close(timeout=5)
    # every fetch, a pick-up's or a finish's, pops wait once: 40 that took a job, and at
    # most one per finish; pick-ups that come back empty to find the end of the burst
    # (10 more with the doubling ramp of 1 + 2 + 4 + ... it replaces) are not made
    assert pops <= 40 + 40 + 2, pops


def test_a_burst_of_jobs_is_taken_in_one_call_for_all_the_free_slots(r, queue, redis_url, monkeypatch):
    from echomq_gevent.protocol.scripts import Scripts

    calls = []
    real = Scripts.call

    def counting(self, name, keys, args, *a, **kw):
        res = real(self, name, keys, args, *a, **kw)
        if name.startswith("moveToActive"):
            calls.append((name, len(res) if name == "moveToActiveMany-11" else 1))
        return res

    monkeypatch.setattr(Scripts, "call", counting)
    queue.pause()
    for i in range(40):
        queue.add("d", {"i": i})
    worker = Worker(queue.name, lambda job: gevent.sleep(0.5), connection=redis_url, prefix=queue.prefix,
                    concurrency=50, drain_delay=5)
    worker.start()
    try:
        _wait(lambda: marker_wait_blocked(worker, r))
        del calls[:]  # the fetch at the start found the queue paused
        queue.resume()  # 40 jobs ready at once
        _wait(lambda: len(worker.active_jobs) == 40)
        taken = list(calls)
    finally:
        worker.close(timeout=5)
    # one moveToActiveMany took them all: 40 moveToActive calls in a few round trips before
    # (a pick-up written behind the marker wait, when there is one, takes the first)
    assert taken in ([("moveToActiveMany-11", 40)], [("moveToActiveMany-11", 39)]), taken
