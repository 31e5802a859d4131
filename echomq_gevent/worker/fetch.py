"""The worker's fetch loop and the greenlet that runs each job.

The loop is the seed's slot arithmetic::

    available_slots = concurrency - len(active_jobs)

Each free slot is filled by one atomic pick-up (``moveToActive-11``; several free
slots and a backlog: several pick-ups in one round trip, ``Scripts.move_to_active_many``);
each job runs in its own greenlet of a ``gevent.pool.Pool(concurrency)``. A finishing
job calls ``moveToFinished`` with fetch-next, so a busy slot is refilled in the same
round trip and the same greenlet (:meth:`FetchLoop._run_slot`). When nothing is waiting
the loop blocks on the marker ZSET (``BZPOPMIN``, ``drain_delay``) on its own
connection, honouring delay markers; rate limited, it sleeps the limiter TTL; with a
delayed job pending, it wakes at its due time. A gevent Event (``_kick``) wakes it the
moment a slot frees or a state changes; it never spins.

:class:`FetchLoop` is a part of :class:`~echomq_gevent.worker.Worker` (a mixin); the
settling of a job's outcome is in :mod:`.worker_settle`.
"""
from __future__ import annotations

import logging
import time
from typing import Any, List, Optional

import gevent

from ..errors import UnrecoverableError
from ..queue.job import Job
from ..connection.kept import AmbiguousCallError
from .marker import Fetched
from ..connection.blocking import MAX_BLOCK_S, MIN_BLOCK_S
from ..queue.schedulers import schedule_next_run
from ..protocol.clock import now_ms
from .slots import Slot

log = logging.getLogger("echomq_gevent.worker")

__all__ = ["FetchLoop"]

#: Most pick-ups the fetch loop sends at once when many slots are free.
_MAX_BURST = 64


class FetchLoop:
    """The fetch loop and job greenlets of a :class:`~echomq_gevent.worker.Worker`."""

    def _loop(self) -> None:
        failures = 0
        while not self.closing:
            try:
                self._loop_once()
                failures = 0
            except gevent.GreenletExit:
                raise
            except Exception as exc:
                failures += 1
                delay = min(5.0, 0.1 * (2 ** min(failures - 1, 10)))
                if failures == 1 or failures % 10 == 0:
                    log.warning("queue %r: fetching failed (%s: %s); retrying in %.1f s", self.queue_name,
                                type(exc).__name__, exc, delay)
                else:
                    log.debug("queue %r: fetching failed again (%s)", self.queue_name, exc)
                self._stop.wait(delay)

    def _wait_kick(self, timeout: Optional[float]) -> None:
        self._kick.clear()
        self._kick.wait(timeout)

    def _loop_once(self) -> None:
        marker = self._marker
        if marker is not None and marker.answered:  # a pick-up behind a wait the loop left
            self._take_fetched(marker.take())
            return
        if self._paused or len(self._active) >= self.concurrency:
            if self._paused and marker is not None and marker.pending:
                # a marker wait left pending would pop a wake-up meant for other workers
                fetched = marker.cancel(self._unblock_client())
                if fetched is not None:  # a job it took is handed straight back (paused)
                    self._take_fetched(fetched)
                # look again before waiting: the cancel yields, and a resume (or a freed
                # slot) meanwhile set the wake-up that the wait below would clear first
                return
            self._wait_kick(None)
            return
        now = now_ms()
        if self._limit_until > now:
            wait_ms = min(self._limit_until - now, self.options["max_rate_limit_delay"])
            self._wait_kick(wait_ms / 1000.0)
            return
        if self._unknown_pickups:
            self._claim_unknown_pickups()
            return
        if self._drained and not self._wait_for_work():
            return
        if self._paused or self.closing:  # paused or closed while blocked on the marker
            return
        self._fetch(min(self._burst, self.concurrency - len(self._active)))

    def _fetch(self, count: int) -> None:
        """``count`` pick-ups (``moveToActive``), pipelined when more than one; start every
        job they bring. The burst doubles while every pick-up brings a job (a backlog and
        free slots: fill them in a few round trips) and falls back to 1 otherwise."""
        tokens = [f"{self.id}:{next(self._tokens)}" for _ in range(max(1, count))]
        now = now_ms()
        try:
            if len(tokens) == 1:
                answers: List[Any] = [self.scripts.move_to_active(tokens[0], self.lock_duration, now,
                                                                  limiter=self.limiter, name=self.name)]
            else:
                answers = self.scripts.move_to_active_many(tokens, self.lock_duration, now,
                                                           limiter=self.limiter, name=self.name)
        except AmbiguousCallError:
            # the pick-ups may have taken jobs: never sent again, read back (next turn)
            self._unknown_pickups.extend(tokens)
            raise
        self.last_fetch_at = time.time()
        error: Optional[BaseException] = None
        started = 0
        for token, answer in zip(tokens, answers):
            if isinstance(answer, BaseException):
                error = error or answer
                continue
            job = self._next_from(answer, token)
            if job is not None:
                started += 1
                self._start(job, token)
        if started == len(tokens) and error is None:
            self._burst = min(self._burst * 2, _MAX_BURST)
        else:
            self._burst = 1
        if error is not None:
            raise error

    def _claim_unknown_pickups(self) -> None:
        """After pick-ups whose answer was lost (the connection failed once they were sent):
        find the jobs they took, in ``active`` and locked with one of their tokens, and run
        them, so none waits for its lock to lapse and the stalled check. Also used for the
        next job a finish fetched when the finish's answer was lost. Raises on a connection
        error (the loop tries again after its pause); the locks are renewed meanwhile only
        once the jobs are started, so a read-back that takes longer than ``lock_duration``
        leaves them to the stalled check."""
        tokens = set(self._unknown_pickups)
        client = self.scripts.client
        ids = client.lrange(self.keys.active, 0, -1)
        owners: List[Any] = []
        if ids:
            pipe = client.pipeline(transaction=False)
            for job_id in ids:
                pipe.get(self.keys.lock(job_id))
            owners = pipe.execute()
        claimed = 0
        for job_id, owner in zip(ids, owners):
            if owner not in tokens or job_id in self._active:
                continue
            fields = client.hgetall(self.keys.job(job_id))
            job = Job.from_fields(self.scripts, job_id, fields)
            job.token = owner
            claimed += 1
            self._start(job, owner)
        self._unknown_pickups.clear()
        self._drained = False
        if claimed:
            log.warning("queue %r: %d job(s) taken by a pick-up whose answer was lost were found by their lock "
                        "and started", self.queue_name, claimed)

    def _wait_for_work(self) -> bool:
        """Block on the marker. True: time to call moveToActive; False: look again."""
        now = now_ms()
        if self._block_until:
            remaining = self._block_until - now
            if remaining < 1:
                self._block_until = 0
                return True
            timeout = min(max(remaining / 1000.0, MIN_BLOCK_S), MAX_BLOCK_S)
        else:
            timeout = min(max(self.drain_delay, MIN_BLOCK_S), MAX_BLOCK_S)
        assert self._marker is not None
        self._kick.clear()
        fetch = None
        if not self._active and self._marker.can_fetch:
            # nothing in flight: the pick-up goes behind the wait and runs as it ends
            # (marker_wait.py); a pick-up never waits there while jobs of this worker run
            token = f"{self.id}:{next(self._tokens)}"
            fetch = (token, self.scripts.move_to_active_command(token, self.lock_duration, self.limiter,
                                                                 self.name))
        outcome, score = self._marker.wait(timeout, self._kick, fetch)
        self.last_fetch_at = time.time()
        if outcome == "fetched":
            self._take_fetched(score)
            return False
        if outcome == "woken":
            return False
        if outcome == "marker":
            due = int(score)
            if due > 0 and due - now_ms() >= 1:
                # a delay marker: the earliest delayed job is due at ``due``; wait for it
                if not self._block_until or due < self._block_until:
                    self._block_until = due
                return False
        self._block_until = 0
        return True

    def _take_fetched(self, fetched: Fetched) -> None:
        """Start the job a pick-up written behind the marker wait took (handed straight back
        when closing or paused, see :meth:`_start`); on an answer that is an error, pick up
        the ordinary way next (``_drained`` off), or find an ambiguous pick-up's job by its
        token (at a close, left to the stalled check). The wait's own error, if it had one,
        is raised after."""
        answer = fetched.answer
        if isinstance(answer, AmbiguousCallError):
            if self.closing:
                log.warning("queue %r: %s; a job it took stays active until the stalled check of any worker "
                            "moves it back to wait", self.queue_name, answer)
            else:
                self._unknown_pickups.append(fetched.token)
                self._kick.set()
        elif isinstance(answer, BaseException):
            # it did not run (NOSCRIPT, a redirection) or failed: the script connection
            # loads a missing script, and raises a failure again for the loop to report
            log.debug("queue %r: the pick-up behind the marker wait answered %s: %s", self.queue_name,
                      type(answer).__name__, answer)
            self._block_until = 0
            self._drained = False
        else:
            job = self._next_from(answer, fetched.token)
            if job is not None:
                self._start(job, fetched.token)
        if fetched.pop_error is not None:
            raise fetched.pop_error

    def _next_from(self, res: Any, token: str) -> Optional[Job]:
        """Read a fetch answer (``[fields|0, id|0, ttl, due]``, or 0/None for nothing),
        update the loop's state and return the new job, if any."""
        if not res:
            self._drained = True
            return None
        flat, job_id, ttl, due = res[0], res[1], int(res[2] or 0), int(res[3] or 0)
        now = now_ms()
        old_block, old_limit = self._block_until, self._limit_until
        self._limit_until = now + ttl if ttl > 0 else 0
        self._block_until = due if due > 0 else 0
        if flat and job_id:
            self._drained = False
            job = Job.from_flat(self.scripts, str(job_id), flat)
            job.token = token
            return job
        self._drained = True
        if (self._block_until and (not old_block or self._block_until < old_block)) or \
                self._limit_until > old_limit:
            self._kick.set()
        return None

    def _start(self, job: Job, token: str) -> None:
        slot = Slot(job, token)
        self._active[job.id] = slot
        assert self._locks is not None and self._pool is not None
        self._locks.track(job.id, token)
        if self.closing or self._paused:  # fetched as a close or a pause began: give it straight back
            self._hand_back(slot)
            self._release(slot)
            return
        # the slot goes in a list the greenlet empties: a greenlet keeps its arguments for
        # life, and this one runs job after job (fetch-next), so the first slot and its job
        # (data and all) would stay in memory until the slot goes idle
        self._pool.spawn(self._run_slot, [slot])

    def _can_fetch_next(self) -> bool:
        # the finishing job still holds its slot: refill it only within the concurrency
        # (which may have been lowered while it ran)
        return (self.running and not self.closing and not self._paused
                and len(self._active) <= self.concurrency)

    # ------------------------------------------------------------------ one slot
    def _run_slot(self, first: List[Slot]) -> None:
        """A job greenlet: run the job, write its result, and go on with the job that
        fetch-next returned, in the same slot. ``first`` holds the first slot; it is
        emptied, so the greenlet's arguments do not keep finished jobs alive."""
        slot = first.pop()
        current = [slot]
        me = gevent.getcurrent()
        monitor = self._hub_monitor
        if monitor is not None:
            monitor.register(me, lambda: self._describe(current[0]))
        try:
            while True:
                slot.greenlet = me
                try:
                    nxt = self._process(slot)
                except gevent.GreenletExit:
                    raise
                except Exception:
                    log.exception("queue %r: job %s: unexpected error in the worker; the job stays active "
                                  "and a stalled check will recover it", self.queue_name, slot.job.id)
                    nxt = None
                finally:
                    self._release(slot)
                if nxt is None:
                    break
                slot = Slot(nxt, slot.token)
                current[0] = slot
                self._active[nxt.id] = slot
                if self._locks is not None:
                    self._locks.track(nxt.id, slot.token)
        finally:
            if monitor is not None:
                monitor.unregister(me)
            self._kick.set()

    def _describe(self, slot: Slot) -> str:
        return f"job {slot.job.id} ({slot.job.name!r}) of queue {self.queue_name!r}"

    def _release(self, slot: Slot) -> None:
        slot.phase = "done"
        if self._active.get(slot.job.id) is slot:
            del self._active[slot.job.id]
        if self._locks is not None:
            self._locks.untrack(slot.job.id, slot.token)

    def _unrecoverable_reason(self, job: Job) -> Optional[str]:
        if job.deferred_failure:
            return job.deferred_failure
        limit = self.options["max_started_attempts"]
        if limit and limit < (job.attempts_started or 0):
            return "job started more than allowable limit"
        if job.decode_error:
            return job.decode_error
        return None

    def _process(self, slot: Slot) -> Optional[Job]:
        """Run one job and settle it. Returns the next job fetch-next brought, or None."""
        job = slot.job
        if job.repeat_job_key:  # a scheduler's run: create the next one first, as Node's worker does
            schedule_next_run(self.scripts, job)
        self.plugins.notify("echomq_job_active", worker=self, job=job)
        reason = self._unrecoverable_reason(job)
        if reason is not None:
            return self._fail(slot, UnrecoverableError(reason))
        try:
            fn = self.processor or self.plugins.get_processor(self.queue_name, job.name)
        except Exception as exc:
            return self._fail(slot, exc)
        if fn is None:
            return self._fail(slot, UnrecoverableError(
                f"no processor for job name {job.name!r} on queue {self.queue_name!r}: pass processor= to the "
                f"Worker, set processor: in the queue's config, or register one with a plugin"))
        try:
            with self.plugins.job_context(self, job):
                slot.in_processor = True
                try:
                    result = self._runtime.call(fn, job, self._timeout_s)
                finally:
                    slot.in_processor = False
        except (Exception, gevent.Timeout) as exc:
            if self._discarded(slot):
                return None
            return self._fail(slot, exc)
        if self._discarded(slot):
            return None
        return self._complete(slot, result)

    def _discarded(self, slot: Slot) -> bool:
        if slot.handed_back or slot.lock_lost:
            log.info("queue %r: job %s finished, but %s; its result is not written", self.queue_name,
                     slot.job.id, "it was handed back" if slot.handed_back else "its lock was lost")
            return True
        return False

