"""Cancelling jobs a worker is running (Node's ``worker.cancelJob`` / ``cancelAllJobs``).

:class:`Canceller` is the part of a :class:`~echomq_gevent.worker.Worker` that does it,
made with the worker's :class:`~echomq_gevent.worker.context.WorkerContext` (it looks the
job up in ``ctx.active`` and asks ``ctx.runtime`` how processors run). A cancelled job's
processor is stopped the way its runtime allows:

* on its greenlet (the default), :class:`~echomq_gevent.errors.JobCancelled` is raised
  inside the processor at its next cooperative switch (I/O, ``gevent.sleep``). The
  exception is thrown from a hub callback that first checks the processor is still
  running, so it can never land in the worker's own code that writes the result;
* offloaded to a thread, ``job.cancelled`` becomes true; the processor polls it (or
  calls ``job.check_cancelled()``) and raises;
* offloaded to a process, the exception is thrown the same way into the job greenlet,
  which waits for the child: the child is killed (and replaced) and the attempt fails
  with ``JobCancelled``.

A processor that raises ``JobCancelled`` fails its attempt like any other error, so the
job is retried if attempts are left (as in Node, where the processor throws on abort),
and ends ``failed`` with ``job cancelled: <reason>`` otherwise. A job whose lock was lost
is cancelled the same way, and its outcome is discarded: another worker owns it now.
"""
from __future__ import annotations

import logging
from typing import Optional

import gevent

from ..errors import EchoMQError, JobCancelled
from .context import WorkerContext
from .slots import Slot

log = logging.getLogger("echomq_gevent.worker")

__all__ = ["Canceller"]


class Canceller:
    """Cancels the running jobs of one :class:`~echomq_gevent.worker.Worker`; no state of
    its own."""

    def __init__(self, ctx: WorkerContext) -> None:
        self.ctx = ctx

    def cancel_job(self, job_id: str, reason: Optional[str] = None) -> None:
        """Cancel the job ``job_id`` this worker is running (see the module notes).

        Raises :class:`~echomq_gevent.errors.EchoMQError` when the job is not running its
        processor on this worker (unknown id, another worker's job, or already being
        settled); nothing is changed then. Call it from any greenlet of the worker's hub.
        """
        if not isinstance(job_id, str) or not job_id:
            raise ValueError(f"cancel_job: job_id must be a non-empty string, got {job_id!r}")
        if reason is not None and not isinstance(reason, str):
            raise ValueError(f"cancel_job: reason must be a string or None, got {reason!r}")
        active = self.ctx.active
        slot = active.get(job_id)
        if slot is None or slot.phase != "running":
            state = "is being settled" if slot is not None else "is not active on this worker"
            raise EchoMQError(f"cannot cancel job {job_id} of queue {self.ctx.queue_name!r}: it {state} "
                              f"({len(active)} job(s) running here)")
        self.cancel_slot(slot, reason)

    def cancel_all_jobs(self, reason: Optional[str] = None) -> int:
        """Cancel every job this worker is running; returns how many were cancelled."""
        if reason is not None and not isinstance(reason, str):
            raise ValueError(f"cancel_all_jobs: reason must be a string or None, got {reason!r}")
        slots = [slot for slot in self.ctx.active.values() if slot.phase == "running"]
        for slot in slots:
            self.cancel_slot(slot, reason)
        return len(slots)

    def cancel_slot(self, slot: Slot, reason: Optional[str], final: bool = False) -> None:
        """Flag the job and, on the greenlet and process runtimes, interrupt its processor
        (also used when the job's lock is lost). ``final``: the job fails for good, no
        retry (a cancellation from anywhere, :mod:`.remote_cancel`)."""
        if slot.job.cancelled:
            if final:  # cancelled here before: now for good too
                slot.job.mark_cancelled(reason, final=True)
            return
        slot.job.mark_cancelled(reason, final=final)
        log.info("queue %r: job %s cancelled%s", self.ctx.queue_name, slot.job.id, f" ({reason})" if reason else "")
        if getattr(self.ctx.runtime, "name", None) not in ("greenlet", "process"):
            return
        exc = JobCancelled(reason)

        def deliver() -> None:
            greenlet = slot.greenlet
            if slot.in_processor and greenlet is not None and not greenlet.dead:
                greenlet.throw(exc)

        gevent.get_hub().loop.run_callback(deliver)
