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
no longer ours (lock lost, removed, handed back) is left alone. :class:`Settling` is a
part of :class:`~echomq_gevent.worker.Worker` (a mixin).
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
from .slots import CONNECTION_ERRORS, Slot

log = logging.getLogger("echomq_gevent.worker")

__all__ = ["Settling", "RATE_LIMIT_MESSAGE"]

#: The message BullMQ's RateLimitError carries; a processor error with it means "put back".
RATE_LIMIT_MESSAGE = "bullmq:rateLimitExceeded"
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


class Settling:
    """Writing the outcome of a job of a :class:`~echomq_gevent.worker.Worker`."""

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
                self._mark_lock_lost(slot, str(exc))
                raise _Gone() from None
            except (JobNotExist, JobNotInState) as exc:
                log.warning("queue %r: job %s is no longer active here (%s); its result is not written",
                            self.queue_name, slot.job.id, exc)
                raise _Gone() from None
            except AmbiguousCallError as exc:
                outcome = self._read_back(slot, ended_in, exc)
                if outcome == "done":
                    self._unknown_pickups.append(slot.token)  # a next job it may have fetched
                    self._kick.set()
                    return 0
                if outcome == "gone":
                    raise _Gone() from None
                continue  # not run: safe to send again now
            except Exception as exc:
                if not _not_run(exc):
                    raise _Unwritable(exc) from exc
                failures += 1
                if self._force.is_set() or slot.handed_back:
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
                owner = self.scripts.client.get(self.keys.lock(job.id))
                if owner == slot.token:
                    log.warning("queue %r: job %s: the answer of its result write was lost (%s); its lock is "
                                "still ours, so the write did not happen and is sent again",
                                self.queue_name, job.id, cause)
                    return "not run"
                state = job_state(self.scripts, job.id)
            except CONNECTION_ERRORS as exc:
                failures += 1
                if self._force.is_set() or slot.handed_back:
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
        if self._batcher is None:
            return self.scripts.run(call)
        return self._batcher.run(call)

    def _finish_opts(self, job: Job, token: str, target: str) -> Dict[str, Any]:
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
        return {
            "token": token,
            "keepJobs": keep,
            "lockDuration": self.lock_duration,
            "attempts": attempts if isinstance(attempts, int) and not isinstance(attempts, bool) else 0,
            "maxMetricsSize": self._max_metrics,
            "limiter": self.limiter,
            "name": self.name,
        }

    def _packed_finish_opts(self, job: Job, token: str, target: str) -> bytes:
        """:meth:`_finish_opts`, packed once per kind: a job without its own removeOn*
        option, whose attempts is absent or an int, gets the bytes packed for the same
        token, target, attempts and worker settings before (a token stays with its slot
        across fetch-next)."""
        opts = job.opts if isinstance(job.opts, dict) else {}
        attempts = opts.get("attempts")
        if opts.get("removeOnComplete" if target == "completed" else "removeOnFail") is not None or \
                (attempts is not None and type(attempts) is not int):
            return pack(self._finish_opts(job, token, target))
        limiter = self.limiter
        key = (token, target, attempts, self.lock_duration, self.name, self._max_metrics,
               None if limiter is None else tuple(limiter.items()))
        cache = self._packed_finish
        packed = cache.get(key)
        if packed is None:
            if len(cache) >= 256:
                cache.clear()
            packed = cache[key] = pack(self._finish_opts(job, token, target))
        return packed

    def _complete(self, slot: Slot, result: Any) -> Optional[Job]:
        job = slot.job
        try:
            value = compact_json(result)
        except (TypeError, ValueError) as exc:
            return self._fail(slot, InvalidJobDataError(
                f"job {job.id} ({job.name!r}) on queue {self.queue_name!r}: the processor's return value is "
                f"not JSON-serialisable ({exc}); return dicts, lists, strings, numbers, booleans or None"))
        fetch = self._can_fetch_next()
        finished = [0]

        def call() -> Any:
            finished[0] = now_ms()
            return self._finish(self.scripts.move_to_finished_call(
                job.id, finished[0], "returnvalue", value, "completed", fetch,
                self._packed_finish_opts(job, slot.token, "completed")))
        try:
            res = self._settle(slot, call, ("completed", "unknown"))
        except _Gone:
            return None
        except (JobPendingChildren, JobHasFailedChildren) as exc:
            slot.phase = "running"
            return self._fail(slot, exc)
        except _Unwritable as exc:
            slot.phase = "running"
            return self._fail(slot, UnrecoverableError(
                f"job {job.id}: its result could not be written: {_describe(exc.error)}"))
        job.returnvalue = result
        job.finished_on = finished[0]
        job.attempts_made += 1
        self.counters["completed"] += 1
        self.plugins.notify("echomq_job_completed", worker=self, job=job, result=result,
                            duration_ms=(time.monotonic() - slot.started) * 1000.0)
        return self._next_from(res, slot.token) if fetch else None

    def _decide(self, job: Job, err: BaseException) -> Tuple[str, int, Optional[str]]:
        """("retry", delay_ms, None) | ("fail", 0, None) | ("move", 0, queue).

        One rule: the failure policy hook (user plugins first, the built-in BullMQ rule of
        :func:`~echomq_gevent.plugins.builtin.default_failure_decision` last). When no
        implementation answers (a plugin host built without the built-ins, or a policy
        that raised), the built-in rule is applied directly."""
        decision = self.plugins.failure_decision(self, job, err)
        if not isinstance(decision, FailureDecision):
            decision = default_failure_decision(self, job, err)
        if decision.action == "retry":
            return "retry", int(decision.delay or 0), None
        if decision.action == "move":
            return "move", 0, decision.queue
        return "fail", 0, None

    @staticmethod
    def _reason(err: BaseException) -> str:
        return _describe(err)

    def _stacktrace(self, job: Job, err: BaseException) -> List[str]:
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

    def _fail(self, slot: Slot, err: BaseException) -> Optional[Job]:
        job, token = slot.job, slot.token
        now = now_ms()
        if isinstance(err, RateLimitError) or _describe(err) == RATE_LIMIT_MESSAGE:
            try:
                ttl = self._settle(slot, lambda: self.scripts.move_job_from_active_to_wait(job.id, token),
                                   ("waiting", "prioritized"))
            except (_Gone, _Unwritable):
                return None
            if ttl and ttl > 0:
                self._limit_until = max(self._limit_until, now_ms() + int(ttl))
            self._drained = False
            self._kick.set()
            self.plugins.notify("echomq_job_moved", worker=self, job=job, state="wait", error=err)
            return None
        fetch = self._can_fetch_next()
        if isinstance(err, (DelayedError, WaitingChildrenError)) or type(err).__name__ in _MOVED_BY_PROCESSOR:
            slot.phase = "finishing"
            if self._locks is not None:
                self._locks.untrack(job.id, token)
            self.plugins.notify("echomq_job_moved", worker=self, job=job, state=_moved_state(err), error=err)
            if not fetch:
                return None
            try:
                res = self.scripts.move_to_active(token, self.lock_duration, now_ms(), limiter=self.limiter,
                                                  name=self.name)
            except Exception as exc:
                log.warning("queue %r: fetching after job %s moved itself failed: %s", self.queue_name, job.id, exc)
                return None
            return self._next_from(res, token)

        try:
            action, delay, target_queue = self._decide(job, err)
        except Exception:
            log.exception("queue %r: deciding about failed job %s raised; failing it", self.queue_name, job.id)
            action, delay, target_queue = "fail", 0, None
        reason = self._reason(err)
        stack = self._stacktrace(job, err)
        fields = ["failedReason", reason, "stacktrace", compact_json(stack)]
        job.failed_reason = reason
        job.stacktrace = stack
        if action == "retry":
            if delay > 0:
                call = lambda: self.scripts.move_to_delayed(  # noqa: E731
                    job.id, now_ms(), token, delay, skip_attempt=False, fields_to_update=fields, fetch_next=fetch,
                    fetch_opts=Scripts.fetch_opts(token, self.lock_duration, self.limiter, self.name))
            else:
                fetch = False
                call = lambda: self.scripts.retry_job(  # noqa: E731
                    job.id, now_ms(), token, lifo=bool(job.opts.get("lifo")), fields_to_update=fields)
            try:
                res = self._settle(slot, call, ("delayed",) if delay > 0 else ("waiting", "prioritized"))
            except _Gone:
                return None
            except _Unwritable as exc:
                return self._unwritable(slot, exc)
            job.attempts_made += 1
            if delay > 0:
                job.delay = delay
            else:
                self._drained = False
                self._kick.set()
            self.counters["retried"] += 1
            self.plugins.notify("echomq_job_retried", worker=self, job=job, error=err, delay_ms=delay)
            return self._next_from(res, token) if fetch else None

        if action == "move" and target_queue:
            self._copy_to_queue(job, target_queue)

        def call_failed() -> Any:
            return self._finish(self.scripts.move_to_finished_call(
                job.id, now_ms(), "failedReason", reason, "failed", fetch,
                self._packed_finish_opts(job, token, "failed"), fields))
        try:
            res = self._settle(slot, call_failed, ("failed", "unknown"))
        except _Gone:
            return None
        except _Unwritable as exc:
            return self._unwritable(slot, exc)
        job.attempts_made += 1
        job.finished_on = now
        self.counters["failed"] += 1
        self.plugins.notify("echomq_job_failed", worker=self, job=job, error=err)
        return self._next_from(res, token) if fetch else None

    def _unwritable(self, slot: Slot, exc: "_Unwritable") -> None:
        """A failure or retry Redis refused with a script error: the job is left to the
        stalled check (its lock is no longer renewed), which fails it after
        ``max_stalled_count`` stalls with BullMQ's reason."""
        log.error("queue %r: job %s: its failure could not be written (%s); it stays in active and the "
                  "stalled check takes it over", self.queue_name, slot.job.id, _describe(exc.error))
        return None

    def _copy_to_queue(self, job: Job, target: str) -> None:
        """The ``move`` failure decision: add a copy of the job (attempts reset) to ``target``."""
        from ..queue.queue import Queue

        opts = {k: v for k, v in (job.opts or {}).items() if k not in ("repeat", "prevMillis", "timestamp")}
        queue = Queue(target, connection=self.client, prefix=self.prefix)
        try:
            copy = queue.add(job.name, job.data, opts)
            log.info("queue %r: failed job %s copied to queue %r as job %s", self.queue_name, job.id, target,
                     getattr(copy, "id", "?"))
        except Exception as exc:
            log.error("queue %r: could not copy failed job %s to queue %r: %s", self.queue_name, job.id, target, exc)

    # ------------------------------------------------------------------ callbacks
    def _mark_lock_lost(self, slot: Slot, how: str) -> None:
        if slot.lock_lost or slot.handed_back:
            return
        slot.lock_lost = True
        self.counters["lock_lost"] += 1
        log.debug("queue %r: job %s lost its lock: %s", self.queue_name, slot.job.id, how)
        self.plugins.notify("echomq_job_lock_lost", worker=self, job=slot.job)

    def _on_locks_lost(self, lost: List[Tuple[str, str]]) -> None:
        """On the hub: the renewal thread could not renew these (job id, token) locks."""
        for job_id, token in lost:
            slot = self._active.get(job_id)
            if slot is None or slot.token != token or slot.phase != "running":
                continue
            self._mark_lock_lost(slot, "renewal refused")
            # stop the processor too: another worker may take the job over now
            self._cancel_slot(slot, "the job's lock was lost")

    def _on_stalled(self, ids: List[str]) -> None:
        for job_id in ids:
            self.counters["stalled"] += 1
            self.plugins.notify("echomq_job_stalled", worker=self, queue=self.queue_name, job_id=job_id)
