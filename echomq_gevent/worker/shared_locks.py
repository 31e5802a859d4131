"""One lock-renewal thread and one connection for the workers of a pool.

Alone, each :class:`~echomq_gevent.worker.Worker` renews its jobs' locks from a native
thread with a connection of its own (:mod:`.locks`): a process serving ``Q`` queues holds
``Q`` renewal connections once their jobs ran. The workers of a pool
(:mod:`.pool.budget`) share a :class:`SharedLockRenewal` instead: one native thread, one
connection, and every tick one ``extendLocks`` call per queue that has jobs in flight (a
queue with none costs nothing). Each worker keeps its :class:`~.locks.LockRenewer` (its
table of jobs, its lock duration, its lost-lock callback on its hub); only the thread
and the connection are shared. The tick is the shortest renewal interval of the queues.

A lost lock is reported to its own worker, on the hub, as with a thread of its own.
"""
from __future__ import annotations

import logging
import time
from typing import Any, List, Optional

from ..connection.blocking import native_lock, start_native_thread
from ..connection.clients import clone_client, close_client

log = logging.getLogger("echomq_gevent.locks")

__all__ = ["SharedLockRenewal"]


class SharedLockRenewal:
    """The renewal thread and connection of a pool's workers (see the module's docstring).

    The lifecycle of each worker asks for :meth:`client` at set-up (the connection its
    renewer's ``Scripts`` use), then its :class:`~.locks.LockRenewer` attaches at start
    and detaches at the close. The thread runs while a renewer is attached; the last
    detach ends it and closes the connection.
    """

    def __init__(self) -> None:
        self._lock = native_lock()
        self._renewers: List[Any] = []
        self._client: Any = None
        self._thread_running = False
        self._stop = False
        #: released to end the thread's wait at once (the last detach)
        self._wake = native_lock()
        self._wake.acquire()
        #: monotonic time of the last completed tick
        self.last_tick: Optional[float] = None
        self.errors = 0

    def client(self, like: Any, settings: Any, socket_timeout: float) -> Any:
        """The shared renewal connection's client, cloned from ``like`` on first use
        (on the hub). Never used on the hub: only the thread calls through it."""
        with self._lock:
            if self._client is None:
                self._client = clone_client(like, max_connections=2, settings=settings,
                                            socket_timeout=socket_timeout)
            return self._client

    def attach(self, renewer: Any) -> None:
        """Renew ``renewer``'s jobs from now on (its ``start``, on its hub)."""
        with self._lock:
            if renewer not in self._renewers:
                self._renewers.append(renewer)
            self._stop = False
            start = not self._thread_running
            self._thread_running = True
        if start:
            self.last_tick = time.monotonic()
            start_native_thread(self._run)

    def detach(self, renewer: Any) -> None:
        """Stop renewing ``renewer``'s jobs (its ``stop``); the last one ends the thread."""
        with self._lock:
            if renewer in self._renewers:
                self._renewers.remove(renewer)
            if not self._renewers:
                self._stop = True
                stopping = self._thread_running
            else:
                stopping = False
        if stopping:
            try:
                self._wake.release()  # the thread ends now, not after its interval
            except RuntimeError:  # released already
                pass

    def alive(self) -> bool:
        return self._thread_running and self.last_tick is not None

    # -- on the thread ---------------------------------------------------------------------
    def _interval(self) -> float:
        with self._lock:
            renewers = list(self._renewers)
        return min((r.interval_s for r in renewers), default=0.5)

    def _run(self) -> None:
        client = None
        try:
            while True:
                self._wake.acquire(True, self._interval())
                with self._lock:
                    if self._stop:
                        client, self._client = self._client, None
                        self._thread_running = False
                        return
                    renewers = list(self._renewers)
                for renewer in renewers:
                    renewer.tick()
                self.last_tick = time.monotonic()
        finally:
            if client is not None:
                try:
                    close_client(client)
                except Exception:
                    pass
