"""Where a processor runs: on the job's greenlet, or in a native thread pool, chosen once.

:func:`make_runtime` picks for the ``offload`` option: :class:`GreenletRuntime` calls the
processor on the job's greenlet (cooperative code, the default); :class:`ThreadRuntime`
(``offload="thread"``) runs it in a gevent native thread pool, so blocking C calls and
CPU-heavy code leave the hub free; :class:`~echomq_gevent.worker.offload.ProcessRuntime`
(``offload="process"``) runs it in a pool of child processes, so CPU-bound code uses
more than one core and can be stopped. The worker never asks ``if gevent`` in its body.
(Where a blocking Redis call waits is :mod:`echomq_gevent.connection.blocking`.)
"""
from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

import gevent

from ..errors import JobTimeoutError  # defined with the other errors; its public home is here

__all__ = ["JobTimeoutError", "GreenletRuntime", "ThreadRuntime", "make_runtime"]


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
        from ..connection.clients import clone_client
        from ..protocol.scripts import Scripts

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


def make_runtime(offload: Optional[str], concurrency: int, scripts: Any = None, processes: Optional[int] = None,
                 specs: Sequence[str] = (), label: str = "worker") -> Any:
    """The processor runtime for the ``offload`` option (``None``, ``"thread"`` or
    ``"process"``); ``scripts`` (the worker's) lets thread-offloaded processors reach Redis
    through their job. For ``"process"``: ``processes`` children (default
    ``concurrency``), started here, each importing ``specs`` (the processors known at
    start); raises ConfigError naming one that a child cannot import."""
    if offload == "thread":
        return ThreadRuntime(concurrency, scripts)
    if offload == "process":
        from .offload import ProcessRuntime

        runtime = ProcessRuntime(processes or concurrency, specs, label)
        runtime.start()
        return runtime
    if offload is None:
        return GreenletRuntime()
    raise ValueError(f"offload must be 'thread', 'process' or None, got {offload!r}")
