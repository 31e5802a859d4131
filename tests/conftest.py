"""Shared fixtures: a private Redis for the session, a Redis Cluster per module that asks for
one, a Sentinel group per test that asks for one, a fresh queue name per test, and the helpers every test folder uses."""
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

from redis_server import ClusterGroup, RedisServer, SentinelGroup  # noqa: E402
from waiting import wait_until  # noqa: E402,F401 (the wait_for fixture; importable from waiting)

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


@pytest.fixture(scope="module")
def cluster():
    """A Redis Cluster of three primaries with a replica each (``redis_server.ClusterGroup``)
    shared by the tests of one module; a test that changes its layout (a failover, a
    migration) starts its own."""
    with ClusterGroup() as group:
        yield group


@pytest.fixture
def sentinels():
    """A primary, a replica and three sentinels of the test's own (``redis_server.SentinelGroup``):
    each test that asks gets a fresh group, since its test kills the primary."""
    g = SentinelGroup().start()
    try:
        yield g
    finally:
        g.stop()


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
def _clean_prefix(request):
    """Delete the keys of a test that uses ``prefix`` afterwards (only its own prefix).
    A test without ``prefix`` (every unit test) never starts or touches a Redis."""
    if "prefix" not in request.fixturenames:
        yield
        return
    # Resolve both before the test runs: at teardown they may already be torn down.
    p = request.getfixturevalue("prefix")
    redis_url = request.getfixturevalue("redis_url")
    yield
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        keys = list(client.scan_iter(match=f"{p}:*", count=1000))
        for i in range(0, len(keys), 500):
            client.delete(*keys[i:i + 500])
    finally:
        client.close()


# --- helpers every test folder uses (as fixtures: ``def test_x(wait_for): ...``) -----------------
class StreamEvents:
    """Reads a queue's events stream (``<prefix>:<queue>:events``): ``events()`` for the
    test's own queue, ``events(of)`` for a ``Queue`` or ``QueueKeys``; entries as field
    dicts, oldest first. ``events.names(of=None)``: just the event names."""

    def __init__(self, r: "redis.Redis", prefix: str, qname: str) -> None:
        self.r = r
        self.own = f"{prefix}:{qname}:events"

    def key(self, of: Any = None) -> str:
        if of is None:
            return self.own
        keys = getattr(of, "keys", of)  # a Queue has .keys (QueueKeys), which has .events
        return keys.events

    def __call__(self, of: Any = None) -> List[Dict[str, str]]:
        return [fields for _id, fields in self.r.xrange(self.key(of))]

    def names(self, of: Any = None) -> List[str]:
        return [e["event"] for e in self(of)]


@pytest.fixture
def wait_for():
    """:func:`wait_until` as a fixture."""
    return wait_until


@pytest.fixture
def events(r, prefix, qname) -> StreamEvents:
    """The events streams of the test's queues (see :class:`StreamEvents`)."""
    return StreamEvents(r, prefix, qname)
