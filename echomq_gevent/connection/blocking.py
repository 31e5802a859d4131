"""How this process waits on Redis: greenlet or native thread, and for how long.

* :func:`sockets_patched`: whether ``socket`` is monkey-patched, so a blocking call
  (``BZPOPMIN``, ``XREAD BLOCK``) yields to the hub; when it is not, callers run it in a
  pool thread so an unpatched process (a test, a script) keeps its hub free.
* :func:`start_native_thread`, :func:`native_lock`: the *original* ``_thread`` functions,
  which stay OS-level after ``patch_all()`` (the lock renewal thread, the hub watchdog).
* :data:`MAX_BLOCK_S`, :data:`MIN_BLOCK_S`: the bounds of one ``BZPOPMIN``.
"""
from __future__ import annotations

from typing import Any, Callable

import gevent.monkey

__all__ = ["sockets_patched", "start_native_thread", "native_lock", "MAX_BLOCK_S", "MIN_BLOCK_S"]

#: Longest single BZPOPMIN; the loop re-issues it (as BullMQ caps its block at 10 s).
MAX_BLOCK_S = 10.0
#: Shortest BZPOPMIN timeout. Redis before 7.0.8 (the 6.2 of the embedded default among
#: them) turns the seconds into whole milliseconds by truncation, and ``0.001`` can come
#: out as 0 ms, which means "block forever": a worker waiting 1 ms for a delayed job then
#: slept until its wait's own limit. 2 ms never truncates to 0.
MIN_BLOCK_S = 0.002


def start_native_thread(fn: Callable[[], None]) -> int:
    """Start ``fn`` on a real OS thread, even after ``gevent.monkey.patch_all()``."""
    start = gevent.monkey.get_original("_thread", "start_new_thread")
    return start(fn, ())


def native_lock() -> Any:
    """An OS-level lock (``_thread.allocate_lock``), safe between native threads."""
    return gevent.monkey.get_original("_thread", "allocate_lock")()


def sockets_patched() -> bool:
    """True when ``socket`` is monkey-patched, i.e. Redis I/O yields to the hub."""
    return bool(gevent.monkey.is_module_patched("socket"))
