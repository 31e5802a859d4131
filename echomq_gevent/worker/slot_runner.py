"""The greenlet of a job slot: run the job, settle it, go on with the job fetch-next brought.

:class:`SlotRunner` is the part of the fetch loop (:mod:`.fetch`) that runs jobs. The loop
picks jobs up, records each in its slot and spawns :meth:`SlotRunner.run_slot` on a
greenlet of its pool; from there on the slot is this module's: the processor runs (through
the plugins' job contexts and the worker's runtime, :mod:`.runtime`), the outcome is
written by the :class:`~echomq_gevent.worker.settle.Settler`, and the next job a finish
brought (fetch-next) runs in the same slot and the same greenlet, until a finish brings
none. So a busy slot is refilled in the round trip that frees it.

What the runner asks of the loop it is handed as two bound methods when it is made: whether
a finish may fetch the next job (the loop owns ``paused`` and ``concurrency``), and the
reading of a fetch answer (the loop owns the state a pick-up answer updates). Both are
called once a job, directly, as the loop's own methods were. Everything runs on the
worker's hub, on the greenlets of the loop's pool.
"""
from __future__ import annotations

import logging
import time
from typing import Any, Callable, List, Optional

import gevent

from ..errors import JobCancelled, UnrecoverableError
from ..queue.job import Job
from .context import WorkerContext
from .lock_check import StartCheck, describe_age
from .next_runs import NextRuns
from .settle import NO_NEXT, Settler
from .slots import Slot

log = logging.getLogger("echomq_gevent.worker")

__all__ = ["SlotRunner"]


class SlotRunner:
    """Runs the jobs of one worker's slots (:meth:`run_slot`, one greenlet a slot).

    Owns: ``processor`` (the Worker's, set through it; None: the plugins find one by job
    name) and ``runtime`` (set by the fetch loop's set-up). Shares through ``ctx``: the
    slots of the jobs in flight, the hints (a freed slot wakes the loop), the lock renewer
    and the hub watchdog.
    """

    def __init__(self, ctx: WorkerContext, settler: Settler, processor: Optional[Callable[[Job], Any]],
                 next_runs: NextRuns, can_fetch_next: Callable[[Slot], bool],
                 next_from: Callable[[Any, str], Optional[Job]]) -> None:
        self.ctx = ctx
        self.settler = settler
        #: the Worker's processor, or None (the plugins find one per job name)
        self.processor = processor
        #: runs a processor (:mod:`.runtime`); set by the fetch loop's set-up
        self.runtime: Any = None
        self.active = ctx.active
        self.hints = ctx.hints
        self.plugins = ctx.plugins
        self.queue_name = ctx.queue_name
        self.worker = ctx.worker
        self.options = ctx.options
        self.next_runs = next_runs
        job_timeout = ctx.options["job_timeout"]
        self._timeout_s: Optional[float] = job_timeout / 1000.0 if job_timeout else None
        #: the loop's: whether a finish may take the next job (paused, closing, concurrency)
        self._can_fetch_next = can_fetch_next
        #: the loop's: read a fetch answer and return its job, if any
        self._next_from = next_from
        #: the lock check before an old pick-up starts (:mod:`.lock_check`)
        self.start_check = StartCheck(ctx.scripts, ctx.lock_duration)
        #: the queue's :class:`~.pool.budget.PoolMember` when it runs in a pool (set by the loop)
        self.member: Any = None

    def run_slot(self, first: List[Slot]) -> None:
        """A job greenlet: run the job, write its result, and go on with the job that
        fetch-next returned, in the same slot. ``first`` holds the first slot; it is
        emptied, so the greenlet's arguments do not keep finished jobs alive."""
        slot = first.pop()
        current = [slot]
        me = gevent.getcurrent()
        ctx = self.ctx
        active = self.active
        locks = ctx.locks
        process = self._process
        monitor = ctx.hub_monitor
        if monitor is not None:
            monitor.register(me, lambda: self._describe(current[0]))
        try:
            while True:
                slot.greenlet = me
                try:
                    nxt = process(slot)
                except gevent.GreenletExit:
                    raise
                except Exception:
                    log.exception("queue %r: job %s: unexpected error in the worker; the job stays active "
                                  "and a stalled check will recover it", self.queue_name, slot.job.id)
                    nxt = None
                finally:  # the slot is released (as the loop's _release does, inline: once a job)
                    slot.phase = "done"
                    job_id = slot.job.id
                    if active.get(job_id) is slot:
                        del active[job_id]
                    if locks is not None:
                        locks.untrack(job_id, slot.token)
                if nxt is None:
                    break
                streak = slot.streak + 1
                slot = Slot(nxt, slot.token, slot.finish_sent)
                slot.streak = streak
                current[0] = slot
                active[nxt.id] = slot
                if locks is not None:
                    locks.track(nxt.id, slot.token)
        finally:
            if monitor is not None:
                monitor.unregister(me)
            if self.member is not None:  # the slot goes back to the pool
                self.member.end_slot()
            self.hints.kick.set()

    def _describe(self, slot: Slot) -> str:
        return f"job {slot.job.id} ({slot.job.name!r}) of queue {self.queue_name!r}"

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
        if job.repeat_job_key and slot.next_run is None:
            # a scheduler's run (one a finish fetched): its next run is created beside the
            # processor (a round trip that would otherwise delay the start) and before this
            # run settles, so the schedule goes on as when Node's worker creates it first
            # (_settle_next_run)
            slot.next_run = self.next_runs.add(job)
        plugins = self.plugins
        worker = self.worker
        plugins.notify("echomq_job_active", worker=worker, job=job)
        reason = self._unrecoverable_reason(job)
        if reason is not None:
            return self._fail(slot, UnrecoverableError(reason))
        requested = self.ctx.cancel_requests.pop(job.id, None) if self.ctx.cancel_requests else None
        if requested is not None:  # cancelled while its pick-up was on its way here
            job.mark_cancelled(requested[0], final=True)
            return self._fail(slot, JobCancelled(requested[0] or None))
        try:
            fn = self.processor or plugins.get_processor(self.queue_name, job.name)
        except Exception as exc:
            return self._fail(slot, exc)
        if fn is None:
            return self._fail(slot, UnrecoverableError(
                f"no processor for job name {job.name!r} on queue {self.queue_name!r}: pass processor= to the "
                f"Worker, set processor: in the queue's config, or register one with a plugin"))
        if (slot.lock_lost or self.start_check.needed(slot.picked_at)) and not self._still_ours(slot):
            return None
        try:
            with plugins.job_context(worker, job):
                slot.in_processor = True
                try:
                    result = self.runtime.call(fn, job, self._timeout_s)
                finally:
                    slot.in_processor = False
        except (Exception, gevent.Timeout) as exc:
            if self._discarded(slot):
                return None
            return self._fail(slot, exc)
        if self._discarded(slot):
            return None
        self._settle_next_run(slot)
        slot.finish_sent = time.monotonic()  # the next job's pick-up goes with it
        res = self.settler.complete(slot, result, self._can_fetch_next(slot))
        return None if res is NO_NEXT else self._next_from(res, slot.token)

    def _still_ours(self, slot: Slot) -> bool:
        """Before the processor starts, for a pick-up old enough (or a lock the renewal
        found lost): whether the job's lock is still ours, extended now (:mod:`.lock_check`).
        Not ours: the job is left to the worker that owns it, neither run, failed nor moved."""
        job = slot.job
        if not slot.lock_lost:
            try:
                if self.start_check.still_ours(job.id, slot.token):
                    return True
            except Exception as exc:
                # Redis unreachable: the lock cannot be known to be ours. Not started; the
                # job stays active and, its lock no longer renewed, goes back to wait at the
                # stalled check of any worker
                log.warning("queue %r: job %s was picked up %s and its lock could not be checked (%s); "
                            "it is not started here and the stalled check will hand it to a worker",
                            self.queue_name, job.id, describe_age(slot.picked_at), exc)
                slot.lock_lost = True
                return False
            self.settler.mark_lock_lost(slot, "lock gone before the job started")
        log.warning("queue %r: job %s was picked up %s (the process was frozen or starved) and its lock is no "
                    "longer ours: another worker owns it; it is not started here", self.queue_name, job.id,
                    describe_age(slot.picked_at))
        return False

    @staticmethod
    def _settle_next_run(slot: Slot) -> None:
        """Wait until a scheduler run's next run is created, or its call is queued ahead of
        this run's finish on the same connection (it never raises), so that run exists
        before this one is finished, as with Node's worker."""
        if slot.next_run is not None:
            slot.next_run.wait()
            slot.next_run = None

    def _fail(self, slot: Slot, err: BaseException) -> Optional[Job]:
        self._settle_next_run(slot)
        slot.finish_sent = time.monotonic()
        res = self.settler.fail(slot, err, self._can_fetch_next(slot))
        return None if res is NO_NEXT else self._next_from(res, slot.token)

    def _discarded(self, slot: Slot) -> bool:
        if slot.handed_back or slot.lock_lost:
            log.info("queue %r: job %s finished, but %s; its result is not written", self.queue_name,
                     slot.job.id, "it was handed back" if slot.handed_back else "its lock was lost")
            return True
        return False
