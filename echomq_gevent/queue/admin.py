"""Queue control and bulk admin: pause and resume, remove, drain, obliterate, clean,
retry and promote in bulk, global concurrency and rate limits (Node's names, snake_case).

:class:`QueueAdmin` is a part of :class:`~echomq_gevent.queue.queue.Queue`, made with the
queue's keys, client and scripts.
"""
from __future__ import annotations

from typing import Any, Dict, List, NamedTuple, Optional

from ..protocol.clock import now_ms
from ..errors import EchoMQError, close_matches
from ..protocol.keys import QueueKeys
from ..protocol.scripts import Scripts

__all__ = ["QueueAdmin", "CLEAN_TYPES", "CancelOutcome", "CANCEL_REASON_MAX"]

#: Longest cancellation reason accepted (characters); a longer one is refused unwritten.
CANCEL_REASON_MAX = 1000


class CancelOutcome(NamedTuple):
    """What :meth:`Queue.cancel_job <echomq_gevent.queue.queue.Queue.cancel_job>` did.

    ``outcome``: ``"cancelled"`` (it was waiting, delayed, prioritized or waiting for
    children and is now ``failed``; ``state`` is where it was), ``"accepted"`` (it is
    active: marked and signalled, the worker running it stops it and fails it),
    ``"finished"`` (already ``completed``/``failed``, in ``state``; nothing changed),
    ``"missing"`` (no such job; nothing written) or ``"unknown"`` (the job is in no
    state; nothing written)."""

    job_id: str
    outcome: str
    state: str

    @property
    def changed(self) -> bool:
        """True when the call cancelled the job or signalled its worker."""
        return self.outcome in ("cancelled", "accepted")

    def describe(self) -> str:
        """One line for people (the command and the dashboard print it)."""
        return {
            "cancelled": f"job {self.job_id} was {self.state}: it is now failed and will not run",
            "accepted": f"job {self.job_id} is active: its worker was told to stop it (it ends failed)",
            "finished": f"job {self.job_id} is already {self.state}: nothing changed",
            "missing": f"job {self.job_id} does not exist: nothing changed",
        }.get(self.outcome, f"job {self.job_id} is in no known state: nothing changed")


def check_cancel_reason(reason: Any) -> str:
    """The reason as the script takes it ("" for None); ValueError for anything but text
    of at most :data:`CANCEL_REASON_MAX` characters."""
    if reason is None:
        return ""
    if not isinstance(reason, str):
        raise ValueError(f"cancel_job: reason must be text or None, got {type(reason).__name__} {reason!r:.80}")
    if len(reason) > CANCEL_REASON_MAX:
        raise ValueError(f"cancel_job: reason is {len(reason)} characters long; at most {CANCEL_REASON_MAX} "
                         f"are accepted (it becomes the job's failedReason)")
    return reason

#: What ``Queue.clean`` accepts (as Node's ``queue.clean``; ``waiting`` means ``wait``).
CLEAN_TYPES = ("completed", "failed", "delayed", "wait", "waiting", "active", "paused", "prioritized")
#: Most jobs one ``cleanJobsInSet-3`` call may delete. Node asks for 10,000, which holds
#: Redis for about 100 ms a call (the scale bench, bench/results/scale.md); 1,000 keeps
#: each call near 10 ms, and the same jobs go.
_CLEAN_BATCH = 1000
#: Most jobs one ``drain-5`` call deletes from each key (Node drains in one call, seconds
#: on a million jobs).
_DRAIN_BATCH = 1000
#: Node's Number.MAX_SAFE_INTEGER: the limiter value of a manual rate limit.
_MAX_SAFE_INTEGER = 9007199254740991


class QueueAdmin:
    """Control and bulk admin calls of one queue. Made by
    :class:`~echomq_gevent.queue.queue.Queue`, whose methods of the same names call these."""

    def __init__(self, keys: QueueKeys, client: Any, scripts: Scripts) -> None:
        self.keys = keys
        self.client = client
        self.scripts = scripts

    # -- queue control -----------------------------------------------------------------
    def pause(self) -> None:
        """Pause the queue for every worker (Node's too): no job is fetched until resume."""
        self.scripts.pause(True)

    def resume(self) -> None:
        """Resume a paused queue; moves any v5 ``paused`` list back into ``wait``."""
        emit = True
        while self.scripts.pause(False, emit=emit):
            emit = False

    def is_paused(self) -> bool:
        return bool(self.client.hexists(self.keys.meta, "paused"))

    def cancel_job(self, job_id: str, reason: Optional[str] = None) -> CancelOutcome:
        """Stop a job from anywhere, in one atomic call (``cancelJob-9``).

        Waiting, delayed, prioritized or waiting for children: it ends ``failed`` with
        ``job cancelled: <reason>`` now and never runs (events, ``removeOnFail`` and the
        parent's failure policy as for any failure). Active: it is marked and the
        queue's workers are signalled; the one running it stops it and fails it without
        retry (a worker that picks it up later fails it without running it). Completed
        or failed: nothing changes. Returns a :class:`CancelOutcome`. ``reason`` must be
        text of at most 1,000 characters (ValueError otherwise, nothing written)."""
        if not isinstance(job_id, str) or not job_id:
            raise ValueError(f"cancel_job: job_id must be a non-empty string, got {job_id!r}")
        text = check_cancel_reason(reason)
        outcome, state = self.scripts.admin.cancel_job(job_id, text, now_ms())
        return CancelOutcome(job_id, outcome, state)

    def promote_job(self, job_id: str) -> None:
        """Move a delayed job to wait (or prioritized) now. JobNotInState if it is not delayed."""
        self.scripts.promote(str(job_id))

    def remove_job(self, job_id: str, remove_children: bool = True) -> int:
        """Remove a job and its sub-keys: 1 removed, 0 not removed because a worker holds
        its lock. Raises JobBelongsToJobScheduler for a scheduler's next job."""
        return int(self.scripts.remove_job(str(job_id), remove_children))

    def drain(self, delayed: bool = False) -> None:
        """Remove every waiting and prioritized job (and delayed ones with ``delayed=True``).
        Active, completed and failed jobs stay. Done in calls of at most 1,000 jobs per
        key, so Redis serves other clients between them; a job added meanwhile may go too."""
        while self.scripts.admin.drain(delayed, _DRAIN_BATCH):
            pass

    def obliterate(self, force: bool = False, count: int = 1000) -> None:
        """Delete the queue and all its jobs. Pauses it first; refuses while jobs are
        active unless ``force``."""
        self.pause()
        while True:
            res = self.scripts.admin.obliterate(count, force)
            if res == -1:
                raise EchoMQError(f"cannot obliterate queue {self.keys.queue_key!r}: it is not paused "
                                  f"(was it resumed meanwhile?); pause it and try again")
            if res == -2:
                raise EchoMQError(f"cannot obliterate queue {self.keys.queue_key!r}: it has active jobs; "
                                  f"wait for them or pass force=True")
            if not res:
                return

    # -- bulk admin (Node's clean, retryJobs, promoteJobs) -------------------------------
    @staticmethod
    def _check_count(label: str, value: Any, low: int) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"{label} must be an integer >= {low}, got {value!r}")

    def clean(self, grace_ms: int, limit: int = 0, type: str = "completed") -> List[str]:
        """Delete jobs of one state older than ``grace_ms`` milliseconds; returns their ids.

        As Node's ``queue.clean(grace, limit, type)``: ``type`` is one of
        :data:`CLEAN_TYPES` (default ``completed``); finished jobs are aged by their
        finish time, others by ``finishedOn``/``processedOn``/``timestamp``. ``limit`` caps
        how many are deleted (0 = all); the work is done in calls of at most 1,000 jobs
        until the limit is reached or a call finds fewer. Active jobs holding a lock and a
        job scheduler's upcoming job are never deleted. Each call writes one ``cleaned``
        event. Blocking; call it from any greenlet.
        """
        self._check_count("clean: grace_ms", grace_ms, 0)
        self._check_count("clean: limit", limit, 0)
        if type not in CLEAN_TYPES:
            near = close_matches(str(type), CLEAN_TYPES)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            raise ValueError(f"clean: cannot clean jobs of type {type!r}{hint}; "
                             f"use one of {', '.join(CLEAN_TYPES)}")
        state = "wait" if type == "waiting" else type
        cutoff = now_ms() - grace_ms
        deleted: List[str] = []
        while not limit or len(deleted) < limit:
            # Node asks min(10000, limit) every call, which can pass a limit above 10000;
            # asking only for what is left keeps the limit exact (same calls below it).
            per_call = min(_CLEAN_BATCH, limit - len(deleted)) if limit else _CLEAN_BATCH
            batch = self.scripts.admin.clean_jobs_in_set(state, cutoff, per_call)
            deleted.extend(batch)
            if len(batch) < per_call:
                break
        return deleted

    def retry_jobs(self, count: int = 1000, state: str = "failed",
                   timestamp: Optional[int] = None) -> None:
        """Move every ``failed`` (or ``completed``) job back to wait, ``count`` per call.

        As Node's ``queue.retryJobs({count, state, timestamp})``: only jobs that finished
        at or before ``timestamp`` (ms, default now) are taken, so jobs that fail again
        while this runs are not retried twice. Each job loses its result and finish
        times, keeps its attempts, goes to wait (or prioritized) with a ``waiting`` event.
        Loops until no job is left.
        """
        self._check_count("retry_jobs: count", count, 1)
        if state not in ("failed", "completed"):
            raise ValueError(f"retry_jobs: state must be 'failed' or 'completed', got {state!r}")
        if timestamp is None:
            timestamp = now_ms()
        self._check_count("retry_jobs: timestamp", timestamp, 0)
        while self.scripts.admin.move_jobs_to_wait(state, count, timestamp):
            pass

    def promote_jobs(self, count: int = 1000) -> None:
        """Make every delayed job ready now (Node's ``queue.promoteJobs({count})``),
        ``count`` per call; their ``delay`` becomes 0 and each gets a ``waiting`` event."""
        self._check_count("promote_jobs: count", count, 1)
        while self.scripts.admin.move_jobs_to_wait("delayed", count):
            pass

    def set_global_concurrency(self, concurrency: int) -> None:
        """At most ``concurrency`` jobs of this queue active at once, across all workers."""
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise ValueError(f"global concurrency must be an integer >= 1, got {concurrency!r}")
        self.client.hset(self.keys.meta, "concurrency", concurrency)

    def remove_global_concurrency(self) -> None:
        self.client.hdel(self.keys.meta, "concurrency")

    def set_global_rate_limit(self, max_jobs: int, duration_ms: int) -> None:
        """At most ``max_jobs`` job starts per ``duration_ms`` across all workers."""
        for label, v in (("max", max_jobs), ("duration", duration_ms)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"global rate limit {label} must be an integer >= 1, got {v!r}")
        self.client.hset(self.keys.meta, mapping={"max": max_jobs, "duration": duration_ms})

    def remove_global_rate_limit(self) -> None:
        self.client.hdel(self.keys.meta, "max", "duration")

    def rate_limit(self, ms: int) -> None:
        """Stop rate-limited workers from fetching for ``ms`` milliseconds (as Node's
        ``queue.rateLimit``: it only affects workers with a limiter or a global limit)."""
        if isinstance(ms, bool) or not isinstance(ms, int) or ms < 0:
            raise ValueError(f"rate_limit expects milliseconds as an integer >= 0, got {ms!r}")
        if ms > 0:
            self.client.set(self.keys.limiter, _MAX_SAFE_INTEGER, px=ms)

    def get_meta(self) -> Dict[str, str]:
        """The queue's meta hash as stored."""
        return dict(self.client.hgetall(self.keys.meta))
