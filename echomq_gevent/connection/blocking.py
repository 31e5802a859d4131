"""How this process waits on Redis: greenlet or native thread, and for how long.

* :func:`sockets_patched`: whether ``socket`` is monkey-patched, so a blocking call
  (``BZPOPMIN``, ``XREAD BLOCK``) yields to the hub; when it is not, callers run it in a
  pool thread so an unpatched process (a test, a script) keeps its hub free.
* :func:`start_native_thread`, :func:`native_lock`: the *original* ``_thread`` functions,
  which stay OS-level after ``patch_all()`` (the lock renewal thread, the hub watchdog).
  The interpreter does not wait for such threads at exit; this module does, briefly
  (:func:`wait_native_threads`, at exit): a thread told to stop (a worker's close) ends
  its tick or its Redis call before the interpreter is taken down around it.
* :data:`MAX_BLOCK_S`, :data:`MIN_BLOCK_S`: the bounds of one ``BZPOPMIN``.
"""
from __future__ import annotations

import atexit
import os
import time
from typing import Any, Callable, Optional

import gevent.monkey

__all__ = ["sockets_patched", "start_native_thread", "native_lock", "wait_native_threads", "MAX_BLOCK_S",
           "MIN_BLOCK_S", "EXIT_WAIT_S"]

#: Longest single BZPOPMIN; the loop re-issues it (as BullMQ caps its block at 10 s).
MAX_BLOCK_S = 10.0
#: Shortest BZPOPMIN timeout. Redis before 7.0.8 (the 6.2 of the embedded default among
#: them) turns the seconds into whole milliseconds by truncation, and ``0.001`` can come
#: out as 0 ms, which means "block forever": a worker waiting 1 ms for a delayed job then
#: slept until its wait's own limit. 2 ms never truncates to 0.
MIN_BLOCK_S = 0.002


#: The longest the process waits at exit for its native threads to end (a stopped lock
#: renewal or cancellation thread ends within a tick, 0.2 s at most when idle; a thread still
#: in use when the process exits costs this much exit time, no more).
EXIT_WAIT_S = 1.0

_live = 0
_live_lock: Optional[Any] = None
_at_exit = False


def _count(step: int) -> None:
    global _live, _live_lock
    if _live_lock is None:
        _live_lock = native_lock()
    with _live_lock:
        _live += step


def _forked() -> None:
    """In a forked child the parent's threads do not exist."""
    global _live, _live_lock
    _live, _live_lock = 0, None


def start_native_thread(fn: Callable[[], None]) -> int:
    """Start ``fn`` on a real OS thread, even after ``gevent.monkey.patch_all()``. The
    process waits for it at exit up to :data:`EXIT_WAIT_S` (:func:`wait_native_threads`)."""
    global _at_exit
    start = gevent.monkey.get_original("_thread", "start_new_thread")
    if not _at_exit:
        _at_exit = True
        atexit.register(wait_native_threads)
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=_forked)

    def run() -> None:
        try:
            fn()
        finally:
            _count(-1)

    _count(1)
    try:
        return start(run, ())
    except BaseException:
        _count(-1)
        raise


def wait_native_threads(timeout: float = EXIT_WAIT_S) -> int:
    """Wait until the native threads this module started have ended, at most ``timeout``
    seconds; returns how many still run. Called at exit: a thread taken down with the
    interpreter while it runs Python (a lock renewal's Redis call) can crash the process
    on its way out."""
    sleep = gevent.monkey.get_original("time", "sleep")
    deadline = time.monotonic() + max(0.0, timeout)
    while _live > 0 and time.monotonic() < deadline:
        sleep(0.005)
    return _live


def native_lock() -> Any:
    """An OS-level lock (``_thread.allocate_lock``), safe between native threads."""
    return gevent.monkey.get_original("_thread", "allocate_lock")()


def sockets_patched() -> bool:
    """True when ``socket`` is monkey-patched, i.e. Redis I/O yields to the hub."""
    return bool(gevent.monkey.is_module_patched("socket"))
