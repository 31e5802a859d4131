"""A supervised child's own rules in this process, with a real Runner and Redis: the
``getppid()`` check (the fallback where ``PR_SET_PDEATHSIG`` does not exist) drains the
workers once the parent is gone, and the jobs in flight still finish; the reports go to
the parent's pipe as JSON lines."""
from __future__ import annotations

import json
import os
import signal

import gevent
import gevent.event

from echomq_gevent.host.config import parse_config
from echomq_gevent.host.runner import Runner
from echomq_gevent.host.supervised import SupervisedChild
from echomq_gevent.plugins.hookspecs import hookimpl


class Hold:
    def __init__(self, queue):
        self.__name__ = "test-supervised-hold"
        self.queue = queue
        self.release = gevent.event.Event()
        self.started = gevent.event.Event()

    def hold(self, job):
        self.started.set()
        self.release.wait()
        return "released"

    @hookimpl
    def echomq_register_processors(self, registry):
        registry.add(self.queue, "hold", self.hold)


def test_a_child_whose_parent_is_gone_drains_and_reports(redis_url, prefix, qname, queue, wait_for):
    cfg = parse_config(f"""
redis: {{url: "{redis_url}"}}
prefix: {prefix}
entry_points: false
queues:
  {qname}: {{concurrency: 2, drain_delay: 0.5, shutdown_timeout: 10}}
""")
    read_fd, write_fd = os.pipe()
    # a parent pid that is not ours: as after the real parent died and this process was re-parented
    child = SupervisedChild(1, fd=write_fd, parent_pid=os.getppid() + 1)
    os.set_blocking(write_fd, False)
    hold = Hold(qname)
    runner = Runner(cfg, redis_url, extra_plugins=(hold, child))
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}  # stop() ignores them
    try:
        queue.add("hold", {})
        runner.start()
        child.start(runner, death_signal=False)
        assert hold.started.wait(20)
        wait_for(lambda: runner.stopping, timeout=10, what="the drain after the parent is gone")
        assert child.parent_gone and runner.in_flight() == 1  # the job in hand is not dropped
        hold.release.set()
        assert runner.wait(20)
        child.stop()
        assert child.done == 1 and child.exit_code() is None
        reports = [json.loads(line) for line in os.read(read_fd, 65536).decode().splitlines()]
        assert [r["event"] for r in reports][0] == "ready" and reports[-1]["event"] == "stopped"
        assert reports[0]["queues"] == [qname] and reports[-1]["jobs"] == 1
        assert all(r["pid"] == os.getpid() and r["index"] == 1 for r in reports)
    finally:
        for signum, handler in saved.items():
            signal.signal(signum, handler)
        hold.release.set()
        runner.hand_back(5)
        os.close(read_fd)
        os.close(write_fd)
