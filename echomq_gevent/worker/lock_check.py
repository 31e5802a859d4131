"""The lock check before a job starts: a job picked up long ago is started only while its lock is ours.

A pick-up takes the job's lock for ``lock_duration`` ms. When the process is frozen (SIGSTOP,
a paused VM, a long stop of the world) or starved between that pick-up and the start of the
processor, the lock may have lapsed meanwhile and the stalled check of another worker may
have handed the job to that worker, which runs it. Starting it here too would run it twice
(its result would be refused afterwards, but its effects would be done).

So before the processor starts, :class:`StartCheck` compares the age of the pick-up with
:func:`start_margin`. A fresh pick-up (the common case, every job of a busy worker) starts
at once: no Redis command is added. An older one has its lock extended first, by the lock
check the renewal thread uses (``extendLocks-1``: the lock is set again only while it holds
our token), and the job starts only when that answers "still ours". When the lock is gone,
the job is not started, not failed and not moved: another worker owns it.

The pick-ups that age together (a frozen process wakes with all its slots' jobs waiting) are
checked together: the jobs whose check is asked in one turn of the hub go in one
``extendLocks-1`` call.

The margin is a quarter of ``lock_duration``. A pick-up younger than that leaves the lock at
least three quarters of its duration, while the renewal thread renews every tracked lock at
least every half of it (``lock_renew_time``, default ``lock_duration / 2``), so the lock
reaches its first renewal with a quarter of its duration to spare for that round trip; an
older pick-up may not, and is checked. A quarter is also far above any delay of a merely busy
hub (30 s locks: 7.5 s), so the check stays off the hot path.

The age is measured from a monotonic stamp taken before the pick-up was sent (the fetch
loop's pick-ups, the fetch-next of a finish), which covers a freeze while the answer was
on its way; a pick-up written behind the marker wait runs when the wait ends, so its stamp
is the time its answer was read, made older by the job's ``processedOn`` (the server's time
of the pick-up) when that is earlier than the worker's clock says. A pick-up of unknown age (the jobs of
pick-ups whose answer was lost, found by their lock) is always checked.

Everything runs on the worker's hub, on the job greenlets.
"""
from __future__ import annotations

import logging
import time
from typing import List, Optional, Tuple

import gevent
import gevent.event

from ..protocol.clock import now_ms
from ..protocol.scripts import Scripts

log = logging.getLogger("echomq_gevent.worker")

__all__ = ["StartCheck", "start_margin", "marker_pickup_stamp", "describe_age"]


def start_margin(lock_duration_ms: int) -> float:
    """Seconds a pick-up may age before its job starts without a lock check: a quarter of
    the lock's duration (see the module's docstring for why)."""
    return lock_duration_ms / 4000.0


def marker_pickup_stamp(read_at: float, processed_on: Optional[int]) -> float:
    """The monotonic stamp of a pick-up written behind the marker wait: when its answer was
    read (``read_at``), or earlier by as much as the job's ``processedOn`` (the server's time
    when the pick-up ran, in ms) lies behind the worker's clock now."""
    if not processed_on:
        return read_at
    behind = (now_ms() - int(processed_on)) / 1000.0
    return min(read_at, time.monotonic() - behind) if behind > 0 else read_at


class StartCheck:
    """Checks, before a job starts, that a pick-up of some age still holds its lock.

    Made by the :class:`~.slot_runner.SlotRunner` with the worker's ``scripts`` (the shared
    script connection) and ``lock_duration``. :meth:`still_ours` is called on a job
    greenlet just before its processor starts."""

    def __init__(self, scripts: Scripts, lock_duration: int) -> None:
        self.scripts = scripts
        self.lock_duration = int(lock_duration)
        #: the age (s) above which a pick-up is checked
        self.margin = start_margin(self.lock_duration)
        self._pending: List[Tuple[str, str, gevent.event.AsyncResult]] = []
        self._scheduled = False
        #: checks asked, calls sent for them, and jobs found no longer ours (for tests and status)
        self.checked = 0
        self.calls = 0
        self.refused = 0

    def needed(self, picked_at: Optional[float]) -> bool:
        """Whether a pick-up stamped ``picked_at`` (monotonic s; None: unknown) is old
        enough to be checked."""
        return picked_at is None or time.monotonic() - picked_at > self.margin

    def still_ours(self, job_id: str, token: str) -> bool:
        """On a job greenlet: extend the job's lock if it still holds ``token`` (one
        ``extendLocks-1`` call for the checks of this hub turn). False: the lock is gone or
        another worker's. A Redis error is raised (the caller leaves the job as it is)."""
        self.checked += 1
        result = gevent.event.AsyncResult()
        self._pending.append((job_id, token, result))
        if not self._scheduled:
            self._scheduled = True
            gevent.get_hub().loop.run_callback(self._end_turn)
        return bool(result.get())

    def _end_turn(self) -> None:
        gevent.spawn(self._flush)

    def _flush(self) -> None:
        batch, self._pending = self._pending, []
        self._scheduled = False
        if not batch:
            return
        self.calls += 1
        try:
            lost = set(self.scripts.extend_locks([b[0] for b in batch], [b[1] for b in batch], self.lock_duration))
        except BaseException as exc:  # handed to every caller
            for _, _, result in batch:
                result.set_exception(exc)
            return
        for job_id, _, result in batch:
            ours = job_id not in lost
            if not ours:
                self.refused += 1
            result.set(ours)


def describe_age(picked_at: Optional[float]) -> str:
    """How long ago a pick-up was, for a log line."""
    if picked_at is None:
        return "at an unknown time"
    return f"{time.monotonic() - picked_at:.1f} s ago"
