"""Waiting on a positive signal, for every test folder (and tools such as
``tests/browser/screenshots.py``): poll a condition, yielding to the gevent hub."""
from __future__ import annotations

import time
from typing import Any, Callable, Optional

import gevent

__all__ = ["wait_until"]


def wait_until(predicate: Callable[[], Any], timeout: float = 20.0, what: str = "condition",
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
