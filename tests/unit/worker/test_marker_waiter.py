"""The marker wait's errors reach the fetch loop, and only the fetch loop."""
from __future__ import annotations

from typing import Any, List

import gevent
import gevent.event
import pytest
import redis

from echomq_gevent.worker.marker import MarkerWaiter


class _Down:
    """A client whose BZPOPMIN fails as against a Redis that went away."""

    def bzpopmin(self, key: str, timeout: float) -> Any:
        raise redis.ConnectionError("Connection closed by server (marker waiter test).")


@pytest.mark.parametrize("use_thread", [False, True], ids=["greenlet", "thread"])
def test_a_failed_wait_is_raised_to_the_fetch_loop_and_not_reported_as_a_crashed_greenlet(
        monkeypatch, use_thread):
    hub = gevent.get_hub()
    reported: List[Any] = []
    monkeypatch.setattr(hub, "handle_error", lambda *args: reported.append(args))
    waiter = MarkerWaiter(_Down(), "bull:q:marker", use_thread=use_thread)
    for _ in range(2):  # the next wait starts afresh
        with pytest.raises(redis.ConnectionError, match="closed by server"):
            waiter.wait(0.5, gevent.event.Event())
    gevent.sleep(0)
    # gevent would print each one with a traceback. (Only this test's errors count: a
    # greenlet left over from another test may fail meanwhile and reach the same hub.)
    ours = [args for args in reported if len(args) > 2 and "marker waiter test" in str(args[2])]
    assert ours == []
