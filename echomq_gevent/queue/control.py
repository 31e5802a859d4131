"""Job calls beyond the processor's basics: settling a job taken by hand, renewing its
lock, waiting for its result, handing it back, trimming its log.

:class:`JobControl` is the ``control`` part of :class:`~echomq_gevent.queue.job.Job`: made
for one job, it reads the job's ``id``, ``name``, ``token`` and ``scripts``. Users call the
job's methods of the same names: ``job.wait_until_finished(events)``, ``job.move_to_wait(token)``.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

from ..errors import EchoMQError, ScriptError
from .explain import explain

if TYPE_CHECKING:  # pragma: no cover
    from .job import Job

__all__ = ["JobControl"]


class JobControl:
    """The control calls of one job (``job.control``); :class:`~echomq_gevent.queue.job.Job`'s methods of the same names call these."""

    __slots__ = ("job",)

    def __init__(self, job: "Job") -> None:
        self.job = job

    def remove_deduplication_key(self) -> bool:
        """End this job's deduplication window now (Node's ``job.removeDeduplicationKey``):
        True if ``de:<id>`` still named this job and was deleted; False otherwise (another
        job owns the id, or the job was added without deduplication)."""
        dedup_id = getattr(self.job, "deduplication_id", None)
        if not dedup_id:
            return False
        return self.job.scripts.admin.remove_deduplication_key(dedup_id, self.job.id)

    # -- manual processing (a job taken with Worker.get_next_job) -------------------------
    def _manual_worker(self, action: str) -> Any:
        worker = getattr(self.job, "_worker", None)
        if worker is None:
            raise EchoMQError(f"cannot {action} job {self.job.id}: it was not taken with Worker.get_next_job "
                              f"(a running worker settles its own jobs)")
        return worker

    def move_to_completed(self, returnvalue: Any, token: str, fetch_next: bool = False) -> Any:
        """Complete a job taken with ``Worker.get_next_job(token)``: store ``returnvalue``
        (JSON) with the worker's keep-jobs and metrics options. With ``fetch_next`` the next
        job is taken under the same token in the same call and returned (or ``None``).
        JobLockMismatch / JobLockNotExist when ``token`` does not hold the lock (nothing is
        written then)."""
        return self._manual_worker("complete").manual_complete(self.job, returnvalue, token, fetch_next)

    def move_to_failed(self, err: BaseException, token: str, fetch_next: bool = False) -> Any:
        """Fail the current attempt of a job taken with ``Worker.get_next_job(token)``,
        with the worker's rules: retried (backoff) while attempts are left and ``err`` is
        not an ``UnrecoverableError``, else failed for good with ``str(err)`` as the reason.
        Returns the next job with ``fetch_next`` when one was taken."""
        return self._manual_worker("fail").manual_fail(self.job, err, token, fetch_next)

    def extend_lock(self, token: str, duration_ms: int) -> bool:
        """Renew this job's lock for ``duration_ms`` if ``token`` holds it (Node's
        ``job.extendLock``); False when it does not (expired, or another worker's)."""
        if not isinstance(token, str) or not token:
            raise ValueError(f"extend_lock: token must be a non-empty string, got {token!r}")
        if isinstance(duration_ms, bool) or not isinstance(duration_ms, int) or duration_ms < 1:
            raise ValueError(f"extend_lock: duration_ms must be an integer >= 1, got {duration_ms!r}")
        return bool(self.job.scripts.extend_lock(self.job.id, token, duration_ms))

    # -- cancellation (set by the worker running the job) ----------------------------------

    def wait_until_finished(self, queue_events: Any, timeout: Optional[float] = None) -> Any:
        """Block until this job finishes; returns its returnvalue (Node's ``waitUntilFinished``).

        ``queue_events`` is a running :class:`~echomq_gevent.queue.events.QueueEvents` of the
        job's queue. A job that already finished answers at once (its listeners are
        registered before the job is looked up, so no finish is missed). Raises
        :class:`~echomq_gevent.queue.events.JobFailedError` (``failed_reason``) when the job
        failed or no longer exists, ``WaitTimeoutError`` after ``timeout`` seconds,
        ``EventsClosedError`` when ``queue_events`` closes first. Call it from a greenlet
        of the hub thread.
        """
        return queue_events.wait_for_job(self.job.scripts, self.job.id, self.job.name, timeout)

    def move_to_wait(self, token: Optional[str] = None) -> int:
        """Put this active job back at the front of wait (Node's ``job.moveToWait``):
        its lock (held with ``token``, by default the worker's) is released and no attempt
        is counted. Use it in a processor before raising
        :class:`~echomq_gevent.errors.RateLimitError`. Returns the rate limiter's
        remaining ms (0 when not limited). Raises JobLockMismatch for another token,
        JobLockNotExist when the lock is gone, JobNotExist for a missing job."""
        try:
            return self.job.scripts.move_job_from_active_to_wait(self.job.id, token or self.job.token or "0")
        except ScriptError as exc:
            raise explain(self.job, exc, "move it back to wait") from None

    def clear_logs(self, keep_logs: Optional[int] = None) -> None:
        """Delete the job's log lines, or keep only the newest ``keep_logs`` of them
        (Node's ``job.clearLogs(keepLogs)``)."""
        if keep_logs is not None and (isinstance(keep_logs, bool) or not isinstance(keep_logs, int)
                                      or keep_logs < 0):
            raise ValueError(f"clear_logs: keep_logs must be an integer >= 0 or None, got {keep_logs!r}")
        key = self.job.scripts.keys.logs(self.job.id)
        if keep_logs:
            self.job.scripts.client.ltrim(key, -keep_logs, -1)
        else:
            self.job.scripts.client.delete(key)
