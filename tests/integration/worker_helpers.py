"""Helpers of the Worker tests (``test_worker*.py``): a worker with short test timings,
a context that runs it on a greenlet, and a telemetry recorder."""
from __future__ import annotations

from contextlib import contextmanager
from typing import Any, List

from echomq_gevent import Worker
from echomq_gevent.plugins.hookspecs import hookimpl
from echomq_gevent.plugins.host import PluginHost, make_plugin_manager


@contextmanager
def running(worker: Worker):
    worker.start()
    try:
        yield worker
    finally:
        worker.close(timeout=5)


class Recorder:
    """A telemetry plugin that records every lifecycle hook."""

    def __init__(self) -> None:
        self.calls: List[tuple] = []

    def names(self, hook: str) -> List[str]:
        return [c[1] for c in self.calls if c[0] == hook]

    @hookimpl
    def echomq_job_active(self, worker, job):
        self.calls.append(("active", job.id))

    @hookimpl
    def echomq_job_completed(self, worker, job, result, duration_ms):
        self.calls.append(("completed", job.id, result))

    @hookimpl
    def echomq_job_failed(self, worker, job, error):
        self.calls.append(("failed", job.id, str(error)))

    @hookimpl
    def echomq_job_retried(self, worker, job, error, delay_ms):
        self.calls.append(("retried", job.id, delay_ms))

    @hookimpl
    def echomq_job_stalled(self, worker, queue, job_id):
        self.calls.append(("stalled", job_id))

    @hookimpl
    def echomq_job_lock_lost(self, worker, job):
        self.calls.append(("lock_lost", job.id))

    @hookimpl
    def echomq_job_handed_back(self, worker, job):
        self.calls.append(("handed_back", job.id))

    @hookimpl
    def echomq_worker_started(self, worker):
        self.calls.append(("started", None))

    @hookimpl
    def echomq_worker_stopping(self, worker, reason):
        self.calls.append(("stopping", reason))


def sleeper_until_cancelled(seconds: float = 60):
    """A processor that sleeps until it is cancelled: ``(processor, started, stopped)``,
    ``started`` a gevent Event set when it runs, ``stopped`` the ``(reason, time.time())``
    of each ``JobCancelled`` it met (and re-raised)."""
    import time

    import gevent
    import gevent.event

    from echomq_gevent.errors import JobCancelled

    started, stopped = gevent.event.Event(), []

    def proc(job):
        started.set()
        try:
            gevent.sleep(seconds)
        except JobCancelled as exc:
            stopped.append((exc.reason, time.time()))
            raise

    return proc, started, stopped


def host_with(*plugins: Any) -> PluginHost:
    return PluginHost(make_plugin_manager(list(plugins)))


def make_worker(redis_url, prefix, qname, processor=None, **opts) -> Worker:
    opts.setdefault("drain_delay", 0.5)
    opts.setdefault("lock_duration", 2000)
    opts.setdefault("stalled_interval", 2000)
    return Worker(qname, processor, connection=redis_url, prefix=prefix, **opts)


def marker_wait_blocked(worker: Worker, r: Any) -> bool:
    """Whether ``worker``'s blocking connection is blocked in its marker wait (BZPOPMIN),
    as Redis reports it (CLIENT LIST flag ``b``)."""
    name = worker._fetch.blocking_client_name()
    return any(c.get("name") == name and "b" in c.get("flags", "") for c in r.client_list())


class EchoProcessors:
    """A plugin that registers a ``job`` processor for one queue, returning "ok" and
    recording the ids it ran in ``seen`` (the Runner tests on a YAML file)."""

    __name__ = "echo-processors"

    def __init__(self, queue: str) -> None:
        self.queue = queue
        self.seen: List[str] = []

    @hookimpl
    def echomq_register_processors(self, registry: Any) -> None:
        registry.add(self.queue, "job", lambda job: self.seen.append(job.id) or "ok")


@contextmanager
def runner_ran_ten_jobs(cfg: Any, qname: str, wait_for: Any):
    """Start a Runner of ``cfg`` with an :class:`EchoProcessors` plugin for ``qname``, add
    ten jobs and wait until its worker ran them all; yields ``(runner, queue)`` and drains
    the runner and closes the queue afterwards."""
    from echomq_gevent import Queue
    from echomq_gevent.host.runner import Runner

    echo = EchoProcessors(qname)
    runner = Runner(cfg, cfg.redis.url, extra_plugins=(echo,))
    runner.start()
    queue = Queue(qname, connection=cfg.redis.url, prefix=cfg.prefix)
    try:
        ids = [queue.add("job", {}).id for _ in range(10)]
        wait_for(lambda: sorted(echo.seen) == sorted(ids), timeout=30, what="the runner's worker to run 10 jobs")
        yield runner, queue
    finally:
        runner.drain(10)
        queue.close()
