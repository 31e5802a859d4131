"""Test your jobs: plain functions, and a pytest plugin with fixtures.

Plain functions (no pytest needed)::

    from echomq_gevent.testing import drain, enqueued, assert_enqueued

    queue.add("welcome", {"user": 7})
    result = drain(queue, {"welcome": send_welcome})    # real workers, this process
    assert result.values == [{"sent": True}]

The pytest plugin is opt-in: ``pytest_plugins = ["echomq_gevent.testing"]`` in the
project's ``conftest.py`` (or ``pytest -p echomq_gevent.testing``). Its fixtures:

* ``echomq_redis_url``: a Redis for the whole run, ``$REDIS_URL`` or a throwaway
  ``redis-server`` this plugin starts (one per process: with ``pytest-xdist`` each
  worker process has its own);
* ``echomq_prefix``: a key prefix of the test's own (its keys are removed after it),
  so tests run side by side on one Redis without flushing it;
* ``echomq_queue``: ``echomq_queue("emails")`` makes a ``Queue`` on that Redis and
  prefix, closed after the test.

Nothing here needs ``gevent.monkey.patch_all()``, and a test process that did patch
works the same. There is no eager mode: ``drain`` runs the real scripts on a real
Redis, so a job's options, retries, flows and failures behave as in production.
"""
from __future__ import annotations

import sys
from typing import Any, Callable, Iterator, List, Optional, Sequence

from .host.testkit import DrainResult, DrainTimeout, JobOutcome, assert_enqueued, enqueued
from .host.testkit import drain as _drain
from .host.testkit.server import delete_prefix, new_prefix

__all__ = ["drain", "DrainResult", "DrainTimeout", "JobOutcome", "enqueued", "assert_enqueued", "new_prefix",
           "delete_prefix"]

def drain(queue: Any, processors: Any = None, *, config: Any = None, timeout: float = 10.0, delayed: str = "run",
          raise_errors: bool = False, plugins: Sequence[Any] = (), outbox: bool = True) -> DrainResult:
    """Run the jobs of ``queue`` (a Queue, or a list) with real workers in this process
    until none is left to run; return what happened (see
    :func:`echomq_gevent.host.testkit.drain.drain`). With ``outbox`` (the default), the
    rows waiting in the transactional outboxes this process registered (a Django, Flask
    or Pyramid app with its outbox on) are relayed first, through the calling greenlet's
    database connection: rows a test wrote in a transaction it has not committed (a
    Django ``TestCase``) are relayed too."""
    return _drain(queue, processors, config=config, timeout=timeout, delayed=delayed, raise_errors=raise_errors,
                  plugins=plugins, before_poll=_outbox_relay() if outbox else None)


def _outbox_relay() -> Optional[Callable[[], int]]:
    """The registered outboxes' relaying call, or None (an app with an outbox has
    imported the registry; nothing is imported here otherwise)."""
    registry = sys.modules.get("echomq_gevent.contrib.outbox.registry")
    return registry.relay_waiting() if registry is not None else None


try:
    import pytest
except ImportError:  # pragma: no cover - the functions above work without pytest
    pytest = None  # type: ignore[assignment]

if pytest is not None:

    @pytest.fixture(scope="session")
    def echomq_redis_url(tmp_path_factory: Any) -> Iterator[str]:
        """The URL of a Redis for this test run (``$REDIS_URL``, else a throwaway server)."""
        from .host.testkit.server import start_test_redis

        url, server = start_test_redis(str(tmp_path_factory.mktemp("echomq-redis")))
        try:
            yield url
        finally:
            if server is not None:
                server.stop()

    @pytest.fixture
    def echomq_prefix(echomq_redis_url: str) -> Iterator[str]:
        """A key prefix of this test's own; its keys are removed after the test."""
        from .host.testkit.server import delete_prefix, new_prefix

        prefix = new_prefix()
        try:
            yield prefix
        finally:
            delete_prefix(echomq_redis_url, prefix)

    @pytest.fixture
    def echomq_queue(echomq_redis_url: str, echomq_prefix: str) -> Iterator[Callable[..., Any]]:
        """``echomq_queue(name, **kwargs)``: a ``Queue`` on the test's Redis and prefix
        (closed after the test; ``kwargs`` go to ``Queue``)."""
        from .queue.queue import Queue

        made: List[Any] = []

        def make(name: str, **kwargs: Any) -> Any:
            kwargs.setdefault("connection", echomq_redis_url)
            kwargs.setdefault("prefix", echomq_prefix)
            queue = Queue(name, **kwargs)
            made.append(queue)
            return queue

        try:
            yield make
        finally:
            for queue in made:
                queue.close()
