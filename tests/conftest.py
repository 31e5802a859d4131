"""Shared fixtures: a private Redis for the session, a fresh queue name per test,
and the Node bullmq helper for interop tests."""
from __future__ import annotations

import itertools
import os
import sys
import uuid

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
