"""The progress line of ``echomq-gevent`` on a terminal, and the summary it logs at the end.

:class:`ProgressPlugin` is a telemetry plugin the command registers (:func:`.launch.run_config`);
:func:`progress_loop` redraws the line from its counters on a greenlet of the main hub.
"""
from __future__ import annotations

import time
from typing import Any, List, Sequence

from ..plugins.hookspecs import hookimpl

__all__ = ["ProgressPlugin", "progress_loop"]


class ProgressPlugin:
    """Telemetry plugin the CLI registers: counts job events for the progress line and the
    final summary. Hooks run on job greenlets; they only bump counters."""

    def __init__(self) -> None:
        self.__name__ = "echomq_gevent.cli.progress"  # the name pluggy lists it under
        self.running = 0
        self.completed = 0
        self.failed = 0
        self.retried = 0
        self.handed_back = 0
        self.started_at = time.monotonic()
        self._last = (self.started_at, 0)
        self.rate = 0.0

    @hookimpl
    def echomq_job_active(self, worker: Any, job: Any) -> None:
        self.running += 1

    def _done(self) -> None:
        self.running = max(0, self.running - 1)

    @hookimpl
    def echomq_job_completed(self, worker: Any, job: Any, result: Any, duration_ms: float) -> None:
        self._done()
        self.completed += 1

    @hookimpl
    def echomq_job_failed(self, worker: Any, job: Any, error: BaseException) -> None:
        self._done()
        self.failed += 1

    @hookimpl
    def echomq_job_retried(self, worker: Any, job: Any, error: BaseException, delay_ms: int) -> None:
        self._done()
        self.retried += 1

    @hookimpl
    def echomq_job_lock_lost(self, worker: Any, job: Any) -> None:
        self._done()

    @hookimpl
    def echomq_job_handed_back(self, worker: Any, job: Any) -> None:
        self._done()
        self.handed_back += 1

    def line(self, queues: Sequence[str], state: str = "") -> str:
        now = time.monotonic()
        then, done_then = self._last
        done = self.completed + self.failed
        if now - then >= 1.0:
            self.rate = (done - done_then) / (now - then)
            self._last = (now, done)
        names = ", ".join(queues)
        text = (f"[echomq] {names}: {self.running} running | {self.completed} completed | "
                f"{self.failed} failed | {self.retried} retried | {self.rate:.1f} jobs/s")
        return text + (f" | {state}" if state else "")

    def summary(self) -> str:
        return (f"{self.completed} completed, {self.failed} failed, {self.retried} retried, "
                f"{self.handed_back} handed back in {time.monotonic() - self.started_at:.1f} s")


def progress_loop(progress: ProgressPlugin, stream: Any, names: List[str], runner: Any,
                   done: Any) -> None:
    """The progress line on a terminal, redrawn twice a second until ``done``."""
    while not done.wait(0.5):
        state = "draining" if runner.stopping else ""
        try:
            stream.write("\r\x1b[K" + progress.line(names, state))
            stream.flush()
        except Exception:
            return
    try:
        stream.write("\r\x1b[K")
        stream.flush()
    except Exception:
        pass
