"""The stalled-jobs check: ``moveStalledJobsToWait-9`` at start and every interval.

BullMQ's two-phase mark and sweep runs in the script (docs/protocol.md, "Fetching and finishing"): a job that was
active at one check and is still active, without a lock, at the next one goes back to
``wait`` (or gets ``defa`` after ``max_stalled_count`` stalls). Only one worker of a
queue runs the check per interval (the ``stalled-check`` key throttles it).

:class:`StalledChecker` runs on its own greenlet of the worker's hub; a hub blocked by
a job delays it, which is harmless: locks are renewed from a native thread.
"""
from __future__ import annotations

import logging
from typing import Callable, List, Optional

import gevent
import gevent.event

from ..protocol.clock import now_ms
from ..protocol.scripts import Scripts

log = logging.getLogger("echomq_gevent.stalled")

__all__ = ["StalledChecker"]


class StalledChecker:
    """Periodic stalled check for one queue; ``on_stalled(ids)`` is called on the
    checker's greenlet with the ids this worker moved back."""

    def __init__(self, scripts: Scripts, max_stalled_count: int, interval_ms: int,
                 on_stalled: Callable[[List[str]], None], label: str = "") -> None:
        self.scripts = scripts
        self.max_stalled_count = int(max_stalled_count)
        self.interval_ms = int(interval_ms)
        self.on_stalled = on_stalled
        self.label = label
        self._stop = gevent.event.Event()
        self._greenlet: Optional[gevent.Greenlet] = None
        self.checks = 0

    def check(self) -> List[str]:
        """Run the script once (any greenlet); returns the ids moved back to wait, empty
        when another worker checked within the interval. Redis errors propagate."""
        now = now_ms()
        ids = self.scripts.move_stalled_jobs_to_wait(self.max_stalled_count, now, self.interval_ms)
        self.checks += 1
        if ids:
            self.on_stalled(ids)
        return ids

    def start(self, check_now: bool = True) -> None:
        """Check once now (errors logged) and then every interval on a greenlet."""
        if check_now:
            self._safe_check()
        self._greenlet = gevent.spawn(self._run)

    def stop(self) -> None:
        self._stop.set()
        if self._greenlet is not None and not self._greenlet.ready():
            self._greenlet.kill(block=False)

    def _safe_check(self) -> None:
        try:
            self.check()
        except gevent.GreenletExit:
            raise
        except Exception as exc:
            log.warning("%s: stalled check failed (%s); trying again in %d ms", self.label, exc,
                        self.interval_ms)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_ms / 1000.0):
            self._safe_check()
