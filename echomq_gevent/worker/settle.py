"""Settling a job: writing its outcome to Redis, and what the worker does on each kind.

* completed: ``moveToFinished-14`` (target ``completed``, with fetch-next), sent with the
  other finishes of the same hub turn (:class:`~echomq_gevent.worker.slots.FinishBatcher`);
* a processor that moved its job itself (``DelayedError``, ``WaitingChildrenError``):
  nothing to write, the slot picks up the next job;
* rate limited (``RateLimitError``): the job goes back to the front of ``wait``;
* failed: the plugins' ``failure_decision`` or BullMQ's rules (attempts, backoff,
  ``UnrecoverableError``) choose retry (``moveToDelayed-11`` / ``retryJob-11``), fail
  (``moveToFinished-14`` target ``failed``) or move (a copy goes to another queue, then
  fail).

Writes are retried on connection errors while the lock keeps being renewed; a job that is
no longer ours (lock lost, removed, handed back) is left alone.

:class:`Settler` is the part of a :class:`~echomq_gevent.worker.Worker` that does this:
made with the worker's :class:`~echomq_gevent.worker.context.WorkerContext` (scripts,
plugins, settings, counters, the lock renewer, the fetch loop's hints), it owns the
finish batcher and the packed finish options. The job greenlets of the fetch loop
(:mod:`.fetch`) call :meth:`Settler.complete` and :meth:`Settler.fail` and read the next
job out of the answer they return; manual processing (:mod:`.manual`) uses the failure
decision and the finish options.
"""
from __future__ import annotations

import logging
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

import gevent
import redis

from ..plugins.builtin import default_failure_decision
from ..errors import (
    DelayedError,
    InvalidJobDataError,
    JobHasFailedChildren,
    JobLockMismatch,
    JobLockNotExist,
    JobNotExist,
    JobNotInState,
    JobPendingChildren,
    RateLimitError,
    UnrecoverableError,
    WaitingChildrenError,
)
from ..plugins.hookspecs import FailureDecision
from ..queue.job import Job, job_state
from ..protocol.options import compact_json, keep_jobs, wire_text
from ..connection.kept import AmbiguousCallError
from ..protocol.library import pack
from ..protocol.scripts import ScriptCall, Scripts
from .tracebacks import format_failure
from ..protocol.clock import now_ms
from .context import WorkerContext
from .slots import CONNECTION_ERRORS, FinishBatcher, Slot

log = logging.getLogger("echomq_gevent.worker")

__all__ = ["Settler", "RATE_LIMIT_MESSAGE", "NO_NEXT"]

#: The message BullMQ's RateLimitError carries; a processor error with it means "put back".
RATE_LIMIT_MESSAGE = "bullmq:rateLimitExceeded"
#: What :meth:`Settler.complete` and :meth:`Settler.fail` return when there is no answer to
#: read a next job from (nothing was fetched, or the job is no longer ours).
NO_NEXT: Any = object()
#: Names of processor errors that mean "the processor moved the job itself".
_MOVED_BY_PROCESSOR = ("DelayedError", "WaitingChildrenError", "WaitingError")


def _moved_state(err: BaseException) -> str:
    """Where a processor that raised ``err`` has put its job (for ``echomq_job_moved``)."""
    name = type(err).__name__
    if isinstance(err, WaitingChildrenError) or name == "WaitingChildrenError":
        return "waiting-children"
    if name == "WaitingError":
        return "wait"
    return "delayed"


class _Gone(Exception):
    """The job is no longer ours (lock lost, removed, handed back)."""


class _Unwritable(Exception):
    """Redis answered a settle call with an error that is not about the job's state and
    did not say it refused before running (a script error)."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


#: Errors with which Redis refuses a command before it runs (for a script: at its first
#: write, so it wrote nothing): sending it again later is safe.
_REFUSED_FIRST = tuple(getattr(redis.exceptions, name) for name in (
    "OutOfMemoryError", "ReadOnlyError", "TryAgainError", "ClusterDownError", "MasterDownError")
    if hasattr(redis.exceptions, name))
_REFUSED_WORDS = ("command not allowed when used memory", "BUSY ", "LOADING", "MASTERDOWN", "TRYAGAIN",
                  "CLUSTERDOWN", "READONLY", "NOREPLICAS", "You can't write against a read only replica")


def _not_run(exc: BaseException) -> bool:
    """Whether ``exc`` says the call never ran: a connection error before it was sent
    (an ambiguous one is :class:`AmbiguousCallError`, handled apart), or a refusal."""
    if isinstance(exc, CONNECTION_ERRORS) or isinstance(exc, _REFUSED_FIRST):
        return True
    if isinstance(exc, redis.ResponseError):
        text = str(exc)
        return any(word in text for word in _REFUSED_WORDS)
    return False


def _describe(err: BaseException) -> str:
    """An error's message, or its type name, as it can be written to Redis (a lone
    surrogate escaped: :func:`~echomq_gevent.protocol.options.wire_text`); never raises (a
    ``__str__`` may)."""
    try:
        text = wire_text(str(err))
    except Exception:
        text = ""
    return text or type(err).__name__


class Settler:
    """Writes the outcome of each job of one :class:`~echomq_gevent.worker.Worker`.

    Made by the Worker with its context; ``concurrency`` says whether finishes may share a
    round trip (:attr:`batcher`, none with one slot). Runs on the job greenlets of the
    worker's hub. :meth:`complete` and :meth:`fail` return the raw answer of a call that
    fetched the next job (read by the fetch loop), or :data:`NO_NEXT` when there is nothing to read.
    """

    def __init__(self, ctx: WorkerContext, concurrency: int) -> None:
        self.ctx = ctx
        #: the public Worker, as plugin hooks and the failure policy receive it
        self.worker = ctx.worker
        self.scripts = ctx.scripts
        self.plugins = ctx.plugins
        self.counters = ctx.counters
        self.hints = ctx.hints
        self.queue_name = ctx.queue_name
        opts = ctx.options
        #: keepJobs maps of the worker's own removeOn* options (used when a job has none)
        self._keep = {"completed": keep_jobs(opts["remove_on_complete"]),
                      "failed": keep_jobs(opts["remove_on_fail"])}
        #: maxMetricsSize of moveToFinished: "" records no metrics (as Node without opts.metrics)
        self._max_metrics: Any = opts["metrics"]["maxDataPoints"] if opts["metrics"] else ""
        #: ARGV[8] of moveToFinished, packed, by what it is made of (:meth:`packed_finish_opts`)
        self._packed_finish: Dict[Any, bytes] = {}
        #: the finishes of one hub turn share a round trip; with one slot nothing can
        #: finish together: called directly
        self.batcher: Optional[FinishBatcher] = None
        #: the batcher is a pool's, shared by its queues (:meth:`join_pool`)
        self._pooled = False
        self.concurrency_changed(concurrency)

    def join_pool(self, budget: Any) -> None:
        """The worker runs in pool ``budget``: its finishes go with those of the pool's other
        queues (the pool's shared batcher, when there is one for this worker's client)."""
        shared = FinishBatcher.for_pool(budget, self.scripts)
        if shared is not None:
            self.batcher = shared
            self._pooled = True

    def concurrency_changed(self, concurrency: int) -> None:
        """The worker's concurrency is now ``concurrency``: batch finishes above one slot
        (a pooled worker's cap does not change the pool's shared batcher)."""
        if self._pooled:
            return
        if self.batcher is None and concurrency > 1:
            self.batcher = FinishBatcher(self.scripts, concurrency)
        if self.batcher is not None:
            self.batcher.concurrency = concurrency

    def _settle(self, slot: Slot, call: Callable[[], Any], ended_in: Tuple[str, ...]) -> Any:
        """Run a state-changing script for the slot's job and return its answer.

        * Not run at all (a connection error before it was sent, or Redis refusing it
          before it wrote anything: OOM at ``maxmemory``, BUSY, LOADING, READONLY,
          MASTERDOWN, TRYAGAIN): sent again after a growing pause, while the lock keeps
          being renewed.
        * Maybe run (the connection failed after it was sent): never sent blindly; the
          state is read back (:meth:`_read_back`). Still our lock: it did not run, send
          it again. The job in one of ``ended_in`` (its target state): it ran; the answer
          is taken as 0 (nothing fetched next) and a next job it may have fetched is
          found by its lock and started. Anything else: the job is no longer ours.
        * The lock is not ours, or the job is gone: raises _Gone.
        * Any other error (a script error): raises _Unwritable, never more.
        """
        slot.phase = "finishing"
        failures = 0
        while True:
            try:
                return call()
            except (JobLockMismatch, JobLockNotExist) as exc:
                self.mark_lock_lost(slot, str(exc))
                raise _Gone() from None
            except (JobNotExist, JobNotInState) as exc:
                log.warning("queue %r: job %s is no longer active here (%s); its result is not written",
                            self.queue_name, slot.job.id, exc)
                raise _Gone() from None
            except AmbiguousCallError as exc:
                outcome = self._read_back(slot, ended_in, exc)
                if outcome == "done":
                    self.hints.lost_answer(slot.token)  # a next job it may have fetched
                    return 0
                if outcome == "gone":
                    raise _Gone() from None
                continue  # not run: safe to send again now
            except Exception as exc:
                if not _not_run(exc):
                    raise _Unwritable(exc) from exc
                failures += 1
                if self.ctx.force.is_set() or slot.handed_back:
                    log.error("queue %r: job %s: result not written (%s); the stalled check will recover "
                              "the job", self.queue_name, slot.job.id, exc)
                    raise _Gone() from None
                delay = min(5.0, 0.2 * (2 ** min(failures - 1, 10)))
                log.warning("queue %r: job %s: cannot write the result (%s); retrying in %.1f s",
                            self.queue_name, slot.job.id, exc, delay)
                gevent.sleep(delay)

    def _read_back(self, slot: Slot, ended_in: Tuple[str, ...], cause: BaseException) -> str:
        """After a settle call whose answer was lost: ``"not run"`` (our lock is still there:
        every settle script deletes it when it runs), ``"done"`` (the job is in one of
        ``ended_in``) or ``"gone"``. Retries its own reads on connection errors until they
        answer, or until the job is handed back or the close is forced."""
        job = slot.job
        failures = 0
        while True:
            try:
                owner = self.scripts.client.get(self.ctx.keys.lock(job.id))
                if owner == slot.token:
                    log.warning("queue %r: job %s: the answer of its result write was lost (%s); its lock is "
                                "still ours, so the write did not happen and is sent again",
                                self.queue_name, job.id, cause)
                    return "not run"
                state = job_state(self.scripts, job.id)
            except CONNECTION_ERRORS as exc:
                failures += 1
                if self.ctx.force.is_set() or slot.handed_back:
                    return "gone"
                delay = min(5.0, 0.2 * (2 ** min(failures - 1, 10)))
                log.warning("queue %r: job %s: cannot read back its state (%s); retrying in %.1f s",
                            self.queue_name, job.id, exc, delay)
                gevent.sleep(delay)
                continue
            if state in ended_in:
                log.warning("queue %r: job %s: the answer of its result write was lost (%s); read back: it is "
                            "%s, the write happened", self.queue_name, job.id, cause, state)
                return "done"
            log.warning("queue %r: job %s: the answer of its result write was lost (%s) and its lock is gone; "
                        "it is %s, no longer ours", self.queue_name, job.id, cause, state)
            return "gone"

    def _finish(self, call: ScriptCall) -> Any:
        """Run a ``moveToFinished`` call, with the other finishes of this hub turn when the
        worker has more than one slot; returns the checked answer."""
        batcher = self.batcher
        if batcher is None:
            return self.scripts.run(call)
        return batcher.run(call)

    def finish_opts(self, job: Job, token: str, target: str) -> Dict[str, Any]:
        """ARGV[8] of moveToFinished. Never raises: options were checked when the job was
        loaded, and a processor that put garbage into ``job.opts`` since gets the
        worker's defaults."""
        opts = job.opts if isinstance(job.opts, dict) else {}
        value = opts.get("removeOnComplete" if target == "completed" else "removeOnFail")
        try:
            keep = self._keep[target] if value is None else keep_jobs(value)
        except Exception:
            keep = self._keep[target]
        attempts = opts.get("attempts")
        ctx = self.ctx
        return {
            "token": token,
            "keepJobs": keep,
            "lockDuration": ctx.lock_duration,
            "attempts": attempts if isinstance(attempts, int) and not isinstance(attempts, bool) else 0,
            "maxMetricsSize": self._max_metrics,
            "limiter": ctx.limiter,
            "name": ctx.name,
        }

    def packed_finish_opts(self, job: Job, token: str, target: str) -> bytes:
        """:meth:`finish_opts`, packed once per kind: a job without its own removeOn*
        option, whose attempts is absent or an int, gets the bytes packed for the same
        token, target, attempts and worker settings before (a token stays with its slot
        across fetch-next)."""
        opts = job.opts if isinstance(job.opts, dict) else {}
        attempts = opts.get("attempts")
        if opts.get("removeOnComplete" if target == "completed" else "removeOnFail") is not None or \
                (attempts is not None and type(attempts) is not int):
            return pack(self.finish_opts(job, token, target))
        ctx = self.ctx
        limiter = ctx.limiter
        key = (token, target, attempts, ctx.lock_duration, ctx.name, self._max_metrics,
               None if limiter is None else tuple(limiter.items()))
        cache = self._packed_finish
        packed = cache.get(key)
        if packed is None:
            if len(cache) >= 256:
                cache.clear()
            packed = cache[key] = pack(self.finish_opts(job, token, target))
        return packed

    def complete(self, slot: Slot, result: Any, fetch: bool) -> Any:
        """Write ``result`` as the slot's job's return value (``moveToFinished``, with
        fetch-next when ``fetch``). A result that cannot be written fails the job instead
        (:meth:`fail`). Returns the answer to read the next job from, or :data:`NO_NEXT`."""
        job = slot.job
        try:
            value = compact_json(result)
        except (TypeError, ValueError) as exc:
            return self.fail(slot, InvalidJobDataError(
                f"job {job.id} ({job.name!r}) on queue {self.queue_name!r}: the processor's return value is "
                f"not JSON-serialisable ({exc}); return dicts, lists, strings, numbers, booleans or None"), fetch)
        finished = [0]

        def call() -> Any:
            finished[0] = now_ms()
            return self._finish(self.scripts.move_to_finished_call(
                job.id, finished[0], "returnvalue", value, "completed", fetch,
                self.packed_finish_opts(job, slot.token, "completed")))
        try:
            res = self._settle(slot, call, ("completed", "unknown"))
        except _Gone:
            return NO_NEXT
        except (JobPendingChildren, JobHasFailedChildren) as exc:
            slot.phase = "running"
            return self.fail(slot, exc, fetch)
        except _Unwritable as exc:
            slot.phase = "running"
            return self.fail(slot, UnrecoverableError(
                f"job {job.id}: its result could not be written: {_describe(exc.error)}"), fetch)
        job.returnvalue = result
        job.finished_on = finished[0]
        job.attempts_made += 1
        self.counters["completed"] += 1
        self.plugins.notify("echomq_job_completed", worker=self.worker, job=job, result=result,
                            duration_ms=(time.monotonic() - slot.started) * 1000.0)
        return res if fetch else NO_NEXT

    def decide(self, job: Job, err: BaseException) -> Tuple[str, int, Optional[str]]:
        """("retry", delay_ms, None) | ("fail", 0, None) | ("move", 0, queue).

        One rule: the failure policy hook (user plugins first, the built-in BullMQ rule of
        :func:`~echomq_gevent.plugins.builtin.default_failure_decision` last). When no
        implementation answers (a plugin host built without the built-ins, or a policy
        that raised), the built-in rule is applied directly."""
        worker = self.worker
        if job.cancel_is_final:  # cancelled from anywhere (Queue.cancel_job): never retried
            return "fail", 0, None
        decision = self.plugins.failure_decision(worker, job, err)
        if not isinstance(decision, FailureDecision):
            decision = default_failure_decision(worker, job, err)
        if decision.action == "retry":
            return "retry", int(decision.delay or 0), None
        if decision.action == "move":
            return "move", 0, decision.queue
        return "fail", 0, None

    @staticmethod
    def reason(err: BaseException) -> str:
        """The failed reason written for ``err``. Never raises."""
        return _describe(err)

    def stacktrace(self, job: Job, err: BaseException) -> List[str]:
        """The stored stack traces plus this one, cut to ``stackTraceLimit``. Never raises."""
        stack = [s for s in (job.stacktrace if isinstance(job.stacktrace, list) else []) if isinstance(s, str)]
        try:
            stack.append(format_failure(err))
        except Exception:
            stack.append(f"{type(err).__name__}: {_describe(err)} (its traceback could not be formatted)")
        limit = (job.opts if isinstance(job.opts, dict) else {}).get("stackTraceLimit")
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 0:
            return stack
        if limit == 0:
            return []
        return stack[-limit:]

    def fail(self, slot: Slot, err: BaseException, fetch: bool) -> Any:
        """Settle the slot's job after its processor raised ``err``: put back (rate
        limited), nothing (it moved itself), retry, fail or move, as :meth:`decide` says;
        with ``fetch`` the call also takes the next job. Returns the answer to read the
        next job from, or :data:`NO_NEXT`."""
        job, token = slot.job, slot.token
        ctx = self.ctx
        now = now_ms()
        if isinstance(err, RateLimitError) or _describe(err) == RATE_LIMIT_MESSAGE:
            try:
                ttl = self._settle(slot, lambda: self.scripts.move_job_from_active_to_wait(job.id, token),
                                   ("waiting", "prioritized"))
            except (_Gone, _Unwritable):
                return NO_NEXT
            if ttl and ttl > 0:
                self.hints.limit(now_ms() + int(ttl))
            self.hints.put_back()
            self.plugins.notify("echomq_job_moved", worker=self.worker, job=job, state="wait", error=err)
            return NO_NEXT
        if isinstance(err, (DelayedError, WaitingChildrenError)) or type(err).__name__ in _MOVED_BY_PROCESSOR:
            slot.phase = "finishing"
            if ctx.locks is not None:
                ctx.locks.untrack(job.id, token)
            self.plugins.notify("echomq_job_moved", worker=self.worker, job=job, state=_moved_state(err), error=err)
            if not fetch:
                return NO_NEXT
            try:
                return self.scripts.move_to_active(token, ctx.lock_duration, now_ms(), limiter=ctx.limiter,
                                                   name=ctx.name)
            except Exception as exc:
                log.warning("queue %r: fetching after job %s moved itself failed: %s", self.queue_name, job.id, exc)
                return NO_NEXT

        try:
            action, delay, target_queue = self.decide(job, err)
        except Exception:
            log.exception("queue %r: deciding about failed job %s raised; failing it", self.queue_name, job.id)
            action, delay, target_queue = "fail", 0, None
        reason = self.reason(err)
        stack = self.stacktrace(job, err)
        fields = ["failedReason", reason, "stacktrace", compact_json(stack)]
        job.failed_reason = reason
        job.stacktrace = stack
        if action == "retry":
            if delay > 0:
                call = lambda: self.scripts.move_to_delayed(  # noqa: E731
                    job.id, now_ms(), token, delay, skip_attempt=False, fields_to_update=fields, fetch_next=fetch,
                    fetch_opts=Scripts.fetch_opts(token, ctx.lock_duration, ctx.limiter, ctx.name))
            else:
                fetch = False
                call = lambda: self.scripts.retry_job(  # noqa: E731
                    job.id, now_ms(), token, lifo=bool(job.opts.get("lifo")), fields_to_update=fields)
            try:
                res = self._settle(slot, call, ("delayed",) if delay > 0 else ("waiting", "prioritized"))
            except _Gone:
                return NO_NEXT
            except _Unwritable as exc:
                return self._unwritable(slot, exc)
            job.attempts_made += 1
            if delay > 0:
                job.delay = delay
            else:
                self.hints.put_back()
            self.counters["retried"] += 1
            self.plugins.notify("echomq_job_retried", worker=self.worker, job=job, error=err, delay_ms=delay)
            return res if fetch else NO_NEXT

        if action == "move" and target_queue:
            self.copy_to_queue(job, target_queue)

        def call_failed() -> Any:
            return self._finish(self.scripts.move_to_finished_call(
                job.id, now_ms(), "failedReason", reason, "failed", fetch,
                self.packed_finish_opts(job, token, "failed"), fields))
        try:
            res = self._settle(slot, call_failed, ("failed", "unknown"))
        except _Gone:
            return NO_NEXT
        except _Unwritable as exc:
            return self._unwritable(slot, exc)
        job.attempts_made += 1
        job.finished_on = now
        self.counters["failed"] += 1
        self.plugins.notify("echomq_job_failed", worker=self.worker, job=job, error=err)
        return res if fetch else NO_NEXT

    def _unwritable(self, slot: Slot, exc: "_Unwritable") -> Any:
        """A failure or retry Redis refused with a script error: the job is left to the
        stalled check (its lock is no longer renewed), which fails it after
        ``max_stalled_count`` stalls with BullMQ's reason. Returns :data:`NO_NEXT`."""
        log.error("queue %r: job %s: its failure could not be written (%s); it stays in active and the "
                  "stalled check takes it over", self.queue_name, slot.job.id, _describe(exc.error))
        return NO_NEXT

    def copy_to_queue(self, job: Job, target: str) -> None:
        """The ``move`` failure decision: add a copy of the job (attempts reset) to ``target``."""
        from ..queue.queue import Queue

        opts = {k: v for k, v in (job.opts or {}).items() if k not in ("repeat", "prevMillis", "timestamp")}
        queue = Queue(target, connection=self.ctx.client, prefix=self.ctx.prefix)
        try:
            copy = queue.add(job.name, job.data, opts)
            log.info("queue %r: failed job %s copied to queue %r as job %s", self.queue_name, job.id, target,
                     getattr(copy, "id", "?"))
        except Exception as exc:
            log.error("queue %r: could not copy failed job %s to queue %r: %s", self.queue_name, job.id, target, exc)

    def hand_back(self, slot: Slot) -> None:
        """Put an unfinished job back at the front of wait (``moveJobFromActiveToWait``):
        fetched as a close or a pause began, or still running when the close's wait ends."""
        slot.handed_back = True
        job = slot.job
        ctx = self.ctx
        try:
            self.scripts.move_job_from_active_to_wait(job.id, slot.token)
        except (JobLockMismatch, JobLockNotExist):
            log.warning("queue %r: job %s was not handed back: its lock is no longer ours", self.queue_name, job.id)
        except Exception as exc:
            log.error("queue %r: could not hand job %s back (%s); it stays active and the stalled check "
                      "of any worker will move it back to wait", self.queue_name, job.id, exc)
        else:
            self.counters["handed_back"] += 1
            self.plugins.notify("echomq_job_handed_back", worker=self.worker, job=job)
        finally:
            if ctx.locks is not None:
                ctx.locks.untrack(job.id, slot.token)

    def mark_lock_lost(self, slot: Slot, how: str) -> None:
        """The slot's job is no longer ours (its lock was refused): count it, tell the
        plugins once; its outcome will not be written."""
        if slot.lock_lost or slot.handed_back:
            return
        slot.lock_lost = True
        self.counters["lock_lost"] += 1
        log.debug("queue %r: job %s lost its lock: %s", self.queue_name, slot.job.id, how)
        self.plugins.notify("echomq_job_lock_lost", worker=self.worker, job=slot.job)
