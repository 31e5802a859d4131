"""The ``echomq_job_context`` hook on real Redis: the processor runs inside every
context a plugin returns, entered in order and exited in reverse on the job's greenlet;
a context that fails on the way out fails the attempt and no result is written."""
from __future__ import annotations

import contextlib

import gevent

from echomq_gevent import Worker
from echomq_gevent.plugins.hookspecs import hookimpl

from integration.worker_helpers import host_with, running


class Context:
    def __init__(self, name, log, fail_exit_for=()):
        self.__name__ = f"test-context-{name}"
        self.name = name
        self.log = log
        self.fail_exit_for = fail_exit_for

    @hookimpl
    def echomq_job_context(self, worker, job):
        @contextlib.contextmanager
        def scope():
            self.log.append((f"enter {self.name}", job.id, id(gevent.getcurrent())))
            try:
                yield
            except Exception as exc:
                self.log.append((f"saw {type(exc).__name__} {self.name}", job.id, id(gevent.getcurrent())))
                raise
            finally:
                self.log.append((f"exit {self.name}", job.id, id(gevent.getcurrent())))
            if job.name in self.fail_exit_for:
                raise RuntimeError(f"commit failed in {self.name}")
        return scope()


def test_contexts_wrap_the_processor_in_order_and_a_failing_exit_fails_the_job(
        queue, redis_url, prefix, qname, wait_for):
    log = []

    def processor(job):
        log.append(("processor", job.id, id(gevent.getcurrent())))
        if job.name == "raises":
            raise ValueError("processor failed")
        return {"ok": job.name}

    # registered later, called first (pluggy's order): "outer" is entered first
    host = host_with(Context("inner", log, fail_exit_for=("commit-fails",)), Context("outer", log))
    ok = queue.add("fine", {})
    bad = queue.add("commit-fails", {})
    raised = queue.add("raises", {})
    worker = Worker(qname, processor, connection=redis_url, prefix=prefix, plugins=host, concurrency=1,
                    drain_delay=0.5)
    with running(worker):
        wait_for(lambda: queue.get_job_counts("completed", "failed") == {"completed": 1, "failed": 2},
                 what="one job completed and two failed")

    def steps(job_id):
        return [step for step, jid, _g in log if jid == job_id]

    assert steps(ok.id) == ["enter outer", "enter inner", "processor", "exit inner", "exit outer"]
    assert steps(raised.id) == ["enter outer", "enter inner", "processor", "saw ValueError inner",
                                "exit inner", "saw ValueError outer", "exit outer"]
    assert steps(bad.id) == ["enter outer", "enter inner", "processor", "exit inner",
                             "saw RuntimeError outer", "exit outer"]
    for job_id in (ok.id, bad.id, raised.id):  # all on the job's own greenlet
        assert len({g for _s, jid, g in log if jid == job_id}) == 1
    assert queue.get_job(ok.id).returnvalue == {"ok": "fine"}
    failed = queue.get_job(bad.id)
    assert failed.failed_reason == "commit failed in inner" and failed.returnvalue is None
    assert queue.get_job(raised.id).failed_reason == "processor failed"
