"""Test a Django project's jobs and tasks: ``drain()`` runs the queues of
``settings.ECHOMQ`` as ``manage.py echomq_worker`` would (the apps' ``@processor``
functions, the tasks of ``settings.TASKS``, the per-job database scope) with real
workers in the test's process, after relaying the outbox's waiting rows::

    from django.test import TestCase, override_settings
    from echomq_gevent.contrib.django.testing import drain

    @override_settings(ECHOMQ={**settings.ECHOMQ, "redis": TEST_REDIS_URL, "prefix": "test"})
    class SignupTests(TestCase):
        def test_welcome(self):
            with self.captureOnCommitCallbacks(execute=True):
                self.client.post("/signup", {...})
            result = drain()
            self.assertEqual(result.values, [...])

In a process gevent has not patched (the test runner's usual case) the workers'
greenlets share the test thread's database connection, so the jobs read the rows of a
``TestCase`` that are not committed; the per-job database scope leaves a transaction
it did not open (the test's) alone.
"""
from __future__ import annotations

from typing import Any

__all__ = ["drain"]


def drain(*queues: str, timeout: float = 10.0, delayed: str = "run", raise_errors: bool = False,
          outbox: bool = True) -> Any:
    """Run the jobs of the named queues of ``settings.ECHOMQ`` (every queue when none is
    named) until none is left to run; returns the :class:`~echomq_gevent.testing.DrainResult`.
    Reads the settings afresh (``override_settings`` applies)."""
    from ...host.testkit.drain import drain as run
    from ..outbox.registry import RelayPlugin, relay_waiting
    from . import integration, reset, worker_plugins

    reset()
    state = integration()
    names = list(queues) or list(state.cfg.queues)
    cfg = state.select(names)
    # the outbox's rows are relayed by the drain, in the test's greenlet (its connection
    # and transaction), not by a relay of the workers' own
    plugins = [p for p in worker_plugins() if not isinstance(p, RelayPlugin)]
    return run([state.queue(n) for n in names], config=cfg, plugins=plugins, timeout=timeout,
               delayed=delayed, raise_errors=raise_errors, before_poll=relay_waiting() if outbox else None)
