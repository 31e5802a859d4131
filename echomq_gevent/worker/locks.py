"""Lock renewal from a native OS thread.

A job greenlet that hogs the hub (pure-Python CPU work, a C call that does not
yield) must not lose its lock, or a second worker runs the job too. So locks are
not renewed from a greenlet: :class:`LockRenewer` owns a real OS thread (started
with the *original* ``_thread.start_new_thread``, so it stays native after
``patch_all()``) and its own Redis client, and every tick renews the locks of all
in-flight jobs in ONE ``extendLocks-1`` call. The GIL's switch interval (5 ms)
guarantees the thread runs even while the main thread spins in Python code.

Hand-off between the hub and the thread is a native lock around a dict
``job id -> token``: the worker's greenlets :meth:`track`/:meth:`untrack`, the
thread takes a snapshot per tick. Ids whose renewal was refused (lock missing or
owned by another token) are dropped from the table and handed to ``on_lost`` on
the hub's loop (``run_callback_threadsafe``, on a new greenlet), never called on
the thread.

The same send reads each job's cancellation mark (``cancelJob-9``'s ``cancelled``
field; :meth:`~echomq_gevent.protocol.scripts.Scripts.extend_locks_reading_marks`), so
a job cancelled from elsewhere stops at the next renewal at the latest, even when the
worker's subscription missed the message without noticing. A marked job is handed to
``on_marked`` once, the same way as a lost one.
"""
from __future__ import annotations

import logging
import time
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

import gevent

from ..connection.clients import close_client
from ..connection.blocking import native_lock, start_native_thread
from ..protocol.scripts import Scripts

log = logging.getLogger("echomq_gevent.locks")

__all__ = ["LockRenewer"]

LostCallback = Callable[[List[Tuple[str, str]]], None]
MarkedCallback = Callable[[List[Tuple[str, str]]], None]


class LockRenewer:
    """Renews the locks of one worker's in-flight jobs from a native thread.

    ``scripts`` must be built on a client that nothing else uses (the thread's own);
    ``duration_ms`` is the lock's new TTL, ``interval_s`` the tick. ``on_lost`` is
    called on the hub with ``[(job_id, token), ...]`` of locks that could not be renewed;
    ``on_marked`` (optional) with ``[(job_id, reason), ...]`` of the jobs found marked
    cancelled, each once while it is tracked. ``shared``: a
    :class:`~.shared_locks.SharedLockRenewal` whose thread ticks for this renewer (the
    workers of a pool), instead of a thread of its own; ``scripts`` is then built on its
    client.
    """

    def __init__(self, scripts: Scripts, duration_ms: int, interval_s: float,
                 on_lost: LostCallback, label: str = "", on_marked: Optional[MarkedCallback] = None,
                 shared: Any = None) -> None:
        self.scripts = scripts
        self.duration_ms = int(duration_ms)
        self.interval_s = max(0.01, float(interval_s))
        self.on_lost = on_lost
        self.on_marked = on_marked
        self.label = label
        self._jobs: Dict[str, str] = {}
        #: (job id, token) whose mark was handed to on_marked already
        self._marked: Set[Tuple[str, str]] = set()
        self._table_lock = native_lock()
        self._stop = native_lock()
        self._stop.acquire()
        self._loop: Any = None
        self._running = False
        self._started = False
        #: monotonic time of the last completed tick (for health checks)
        self.last_tick: Optional[float] = None
        #: monotonic time of the last successful extendLocks call with jobs in it
        self.last_renewal: Optional[float] = None
        self.renewals = 0
        self.errors = 0
        #: the marked jobs the last tick found first (set by renew_once)
        self.newly_marked: List[Tuple[str, str]] = []
        self.shared = shared
        self._failures = 0

    # -- called on the hub (worker greenlets) --------------------------------------------
    def track(self, job_id: str, token: str) -> None:
        """Start renewing ``job_id``'s lock held with ``token``."""
        with self._table_lock:
            self._jobs[job_id] = token

    def untrack(self, job_id: str, token: Optional[str] = None) -> None:
        """Stop renewing ``job_id`` (only if it is still held with ``token``, when given)."""
        with self._table_lock:
            if token is None or self._jobs.get(job_id) == token:
                held = self._jobs.pop(job_id, None)
                self._marked.discard((job_id, held))

    def tracked(self) -> Dict[str, str]:
        with self._table_lock:
            return dict(self._jobs)

    def start(self) -> None:
        """Start the thread (once). Must be called on the hub that ``on_lost`` runs on."""
        if self._started:
            return
        self._started = True
        self._running = True
        self._loop = gevent.get_hub().loop
        self.last_tick = time.monotonic()
        if self.shared is not None:
            self.shared.attach(self)
            return
        start_native_thread(self._run)

    def stop(self) -> None:
        """Ask the thread to exit after its current tick (does not wait)."""
        if self.shared is not None:
            if self._started:
                self._running = False
                self.shared.detach(self)
            return
        if self._started:
            try:
                self._stop.release()
            except RuntimeError:  # already released
                pass

    def alive(self) -> bool:
        """The thread runs and its last tick is recent (a few intervals, or 10 s while
        Redis calls are slow)."""
        if not self._running or self.last_tick is None:
            return False
        return time.monotonic() - self.last_tick < max(5 * self.interval_s, 10.0)

    # -- called on the thread --------------------------------------------------------------
    def renew_once(self) -> List[Tuple[str, str]]:
        """One tick: renew every tracked lock in one call; return and forget the lost ones.
        The marked jobs not reported yet are in :attr:`newly_marked` after it.

        Runs on the renewal thread (or, in tests, on any thread that owns the client).
        Redis errors propagate; the table is left as it was.
        """
        self.newly_marked = []
        with self._table_lock:
            if not self._jobs:
                return []
            ids = list(self._jobs)
            tokens = [self._jobs[i] for i in ids]
        if self.on_marked is not None:
            failed, marks = self.scripts.extend_locks_reading_marks(ids, tokens, self.duration_ms)
        else:
            failed, marks = self.scripts.extend_locks(ids, tokens, self.duration_ms), {}
        self.renewals += 1
        self.last_renewal = time.monotonic()
        sent = dict(zip(ids, tokens))
        lost: List[Tuple[str, str]] = []
        with self._table_lock:
            for job_id in failed:
                token = sent.get(job_id)
                if token is not None and self._jobs.get(job_id) == token:
                    del self._jobs[job_id]
                    self._marked.discard((job_id, token))
                    lost.append((job_id, token))
            for job_id, reason in marks.items():
                token = sent[job_id]
                if self._jobs.get(job_id) == token and (job_id, token) not in self._marked:
                    self._marked.add((job_id, token))
                    self.newly_marked.append((job_id, reason))
        return lost

    def tick(self) -> None:
        """One tick on the renewal thread (its own, or a pool's shared one): renew, log a
        failure, report lost locks and newly marked jobs to the hub. Never raises."""
        try:
            lost = self.renew_once()
            if self._failures:
                log.info("%s: lock renewal works again after %d failed tick(s)", self.label, self._failures)
            self._failures = 0
        except Exception as exc:
            self._failures += 1
            self.errors += 1
            if self._failures == 1 or self._failures % 20 == 0:
                log.warning("%s: lock renewal failed (%s); retrying every %.2f s, locks expire "
                            "after %d ms without renewal", self.label, exc, self.interval_s,
                            self.duration_ms)
            lost = []
            self.newly_marked = []
        self.last_tick = time.monotonic()
        if lost:
            try:
                # on the hub, spawn a greenlet: telemetry hooks may do I/O, which the
                # hub greenlet itself must never do
                self._loop.run_callback_threadsafe(gevent.spawn, self.on_lost, lost)
            except Exception:  # the hub is gone (process exiting)
                log.error("%s: could not report lost locks %s", self.label, lost)
        if self.newly_marked and self.on_marked is not None:
            try:
                self._loop.run_callback_threadsafe(gevent.spawn, self.on_marked, self.newly_marked)
            except Exception:  # the hub is gone (process exiting)
                pass

    def _run(self) -> None:
        try:
            while not self._stop.acquire(True, self.interval_s):
                self.tick()
        finally:
            self._running = False
            self._cleanup_thread()

    def _cleanup_thread(self) -> None:
        try:
            close_client(self.scripts.client)
        except Exception:
            pass
        # A patched socket created a gevent hub for this thread. It is left alone:
        # destroying a hub from its own thread while the process exits crashed the
        # interpreter (seen with gevent 26.9); the thread ends and the hub goes with it.
