"""The Runner the command and the gunicorn integration share: one worker per queue of a
config with one plugin host, started on the hub, drained, handed back, and reporting each
worker's typed health."""
from __future__ import annotations

import gevent
import gevent.event
import pytest

from echomq_gevent.host.config import parse_config
from echomq_gevent.plugins.hookspecs import hookimpl
from echomq_gevent.host.runner import Runner
from echomq_gevent.worker.worker import WorkerHealth


class Processors:
    """A plugin serving ``fast`` and ``hold`` jobs of every queue; ``hold`` waits for
    :attr:`release`."""

    def __init__(self, queues):
        self.__name__ = "test-runner-processors"
        self.queues = queues
        self.release = gevent.event.Event()
        self.holding = 0

    def fast(self, job):
        return {"ok": job.data["i"]}

    def hold(self, job):
        self.holding += 1
        self.release.wait()
        return "released"

    @hookimpl
    def echomq_register_processors(self, registry):
        for q in self.queues:
            registry.add(q, "fast", self.fast)
            registry.add(q, "hold", self.hold)


@pytest.fixture
def two_queues(redis_url, prefix, qname):
    names = [qname + "a", qname + "b"]
    cfg = parse_config(f"""
redis: {{url: "{redis_url}"}}
prefix: {prefix}
entry_points: false
queues:
  {names[0]}: {{concurrency: 2, drain_delay: 0.5, shutdown_timeout: 5}}
  {names[1]}: {{concurrency: 3, drain_delay: 0.5, shutdown_timeout: 5}}
""")
    return cfg, names


def _queues(redis_url, prefix, names):
    from echomq_gevent import Queue

    return [Queue(n, connection=redis_url, prefix=prefix) for n in names]


def test_runs_every_queue_with_one_plugin_host_and_reports_health(two_queues, redis_url, prefix, wait_for):
    cfg, names = two_queues
    procs = Processors(names)
    runner = Runner(cfg, redis_url, extra_plugins=(procs,))
    assert runner.queue_names == names and runner.state == "built"
    assert runner.workers[0].plugins is runner.workers[1].plugins
    queues = _queues(redis_url, prefix, names)
    try:
        runner.start()
        assert runner.state == "running"
        jobs = [q.add("fast", {"i": i}) for q in queues for i in range(5)]
        wait_for(lambda: runner.counts().get("completed") == len(jobs), what="every job completed")
        health = runner.health()
        assert [h.queue for h in health] == names
        assert all(isinstance(h, WorkerHealth) for h in health)
        assert [h.concurrency for h in health] == [2, 3]
        wait_for(lambda: all(h.fetch_loop_alive and h.lock_renewal_alive for h in runner.health()),
                 what="fetch loops and lock renewal running")
        body = health[0].as_dict()
        assert body["running"] is True and body["closing"] is False and body["active"] == 0
    finally:
        runner.drain(0).join(10)
        for q in queues:
            q.close()
    assert runner.wait(10) and runner.state == "stopped"
    assert not any(h.running or h.fetch_loop_alive for h in runner.health())


def test_drain_lets_jobs_finish_and_hand_back_returns_the_rest(two_queues, redis_url, prefix, wait_for):
    cfg, names = two_queues
    procs = Processors(names)
    runner = Runner(cfg, redis_url, extra_plugins=(procs,))
    queues = _queues(redis_url, prefix, names)
    try:
        runner.start()
        held = [queues[0].add("hold", {}), queues[1].add("hold", {})]
        wait_for(lambda: runner.in_flight() == 2, what="both jobs running")
        closer = runner.drain(30)
        assert runner.state == "draining" and runner.stopping_event.is_set()
        wait_for(lambda: all(w.closing for w in runner.workers), what="the workers closing")
        late = queues[0].add("fast", {"i": 1})
        procs.release.set()
        closer.join(10)
        assert runner.state == "stopped"
        assert [q.get_job_state(j.id) for q, j in zip(queues, held)] == ["completed", "completed"]
        assert queues[0].get_job_state(late.id) == "waiting"  # nothing new was taken

        again = Runner(cfg, redis_url, extra_plugins=(Processors(names),))
        again.start()
        stuck = queues[1].add("hold", {})
        wait_for(lambda: again.in_flight() == 1, what="the job running")
        assert again.hand_back(limit=10) is True
        assert again.state == "stopped"
        assert queues[1].get_job_state(stuck.id) == "waiting"
        assert again.counts()["handed_back"] == 1
    finally:
        for q in queues:
            q.close()


def test_a_worker_that_fails_to_run_stops_the_others(two_queues, redis_url, wait_for):
    cfg, names = two_queues
    runner = Runner(cfg, redis_url, extra_plugins=(Processors(names),))
    broken = runner.workers[1]

    def refuse() -> None:
        raise ValueError("cannot run")
    broken._lifecycle.setup = refuse
    runner.start()
    assert runner.wait(15)
    assert runner.failed and runner.state == "stopped"
