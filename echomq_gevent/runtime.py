"""How a worker runs things: the choice between greenlets and native threads, made once.

Two questions have a greenlet answer and a thread answer, and the worker picks one
per question when it starts, never ``if gevent`` in its body:

* **where a processor runs** (:func:`make_runtime`): :class:`GreenletRuntime` calls it
  on the job's greenlet (cooperative code, the default); :class:`ThreadRuntime`
  (``offload="thread"``) runs it in a gevent native thread pool, so blocking C calls
  and CPU-heavy code leave the hub free.
* **where the idle worker blocks on the marker** (:class:`~.marker_wait.MarkerWaiter`,
  in its own module): when the process is monkey-patched, ``BZPOPMIN`` runs on a
  greenlet (its socket yields to the hub); when it is not, it runs in a pool thread, so
  an unpatched process (a test, a script) still keeps its hub free while idle
  (:func:`sockets_patched` tells which).

Also the native-thread primitives the lock renewal thread and the hub watchdog use:
the *original* ``_thread`` functions, which stay OS-level after ``patch_all()``.
"""
from __future__ import annotations

from typing import Any, Callable, Optional

import gevent
import gevent.monkey

from .errors import EchoMQError

__all__ = [
    "JobTimeoutError", "GreenletRuntime", "ThreadRuntime", "make_runtime", "sockets_patched",
    "start_native_thread", "native_lock", "MAX_BLOCK_S", "MIN_BLOCK_S",
]

#: Longest single BZPOPMIN; the loop re-issues it (as BullMQ caps its block at 10 s).
MAX_BLOCK_S = 10.0
#: Shortest BZPOPMIN timeout. Redis before 7.0.8 (the 6.2 of the embedded default among
#: them) turns the seconds into whole milliseconds by truncation, and ``0.001`` can come
#: out as 0 ms, which means "block forever": a worker waiting 1 ms for a delayed job then
#: slept until its wait's own limit. 2 ms never truncates to 0.
MIN_BLOCK_S = 0.002


class JobTimeoutError(EchoMQError):
    """A processor ran longer than the worker's ``job_timeout``; the attempt failed
    (retries apply)."""


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


class GreenletRuntime:
    """Runs the processor on the job's own greenlet.

    ``job_timeout`` is a ``gevent.Timeout``: it fires at the processor's next
    cooperative switch (I/O, ``gevent.sleep``); pure CPU work is not interrupted.
    """

    name = "greenlet"

    def call(self, fn: Callable[[Any], Any], job: Any, timeout_s: Optional[float]) -> Any:
        """Called on the job's greenlet; returns what ``fn(job)`` returns or raises what
        it raises; :class:`JobTimeoutError` after ``timeout_s`` seconds."""
        if timeout_s is None:
            return fn(job)
        timer = gevent.Timeout(timeout_s)
        timer.start()
        try:
            return fn(job)
        except gevent.Timeout as exc:
            if exc is not timer:
                raise
            raise JobTimeoutError(
                f"job {job.id} ({job.name!r}) ran longer than job_timeout ({int(timeout_s * 1000)} ms)"
            ) from None
        finally:
            timer.close()

    def close(self) -> None:
        pass


class ThreadRuntime:
    """Runs the processor in a gevent ``ThreadPool`` of ``size`` native threads.

    The job's greenlet waits for the thread without blocking the hub. On
    ``job_timeout`` the attempt fails at once but **the thread runs on** until the
    processor returns (Python threads cannot be stopped); its result is discarded.

    While the processor runs, ``job.scripts`` is a :class:`Scripts` with its own Redis
    client, made and closed on that thread, so ``job.update_progress``/``job.log`` from the
    thread never touch a socket of the hub's thread (a gevent socket belongs to the hub
    that made it). The client connects only if the processor uses it.
    """

    name = "thread"

    def __init__(self, size: int, scripts: Any = None) -> None:
        from gevent.threadpool import ThreadPool  # only a worker that offloads pays for it

        self.pool = ThreadPool(max(1, size))
        self.scripts = scripts

    def _in_thread(self, fn: Callable[[Any], Any], job: Any) -> Any:
        """On a pool thread: run ``fn(job)`` with a Redis client made (lazily) and closed on
        this thread. Closing it here matters: the pool destroys a thread's hub when the
        thread exits, and a socket outliving its hub crashes the interpreter later."""
        if self.scripts is None:
            return fn(job)
        from .connection import clone_client
        from .scripts import Scripts

        own = job.scripts
        client = clone_client(self.scripts.client, max_connections=4)
        job.scripts = Scripts(client, self.scripts.keys, self.scripts.lib)
        try:
            return fn(job)
        finally:
            job.scripts = own
            try:
                client.close()
            except Exception:  # pragma: no cover - best effort
                pass

    def call(self, fn: Callable[[Any], Any], job: Any, timeout_s: Optional[float]) -> Any:
        result = self.pool.spawn(self._in_thread, fn, job)
        result.wait(timeout_s)
        if not result.ready():
            raise JobTimeoutError(
                f"job {job.id} ({job.name!r}) ran longer than job_timeout ({int((timeout_s or 0) * 1000)} ms); "
                f"it was failed, but its thread runs on until the processor returns"
            )
        return result.get()

    def close(self) -> None:
        """Nothing is stopped: a thread may still run a timed-out or handed-back
        processor, and ``ThreadPool.kill`` would wait for it. Idle pool threads cost
        nothing and end with the process. (Killing them right before the process exits
        also raced gevent's per-thread hub teardown with interpreter shutdown.)"""


def make_runtime(offload: Optional[str], concurrency: int, scripts: Any = None) -> Any:
    """The processor runtime for the ``offload`` option (``None`` or ``"thread"``);
    ``scripts`` (the worker's) lets offloaded processors reach Redis through their job."""
    if offload == "thread":
        return ThreadRuntime(concurrency, scripts)
    if offload is None:
        return GreenletRuntime()
    raise ValueError(f"offload must be 'thread' or None, got {offload!r}")
