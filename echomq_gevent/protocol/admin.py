"""Script wrappers for the getters and admin calls BullMQ's ``Queue`` has beyond the
worker's hot path (clean, drain, obliterate, retry and promote in bulk, change delay,
reprocess, metrics, rate-limit TTL, counts per priority, global concurrency, orphaned jobs).

:class:`AdminScripts` is the ``admin`` part of :class:`~echomq_gevent.protocol.scripts.Scripts`
(``queue.scripts.admin.get_metrics("completed")``): it builds the KEYS and ARGV and sends
them through that object's :meth:`~echomq_gevent.protocol.scripts.Scripts.call`.
"""
from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple, Union

from .calls import ScriptCall

__all__ = ["AdminScripts", "METRICS_TYPES", "OldestJob"]

#: What ``getOldestJobTimestamp-1`` answers: the ready time (ms) of the oldest job ready
#: to run, its id and where it is (``wait``, ``prioritized``, ``delayed``), all ``None``
#: when no job is ready, and whether the queue is paused.
OldestJob = Tuple[Optional[int], Optional[str], Optional[str], bool]


def _int(v: Any) -> int:
    return int(v) if v is not None else 0

#: What ``getMetrics`` reads: the per-minute counts of completed or failed jobs.
METRICS_TYPES = ("completed", "failed")


class AdminScripts:
    """The admin scripts of one queue; made by its :class:`~echomq_gevent.protocol.scripts.Scripts`."""

    __slots__ = ("scripts", "keys")

    def __init__(self, scripts: Any) -> None:
        #: the :class:`~echomq_gevent.protocol.scripts.Scripts` these calls go through
        self.scripts = scripts
        self.keys = scripts.keys

    def is_finished(self, job_id: str, return_value: bool = False) -> Any:
        k = self.keys
        return self.scripts.call("isFinished-3", [k.completed, k.failed, k.job(job_id)],
                         [job_id, "1" if return_value else ""])

    def cancel_job(self, job_id: str, reason: str, now_ms: int) -> Tuple[str, str]:
        """``cancelJob-9``: cancel a job wherever it is (see the script). Returns
        (outcome, state): ``("accepted", "active")`` marked and signalled,
        ``("cancelled", <state it left>)`` failed at once, ``("finished", "completed" |
        "failed")`` left alone, ``("missing" | "unknown", "unknown")`` nothing written."""
        k = self.keys
        answer = self.scripts.call("cancelJob-9", [k.active, k.wait, k.paused, k.delayed, k.completed, k.failed,
                                                   k.waiting_children, k.prioritized, k.cancellation_channel()],
                                   [job_id, reason, k.base, int(now_ms)])
        outcome, state = (v.decode() if isinstance(v, bytes) else str(v) for v in answer)
        return outcome, state

    def drain(self, include_delayed: bool = False, count: int = 0) -> int:
        """``drain-5``: delete the waiting jobs, at most ``count`` from each key (0: all).
        Returns 1 while jobs may remain (call again), else 0."""
        k = self.keys
        args: List[Any] = [k.base, "1" if include_delayed else "0"]
        if count:
            args.append(int(count))
        return _int(self.scripts.call("drain-5", [k.wait, k.paused, k.delayed, k.prioritized, k.repeat], args))

    def obliterate(self, count: int = 1000, force: bool = False) -> int:
        """``obliterate-2``: 1 while work remains, 0 when done; -1 not paused, -2 active jobs."""
        k = self.keys
        return _int(self.scripts.call("obliterate-2", [k.meta, k.base], [int(count), "force" if force else ""]))

    def change_delay(self, job_id: str, delay_ms: int, now_ms: int) -> int:
        """``changeDelay-4``: a delayed job becomes due at ``now_ms + delay_ms``.
        Returns 0; raises JobNotExist (-1) or JobNotInState (-3, not delayed)."""
        k = self.keys
        res = self.scripts.call("changeDelay-4", [k.delayed, k.meta, k.marker, k.events],
                        [int(delay_ms), int(now_ms), job_id, k.job(job_id)])
        return self.scripts.check("changeDelay-4", res, job_id)

    def reprocess_job(self, job_id: str, state: str, lifo: bool = False,
                      reset_attempts_made: bool = False, reset_attempts_started: bool = False) -> int:
        """``reprocessJob-9``: run a ``completed`` or ``failed`` job again (``state`` is the
        set it must be in). Returns 1; raises JobNotExist (-1) or JobNotInState (-3)."""
        if state not in ("completed", "failed"):
            raise ValueError(f"reprocess_job: state must be 'completed' or 'failed', got {state!r}")
        k = self.keys
        keys = [k.job(job_id), k.events, k.state_key(state), k.wait, k.meta, k.active, k.marker,
                k.prioritized, k.pc]
        args = [job_id, "RPUSH" if lifo else "LPUSH",
                "failedReason" if state == "failed" else "returnvalue", state,
                "1" if reset_attempts_made else "0", "1" if reset_attempts_started else "0"]
        return self.scripts.check("reprocessJob-9", self.scripts.call("reprocessJob-9", keys, args), job_id)

    def move_jobs_to_wait(self, state: str, count: int = 1000,
                          max_score: Union[int, float, str] = "+inf") -> int:
        """``moveJobsToWait-8``: move up to ``count`` ``failed``/``completed`` jobs (finished
        at or before ``max_score`` ms) or ``delayed`` jobs (all: leave ``max_score`` at
        "+inf") to wait. Returns 1 while more may remain (call again), else 0."""
        if state not in ("failed", "completed", "delayed"):
            raise ValueError(f"move_jobs_to_wait: state must be 'failed', 'completed' or 'delayed', got {state!r}")
        k = self.keys
        keys = [k.base, k.events, k.state_key(state), k.wait, k.paused, k.meta, k.active, k.marker]
        return _int(self.scripts.call("moveJobsToWait-8", keys, [int(count), max_score, state]))

    def clean_jobs_in_set(self, state: str, cutoff_ms: int, limit: int = 0) -> List[str]:
        """``cleanJobsInSet-3``: delete jobs of ``state`` whose time is at or before
        ``cutoff_ms`` (at most ``limit``, 0 = all); returns the deleted ids."""
        state = "wait" if state == "waiting" else state
        k = self.keys
        res = self.scripts.call("cleanJobsInSet-3", [k.state_key(state), k.events, k.repeat],
                        [k.base, int(cutoff_ms), int(limit), state])
        return [str(x) for x in (res or [])]

    def get_state_without_lpos(self, job_id: str) -> str:
        """``getState-8``: as :meth:`get_state`, for Redis servers older than 6.0.6."""
        k = self.keys
        keys = [k.completed, k.failed, k.delayed, k.active, k.wait, k.paused, k.waiting_children,
                k.prioritized]
        return str(self.scripts.call("getState-8", keys, [job_id]))


    def get_metrics(self, kind: str, start: int = 0, end: int = -1) -> List[Any]:
        """``getMetrics-2``: ``[[count, prevTS, prevCount], data points, data length]``
        (missing hash fields are ``None``)."""
        metrics_key = self.keys.metrics(kind)
        return self.scripts.call("getMetrics-2", [metrics_key, metrics_key + ":data"], [start, end])

    def get_rate_limit_ttl(self, max_jobs: int = 0) -> int:
        """``getRateLimitTtl-2``: remaining limiter ms once ``max_jobs`` (0 = meta "max")
        is reached, else 0; the plain PTTL when neither limit exists."""
        k = self.keys
        return int(self.scripts.call("getRateLimitTtl-2", [k.limiter, k.meta], [max_jobs]))

    def get_counts_per_priority(self, priorities: Sequence[int]) -> List[int]:
        """``getCountsPerPriority-2``: ready jobs per priority (0 = the wait list)."""
        k = self.keys
        return [int(c) for c in self.scripts.call("getCountsPerPriority-2", [k.wait, k.prioritized], list(priorities))]

    def oldest_job_call(self, now_ms: int, base: Optional[str] = None) -> ScriptCall:
        """The ``getOldestJobTimestamp-1`` call (read only) for a clock reading ``now_ms``,
        of this queue or of the queue whose key prefix is ``base``: run it alone with
        :meth:`get_oldest_job` or with others in one round trip, and read its answer with
        :meth:`read_oldest_job`."""
        return ScriptCall("getOldestJobTimestamp-1", [base or self.keys.base], [int(now_ms)])

    @staticmethod
    def read_oldest_job(answer: Any) -> OldestJob:
        """A ``getOldestJobTimestamp-1`` answer as :data:`OldestJob`."""
        if not isinstance(answer, list) or len(answer) != 4:
            raise ValueError(f"getOldestJobTimestamp-1 answered {answer!r}")
        ts, job_id, where, paused = answer
        if ts is None:
            return None, None, None, bool(int(paused or 0))
        return int(ts), str(job_id), str(where), bool(int(paused or 0))

    def get_oldest_job(self, now_ms: int) -> OldestJob:
        """``getOldestJobTimestamp-1``: the oldest job ready to run at ``now_ms`` (in
        ``wait``, ``prioritized``, or due in ``delayed``) and whether the queue is paused."""
        call = self.oldest_job_call(now_ms)
        return self.read_oldest_job(self.scripts.call(call.name, call.keys, call.args))

    def is_maxed(self) -> bool:
        """``isMaxed-2``: the active list has reached meta "concurrency"."""
        k = self.keys
        return bool(self.scripts.call("isMaxed-2", [k.meta, k.active], []))

    def remove_orphaned_jobs(self, state_suffixes: Sequence[str], sub_keys: Sequence[str],
                             candidate_ids: Sequence[str]) -> int:
        """``removeOrphanedJobs-1``: delete the candidates no state key refers to; returns
        how many were deleted."""
        args: List[Any] = [len(state_suffixes), *state_suffixes, len(sub_keys), *sub_keys, *candidate_ids]
        return int(self.scripts.call("removeOrphanedJobs-1", [self.keys.base], args))

    def remove_deduplication_key(self, dedup_id: str, job_id: str) -> bool:
        """``removeDeduplicationKey-1``: delete ``de:<dedup_id>`` if it names ``job_id``."""
        return bool(self.scripts.call("removeDeduplicationKey-1", [self.keys.dedup(dedup_id)], [job_id]))
