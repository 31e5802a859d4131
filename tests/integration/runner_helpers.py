"""Helpers of the tests that run a config's workers with the Runner and count their
connections (``host/test_runner_connections.py``, ``host/test_runner_pools.py``)."""
from __future__ import annotations

import collections
from typing import Any, Callable, Iterable, List, Optional

from echomq_gevent.plugins.hookspecs import hookimpl
from echomq_gevent.worker.remote_cancel import SUBSCRIBER_NAME


class Counting:
    """A plugin that serves job name ``j`` on every queue of ``names`` and counts each
    job's runs (``runs[(queue, job id)]``); ``work`` runs first in each job."""

    def __init__(self, names: Iterable[str], work: Optional[Callable[[], Any]] = None) -> None:
        self.__name__ = "test-runner-counting"
        self.names = list(names)
        self.work = work
        self.runs: collections.Counter = collections.Counter()

    def run(self, job: Any) -> None:
        if self.work is not None:
            self.work()
        self.runs[(job.queue_name, job.id)] += 1

    @hookimpl
    def echomq_register_processors(self, registry: Any) -> None:
        for q in self.names:
            registry.add(q, "j", self.run)


def opened_since(r: Any, before: Iterable[int]) -> List[dict]:
    """The clients opened since ``before`` (ids), the test's own and the process's
    cancellation subscription excluded (that one is counted on its own: a test run just
    before on the same server may have left it to us)."""
    me = r.client_id()
    known = set(before)
    return [c for c in r.client_list()
            if int(c["id"]) not in known and int(c["id"]) != me and c.get("name") != SUBSCRIBER_NAME]


def echo(job: Any) -> Any:
    """A processor a test's YAML names (``integration.runner_helpers:echo``)."""
    return job.data


def pools_config(redis_url: str, prefix: str, body: str) -> Any:
    """A checked config on the test's Redis and prefix, without entry points, with short
    ``drain_delay`` and ``lock_duration`` defaults, and ``body`` (its ``queues:`` and
    ``pools:``, YAML at the top level) after them."""
    from echomq_gevent.host.config import parse_config

    return parse_config(f"""
redis: {{url: "{redis_url}"}}
prefix: {prefix}
entry_points: false
defaults: {{drain_delay: 2, lock_duration: 5000}}
{body}""")
