"""SIGTERM/SIGINT handling, in one place for everything that runs workers.

The rule is the same for a lone :class:`~echomq_gevent.worker.Worker` run on the main
greenlet and for the command's :class:`~echomq_gevent.host.runner.Runner`: the first signal
starts a graceful close (in-flight jobs get ``shutdown_timeout`` to finish, then are handed
back to ``wait``), a second one hands the unfinished jobs back at once. Inside gunicorn the
server owns the signals and :mod:`echomq_gevent.contrib.gunicorn` reacts to its hooks
instead.
"""
from __future__ import annotations

import logging
import signal
import threading
from typing import Any, Callable, List

import gevent
import greenlet

log = logging.getLogger("echomq_gevent.worker")

__all__ = ["ShutdownSignals"]


class ShutdownSignals:
    """Calls ``graceful(signame)`` on the first SIGTERM/SIGINT and ``at_once(signame)`` on
    every later one. Both run on a new greenlet of the hub that installed the handlers.

    :meth:`install` does nothing (returns False) off the main greenlet of the main thread,
    where a process-wide handler is not this caller's to take.
    """

    def __init__(self, graceful: Callable[[str], Any], at_once: Callable[[str], Any]) -> None:
        self.graceful = graceful
        self.at_once = at_once
        self.received = 0
        self._handlers: List[Any] = []

    def install(self) -> bool:
        if greenlet.getcurrent().parent is not None or threading.current_thread() is not threading.main_thread():
            return False
        for signum in (signal.SIGTERM, signal.SIGINT):
            try:
                self._handlers.append(gevent.signal_handler(signum, self._on_signal, signum))
            except Exception as exc:  # pragma: no cover - platform without the signal
                log.debug("cannot handle signal %s: %s", signum, exc)
        return True

    def cancel(self) -> None:
        """Remove the handlers (gevent restores the previous ones)."""
        handlers, self._handlers = self._handlers, []
        for h in handlers:
            try:
                h.cancel()
            except Exception:
                pass

    def _on_signal(self, signum: int) -> None:
        self.received += 1
        name = signal.Signals(signum).name
        gevent.spawn(self.graceful if self.received == 1 else self.at_once, name)
