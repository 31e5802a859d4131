"""Hub health: notice a greenlet that keeps the gevent hub from running, and say which job.

A job greenlet that runs pure-Python CPU work, or a C call that does not yield,
blocks every other greenlet of the process: other jobs, the fetch loop, the stalled
check, a co-hosted WSGI app. Locks survive it (they are renewed from a native thread),
but the operator must learn which job did it.

:class:`HubMonitor` (one per hub, shared by every worker on it):

* a periodic timer watcher on the hub's loop records a heartbeat every
  ``threshold / 4`` seconds (a libev callback, no greenlet);
* a native watchdog thread checks the heartbeat; when it is older than ``threshold``
  it finds which registered job greenlet is running (a started greenlet whose
  ``gr_frame`` is ``None`` is the one executing), takes the main thread's current
  frame, and logs one warning per blocking episode, then one line when the hub runs
  again.
"""
from __future__ import annotations

import logging
import os
import sys
import time
import traceback
import weakref
from typing import Any, Callable, Dict, Optional

import gevent
import gevent.monkey
import greenlet

from ..connection.blocking import native_lock, start_native_thread

log = logging.getLogger("echomq_gevent.hub")

__all__ = ["HubMonitor"]

Describe = Callable[[], str]


class HubMonitor:
    """Watches one hub. Get the shared instance with :meth:`for_current_hub`; workers
    call :meth:`acquire`/:meth:`release` around their life and :meth:`register` each
    job greenlet with a function that describes its current job."""

    _instances: "weakref.WeakKeyDictionary[Any, HubMonitor]" = weakref.WeakKeyDictionary()

    def __init__(self, hub: Any) -> None:
        self.hub = hub
        # the OS thread id (threading.get_ident is a greenlet id once patched)
        self.thread_ident = gevent.monkey.get_original("_thread", "get_ident")()
        self.threshold: Optional[float] = None
        self._users = 0
        self._greenlets: Dict[Any, Describe] = {}
        self._beat = time.monotonic()
        self._timer: Any = None
        self._stop: Any = None
        self._reporting = False
        #: number of blocking episodes seen, and the last report (a dict) for health checks
        self.episodes = 0
        self.last_report: Optional[Dict[str, Any]] = None

    @classmethod
    def for_current_hub(cls) -> "HubMonitor":
        """The monitor of the calling thread's hub (created on first use)."""
        hub = gevent.get_hub()
        mon = cls._instances.get(hub)
        if mon is None:
            mon = cls(hub)
            cls._instances[hub] = mon
        return mon

    # -- life -------------------------------------------------------------------------
    def acquire(self, threshold: float) -> None:
        """A worker starts using the monitor; the smallest threshold of all users wins."""
        self._users += 1
        if self.threshold is None or threshold < self.threshold:
            self.threshold = float(threshold)
            if self._timer is not None:
                self._stop_watch()
        if self._timer is None:
            self._start_watch()

    def release(self) -> None:
        """A worker is done; the last one stops the watchdog."""
        self._users = max(0, self._users - 1)
        if self._users == 0:
            self._stop_watch()
            self.threshold = None

    def _period(self) -> float:
        return max(0.01, (self.threshold or 1.0) / 4.0)

    def _start_watch(self) -> None:
        period = self._period()
        self._beat = time.monotonic()
        self._timer = self.hub.loop.timer(period, period, ref=False)
        self._timer.start(self._on_beat)
        stop = native_lock()
        stop.acquire()
        self._stop = stop
        start_native_thread(lambda: self._watch(stop, period))

    def _stop_watch(self) -> None:
        if self._timer is not None:
            self._timer.stop()
            self._timer.close()
            self._timer = None
        if self._stop is not None:
            try:
                self._stop.release()
            except RuntimeError:
                pass
            self._stop = None

    def _on_beat(self) -> None:
        self._beat = time.monotonic()

    # -- registry -----------------------------------------------------------------------
    def register(self, glet: Any, describe: Describe) -> None:
        """Called on ``glet`` itself when it starts running jobs."""
        self._greenlets[glet] = describe

    def unregister(self, glet: Any) -> None:
        self._greenlets.pop(glet, None)

    def blocked_for(self) -> float:
        """Seconds since the hub last ran its loop (about 0 when healthy)."""
        return max(0.0, time.monotonic() - self._beat - self._period())

    # -- watchdog thread --------------------------------------------------------------------
    def _running_job(self) -> Optional[str]:
        for glet, describe in list(self._greenlets.items()):
            try:
                if greenlet.greenlet.__bool__(glet) and glet.gr_frame is None:
                    return describe()
            except Exception:
                continue
        return None

    def _where(self) -> str:
        frame = sys._current_frames().get(self.thread_ident)
        if frame is None:
            return "?"
        stack = traceback.extract_stack(frame, limit=40)
        here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the package
        # the innermost frames outside this package say what the job is doing
        mine = [f for f in stack if not os.path.abspath(f.filename).startswith(here)] or stack
        return " <- ".join(f"{os.path.basename(f.filename)}:{f.lineno} in {f.name}" for f in reversed(mine[-3:]))

    def _watch(self, stop: Any, period: float) -> None:
        threshold = self.threshold or 1.0
        while not stop.acquire(True, period):
            gap = time.monotonic() - self._beat - period
            if gap > threshold:
                if not self._reporting:
                    self._reporting = True
                    self.episodes += 1
                    job = self._running_job()
                    where = self._where()
                    self.last_report = {"blocked_s": gap, "job": job, "where": where}
                    log.warning(
                        "the gevent hub has been blocked for %.1f s by %s at %s; other jobs, the fetch "
                        "loop and any co-hosted app are stalled (locks are still renewed). Make the "
                        "processor yield, or run it with offload: thread",
                        gap, job or "code outside any job greenlet", where,
                    )
            elif self._reporting:
                self._reporting = False
                log.info("the gevent hub runs again")
