"""Unit tests run without Redis: asking for one here is a mistake (move the test to
``tests/integration/``)."""
from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def redis_url():
    pytest.fail("a unit test asked for Redis; unit tests run without one (put it in tests/integration/)")
