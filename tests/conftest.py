"""Shared fixtures: a private Redis for the session, a fresh queue name per test,
and the Node bullmq helper for interop tests."""
from __future__ import annotations

import itertools
import os
import sys
import time
import uuid
from typing import Any, Callable, Dict, List, Optional

import gevent
import pytest
import redis

sys.path.insert(0, os.path.dirname(__file__))

from redis_server import RedisServer  # noqa: E402

_counter = itertools.count()


@pytest.fixture(scope="session")
def redis_url():
    """URL of a Redis that belongs to this test session."""
    url = os.environ.get("REDIS_URL")
    if url:
        yield url
        return
    server = RedisServer().start()
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture
def r(redis_url):
    """A decoding client to the session's Redis."""
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    yield client
    client.close()


@pytest.fixture
def prefix():
    """A key prefix no other test uses, so tests never see each other's keys."""
    return f"t{os.getpid()}x{next(_counter)}"


@pytest.fixture
def qname():
    return "q" + uuid.uuid4().hex[:8]


@pytest.fixture
def queue(redis_url, prefix, qname):
    """An ``echomq_gevent.Queue`` on the test's own queue name and prefix."""
    from echomq_gevent import Queue

    q = Queue(qname, connection=redis_url, prefix=prefix)
    yield q
    q.close()


@pytest.fixture(autouse=True)
def _clean_prefix(request, redis_url):
    """Delete the test's keys afterwards (only its own prefix)."""
    # Resolve the prefix before the test runs: at teardown it may already be torn down.
    p = request.getfixturevalue("prefix") if "prefix" in request.fixturenames else None
    yield
    if p is None:
        return
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        keys = list(client.scan_iter(match=f"{p}:*", count=1000))
        for i in range(0, len(keys), 500):
            client.delete(*keys[i:i + 500])
    finally:
        client.close()


# --- helpers every test folder uses (as fixtures: ``def test_x(wait_for): ...``) -----------------
def wait_until(predicate: Callable[[], Any], timeout: float = 10.0, what: str = "condition",
               interval: float = 0.02, details: Optional[Callable[[], str]] = None,
               give_up: Optional[Callable[[], Optional[str]]] = None) -> Any:
    """Poll ``predicate`` (yielding to the gevent hub between polls) until it returns
    something truthy, and return that. Fails after ``timeout`` s naming ``what`` (and
    ``details()``, e.g. a process' output); fails at once when ``give_up()`` says why."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        reason = give_up() if give_up is not None else None
        if reason:
            raise AssertionError(f"gave up waiting for {what}: {reason}" + (f"\n{details()}" if details else ""))
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}" +
                                 (f"\n{details()}" if details else ""))
        gevent.sleep(interval)


def stream_events(r: "redis.Redis", key: str) -> List[Dict[str, str]]:
    """The entries of an events stream (``<prefix>:<queue>:events``), oldest first."""
    return [fields for _id, fields in r.xrange(key)]


@pytest.fixture
def wait_for():
    """:func:`wait_until` as a fixture."""
    return wait_until


@pytest.fixture
def events(r, prefix, qname):
    """``events()``: the test queue's events stream entries, oldest first."""
    return lambda: stream_events(r, f"{prefix}:{qname}:events")
