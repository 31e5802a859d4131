"""Processing jobs by hand (Node's ``worker.getNextJob`` with ``job.moveToCompleted`` /
``moveToFailed`` / ``extendLock``).

:class:`ManualProcessing` is the part of a :class:`~echomq_gevent.worker.Worker` that
does it, made with the worker's :class:`~echomq_gevent.worker.context.WorkerContext` and
its :class:`~echomq_gevent.worker.settle.Settler` (the finish options and the failure
decision); it owns the marker connection of its waits. A worker
used this way is never run (no fetch loop, no lock renewal, no stall check of its own):
the caller takes a job with :meth:`ManualProcessing.get_next_job` under a token of its
choosing, keeps its lock alive with ``job.extend_lock(token, ms)`` and settles it with
``job.move_to_completed`` or ``job.move_to_failed``, which apply the worker's options
(keep-jobs, metrics, limiter, name) and BullMQ's attempt and backoff rules exactly as the
worker's own settling does. Every call names the token; a token that does not hold the
job's lock is refused by the script (``JobLockMismatch``) and nothing changes.
"""
from __future__ import annotations

import logging
from typing import Any, Optional

import gevent

from ..connection.clients import clone_client
from ..errors import EchoMQError, ScriptError, WorkerStateError
from ..queue.explain import explain
from ..queue.job import Job
from ..protocol.options import compact_json
from ..connection.blocking import MAX_BLOCK_S, MIN_BLOCK_S, sockets_patched
from ..protocol.scripts import Scripts
from ..protocol.clock import now_ms
from .context import WorkerContext
from .settle import Settler

log = logging.getLogger("echomq_gevent.worker")

__all__ = ["ManualProcessing"]


def _check_token(token: Any, what: str) -> str:
    if not isinstance(token, str) or not token:
        raise ValueError(f"{what}: token must be a non-empty string (the one the job was taken with), got {token!r}")
    return token


class ManualProcessing:
    """Processing by hand with one :class:`~echomq_gevent.worker.Worker` that is never run."""

    def __init__(self, ctx: WorkerContext, settler: Settler) -> None:
        self.ctx = ctx
        self.settler = settler
        self.scripts = ctx.scripts
        #: the marker connection of :meth:`get_next_job`'s waits, made on first use
        self._blocking: Any = None

    def get_next_job(self, token: str, block: bool = True, timeout: Optional[float] = None) -> Optional[Job]:
        """Take the next job under ``token`` (moveToActive: lock, ``active`` event), or
        ``None`` when there is none. With ``block`` an empty queue is waited on (the
        marker, as the fetch loop does) for up to ``timeout`` seconds (default
        ``drain_delay``, at most 10 s), then asked once more.

        The job's lock lasts ``lock_duration`` ms and is **not** renewed: call
        ``job.extend_lock(token, ms)`` while working on it. Raises EchoMQError on a closed
        or running worker (a running worker fetches by itself).
        """
        _check_token(token, "get_next_job")
        ctx = self.ctx
        if ctx.closing:
            raise WorkerStateError(f"get_next_job: the worker of queue {ctx.queue_name!r} is closed; "
                                   f"create a new Worker")
        if ctx.running:
            raise WorkerStateError(f"get_next_job: the worker of queue {ctx.queue_name!r} is running its own fetch "
                                   f"loop; manual processing needs a worker that is never run()")
        job = self._take(token)
        if job is None and block:
            wait_s = ctx.drain_delay if timeout is None else float(timeout)
            self._wait_marker(min(max(wait_s, MIN_BLOCK_S), MAX_BLOCK_S))
            if ctx.closing:
                return None
            job = self._take(token)
        return job

    def _take(self, token: str) -> Optional[Job]:
        ctx = self.ctx
        res = self.scripts.move_to_active(token, ctx.lock_duration, now_ms(), limiter=ctx.limiter, name=ctx.name)
        return self._manual_job(res, token)

    def _manual_job(self, res: Any, token: str) -> Optional[Job]:
        if not res or not res[0] or not res[1]:
            return None
        job = Job.from_flat(self.scripts, str(res[1]), res[0])
        job.token = token
        job.attach_worker(self.ctx.worker)
        return job

    def _wait_marker(self, timeout: float) -> None:
        if self._blocking is None:
            self._blocking = clone_client(self.ctx.client, max_connections=2, socket_timeout=MAX_BLOCK_S + 5)
        blocking, marker = self._blocking, self.ctx.keys.marker
        pop = lambda: blocking.bzpopmin(marker, timeout)  # noqa: E731
        if sockets_patched():
            pop()
        else:  # keep the hub free in a process that is not monkey-patched
            gevent.get_hub().threadpool.apply(pop)

    def close(self) -> None:
        """Called by every ``Worker.close()``: drop the marker connection of manual processing."""
        if self._blocking is not None:
            try:
                self._blocking.close()
            except Exception:  # pragma: no cover - best effort
                pass
            self._blocking = None

    # -- settling a job taken by hand (called through Job) --------------------------------
    def _explained(self, job: Job, exc: ScriptError, action: str) -> ScriptError:
        return explain(job, exc, action)

    def manual_complete(self, job: Job, returnvalue: Any, token: str, fetch_next: bool) -> Optional[Job]:
        """``job.move_to_completed``: write the result under ``token``; with ``fetch_next``
        take the next job in the same call and return it."""
        _check_token(token, "move_to_completed")
        try:
            value = compact_json(returnvalue)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"move_to_completed: job {job.id}'s returnvalue is not JSON-serialisable ({exc})") from None
        finished = now_ms()
        try:
            res = self.scripts.move_to_finished(job.id, finished, "returnvalue", value, "completed", fetch_next,
                                                self.settler.finish_opts(job, token, "completed"))
        except ScriptError as exc:
            raise self._explained(job, exc, "complete it") from None
        job.returnvalue, job.finished_on = returnvalue, finished
        job.attempts_made += 1
        return self._manual_job(res, token) if fetch_next else None

    def manual_fail(self, job: Job, err: BaseException, token: str, fetch_next: bool) -> Optional[Job]:
        """``job.move_to_failed``: the worker's failure rules (attempts, backoff,
        UnrecoverableError, failure-policy plugins): retried (delayed or at once) or
        failed for good. With ``fetch_next`` returns the next job when the script took one."""
        _check_token(token, "move_to_failed")
        if not isinstance(err, BaseException):
            err = EchoMQError(str(err))
        settler = self.settler
        action, delay, target_queue = settler.decide(job, err)
        reason = settler.reason(err)
        stack = settler.stacktrace(job, err)
        fields = ["failedReason", reason, "stacktrace", compact_json(stack)]
        try:
            if action == "retry" and delay > 0:
                res = self.scripts.move_to_delayed(
                    job.id, now_ms(), token, delay, skip_attempt=False, fields_to_update=fields,
                    fetch_next=fetch_next, fetch_opts=Scripts.fetch_opts(token, self.ctx.lock_duration, self.ctx.limiter,
                                                                         self.ctx.name))
            elif action == "retry":
                self.scripts.retry_job(job.id, now_ms(), token, lifo=bool(job.opts.get("lifo")),
                                       fields_to_update=fields)
                res = None
            else:
                if action == "move" and target_queue:
                    settler.copy_to_queue(job, target_queue)
                res = self.scripts.move_to_finished(job.id, now_ms(), "failedReason", reason, "failed", fetch_next,
                                                    self.settler.finish_opts(job, token, "failed"), fields)
        except ScriptError as exc:
            raise self._explained(job, exc, "fail it") from None
        job.failed_reason, job.stacktrace = reason, stack
        job.attempts_made += 1
        return self._manual_job(res, token) if fetch_next else None
