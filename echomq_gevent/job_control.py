"""Job calls beyond the processor's basics: waiting for a result, handing a job back,
trimming its log.

:class:`JobControl` is mixed into :class:`~echomq_gevent.job.Job` (it uses the job's
``id``, ``name``, ``token``, ``scripts`` and ``_explain``), so these are ordinary job
methods: ``job.wait_until_finished(events)``, ``job.move_to_wait(token)``.
"""
from __future__ import annotations

from typing import Any, Optional

from .errors import EchoMQError, JobCancelled, ScriptError

__all__ = ["JobControl"]


class JobControl:
    """Mixin of :class:`~echomq_gevent.job.Job`."""

    __slots__ = ("_cancel_reason", "_worker")

    id: str
    name: str
    token: Optional[str]
    scripts: Any
    _explain: Any

    def remove_deduplication_key(self) -> bool:
        """End this job's deduplication window now (Node's ``job.removeDeduplicationKey``):
        True if ``de:<id>`` still named this job and was deleted; False otherwise (another
        job owns the id, or the job was added without deduplication)."""
        dedup_id = getattr(self, "deduplication_id", None)
        if not dedup_id:
            return False
        return self.scripts.remove_deduplication_key(dedup_id, self.id)

    # -- manual processing (a job taken with Worker.get_next_job) -------------------------
    def attach_worker(self, worker: Any) -> None:
        """Called by ``Worker.get_next_job``: the worker whose options settle this job."""
        self._worker = worker

    def _manual_worker(self, action: str) -> Any:
        worker = getattr(self, "_worker", None)
        if worker is None:
            raise EchoMQError(f"cannot {action} job {self.id}: it was not taken with Worker.get_next_job "
                              f"(a running worker settles its own jobs)")
        return worker

    def move_to_completed(self, returnvalue: Any, token: str, fetch_next: bool = False) -> Any:
        """Complete a job taken with ``Worker.get_next_job(token)``: store ``returnvalue``
        (JSON) with the worker's keep-jobs and metrics options. With ``fetch_next`` the next
        job is taken under the same token in the same call and returned (or ``None``).
        JobLockMismatch / JobLockNotExist when ``token`` does not hold the lock (nothing is
        written then)."""
        return self._manual_worker("complete").manual_complete(self, returnvalue, token, fetch_next)

    def move_to_failed(self, err: BaseException, token: str, fetch_next: bool = False) -> Any:
        """Fail the current attempt of a job taken with ``Worker.get_next_job(token)``,
        with the worker's rules: retried (backoff) while attempts are left and ``err`` is
        not an ``UnrecoverableError``, else failed for good with ``str(err)`` as the reason.
        Returns the next job with ``fetch_next`` when one was taken."""
        return self._manual_worker("fail").manual_fail(self, err, token, fetch_next)

    def extend_lock(self, token: str, duration_ms: int) -> bool:
        """Renew this job's lock for ``duration_ms`` if ``token`` holds it (Node's
        ``job.extendLock``); False when it does not (expired, or another worker's)."""
        if not isinstance(token, str) or not token:
            raise ValueError(f"extend_lock: token must be a non-empty string, got {token!r}")
        if isinstance(duration_ms, bool) or not isinstance(duration_ms, int) or duration_ms < 1:
            raise ValueError(f"extend_lock: duration_ms must be an integer >= 1, got {duration_ms!r}")
        return bool(self.scripts.extend_lock(self.id, token, duration_ms))

    # -- cancellation (set by the worker running the job) ----------------------------------
    @property
    def cancelled(self) -> bool:
        """True once the worker running this job cancelled it (``Worker.cancel_job``,
        ``cancel_all_jobs``, or its lock was lost). A processor offloaded to a thread polls
        it (or :meth:`check_cancelled`) and stops; a greenlet processor is interrupted
        with :class:`~echomq_gevent.errors.JobCancelled` anyway."""
        return getattr(self, "_cancel_reason", None) is not None

    @property
    def cancel_reason(self) -> Optional[str]:
        """Why the job was cancelled ("" when no reason was given), or ``None``."""
        return getattr(self, "_cancel_reason", None)

    def check_cancelled(self) -> None:
        """Raise :class:`~echomq_gevent.errors.JobCancelled` if the job was cancelled."""
        reason = getattr(self, "_cancel_reason", None)
        if reason is not None:
            raise JobCancelled(reason or None)

    def mark_cancelled(self, reason: Optional[str]) -> None:
        """Called by the worker (any greenlet of its hub): set :attr:`cancelled`."""
        self._cancel_reason = reason or ""

    def wait_until_finished(self, queue_events: Any, timeout: Optional[float] = None) -> Any:
        """Block until this job finishes; returns its returnvalue (Node's ``waitUntilFinished``).

        ``queue_events`` is a running :class:`~echomq_gevent.events.QueueEvents` of the
        job's queue. A job that already finished answers at once (its listeners are
        registered before the job is looked up, so no finish is missed). Raises
        :class:`~echomq_gevent.events.JobFailedError` (``failed_reason``) when the job
        failed or no longer exists, ``WaitTimeoutError`` after ``timeout`` seconds,
        ``EventsClosedError`` when ``queue_events`` closes first. Call it from a greenlet
        of the hub thread.
        """
        return queue_events.wait_for_job(self.scripts, self.id, self.name, timeout)

    def move_to_wait(self, token: Optional[str] = None) -> int:
        """Put this active job back at the front of wait (Node's ``job.moveToWait``):
        its lock (held with ``token``, by default the worker's) is released and no attempt
        is counted. Use it in a processor before raising
        :class:`~echomq_gevent.errors.RateLimitError`. Returns the rate limiter's
        remaining ms (0 when not limited). Raises JobLockMismatch for another token,
        JobLockNotExist when the lock is gone, JobNotExist for a missing job."""
        try:
            return self.scripts.move_job_from_active_to_wait(self.id, token or self.token or "0")
        except ScriptError as exc:
            raise self._explain(exc, "move it back to wait") from None

    def clear_logs(self, keep_logs: Optional[int] = None) -> None:
        """Delete the job's log lines, or keep only the newest ``keep_logs`` of them
        (Node's ``job.clearLogs(keepLogs)``)."""
        if keep_logs is not None and (isinstance(keep_logs, bool) or not isinstance(keep_logs, int)
                                      or keep_logs < 0):
            raise ValueError(f"clear_logs: keep_logs must be an integer >= 0 or None, got {keep_logs!r}")
        key = self.scripts.keys.logs(self.id)
        if keep_logs:
            self.scripts.client.ltrim(key, -keep_logs, -1)
        else:
            self.scripts.client.delete(key)
