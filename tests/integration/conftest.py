"""Fixtures of the integration tests (a real Redis): the test queue's keys and scripts."""
from __future__ import annotations

import pytest
import redis

from echomq_gevent.protocol.keys import QueueKeys
from echomq_gevent.protocol.scripts import Scripts


@pytest.fixture
def keys(qname: str, prefix: str) -> QueueKeys:
    """The key names of the test's own queue."""
    return QueueKeys(qname, prefix)


@pytest.fixture
def scripts(r: "redis.Redis", keys: QueueKeys) -> Scripts:
    """The scripts of the test's own queue, on the decoding client ``r``."""
    return Scripts(r, keys)
