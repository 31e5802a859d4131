"""Structured logging telemetry: one log record per lifecycle event.

Load it with ``plugins: [echomq_gevent.contrib.logging]``.
Every record goes to the ``echomq_gevent.events`` logger at INFO (failures, stalls
and lost locks at WARNING/ERROR) and carries its fields as ``extra`` attributes:
``event`` (``job.active``, ``job.completed``, ``job.failed``, ``job.retried``,
``job.stalled``, ``job.lock_lost``, ``job.moved``, ``job.handed_back``, ``worker.started``,
``worker.stopping``), ``queue``, ``job_id``, ``job_name``, ``attempt`` and, where they
apply, ``duration_ms``, ``delay_ms``, ``error``. ``echomq-gevent --log-format json``
prints them as one JSON object per line, ready for a log shipper.

The hooks run on the job's greenlet; they only format and hand a record to
:mod:`logging`, so they never block the hub for long.
"""
from __future__ import annotations

import logging
from typing import Any, Dict

from echomq_gevent import hookimpl

log = logging.getLogger("echomq_gevent.events")

#: This plugin logs every event itself: the built-in log lines step aside.
REPLACES_BUILTIN_LOGGING = True


def _job_fields(job: Any) -> Dict[str, Any]:
    return {
        "queue": getattr(job, "queue_name", None),
        "job_id": getattr(job, "id", None),
        "job_name": getattr(job, "name", None),
        # ats counts this start (moveToActive increments it); atm moves at the finish
        "attempt": getattr(job, "attempts_started", 0) or (getattr(job, "attempts_made", 0) or 0) + 1,
    }


def _worker_name(worker: Any) -> Any:
    return getattr(worker, "name", None) or getattr(worker, "queue_name", None)


def _emit(level: int, event: str, message: str, **fields: Any) -> None:
    fields["event"] = event
    log.log(level, message, extra=fields)


@hookimpl
def echomq_worker_started(worker: Any) -> None:
    _emit(logging.INFO, "worker.started", "worker started on %s" % getattr(worker, "queue_name", "?"),
          queue=getattr(worker, "queue_name", None), worker=_worker_name(worker))


@hookimpl
def echomq_worker_stopping(worker: Any, reason: str) -> None:
    _emit(logging.INFO, "worker.stopping", "worker on %s stopping (%s)" % (getattr(worker, "queue_name", "?"), reason),
          queue=getattr(worker, "queue_name", None), worker=_worker_name(worker), reason=reason)


@hookimpl
def echomq_job_active(worker: Any, job: Any) -> None:
    f = _job_fields(job)
    _emit(logging.INFO, "job.active", "job %s (%s) started" % (f["job_id"], f["job_name"]), **f)


@hookimpl
def echomq_job_completed(worker: Any, job: Any, result: Any, duration_ms: float) -> None:
    f = _job_fields(job)
    _emit(logging.INFO, "job.completed", "job %s (%s) completed in %.1f ms" % (f["job_id"], f["job_name"], duration_ms),
          duration_ms=round(duration_ms, 3), **f)


@hookimpl
def echomq_job_retried(worker: Any, job: Any, error: BaseException, delay_ms: int) -> None:
    f = _job_fields(job)
    _emit(logging.WARNING, "job.retried", "job %s (%s) failed, retry in %d ms: %s" % (f["job_id"], f["job_name"], delay_ms, error),
          delay_ms=delay_ms, error=f"{type(error).__name__}: {error}", **f)


@hookimpl
def echomq_job_failed(worker: Any, job: Any, error: BaseException) -> None:
    f = _job_fields(job)
    _emit(logging.WARNING, "job.failed", "job %s (%s) failed: %s" % (f["job_id"], f["job_name"], error),
          error=f"{type(error).__name__}: {error}", **f)


@hookimpl
def echomq_job_stalled(worker: Any, queue: str, job_id: str) -> None:
    _emit(logging.WARNING, "job.stalled", "job %s stalled and went back to wait" % job_id, queue=queue, job_id=job_id)


@hookimpl
def echomq_job_lock_lost(worker: Any, job: Any) -> None:
    f = _job_fields(job)
    _emit(logging.ERROR, "job.lock_lost", "job %s (%s) lost its lock" % (f["job_id"], f["job_name"]), **f)


@hookimpl
def echomq_job_moved(worker: Any, job: Any, state: str, error: BaseException) -> None:
    f = _job_fields(job)
    _emit(logging.INFO, "job.moved", "job %s (%s) moved to %s by its processor" % (f["job_id"], f["job_name"], state),
          state=state, **f)


@hookimpl
def echomq_job_handed_back(worker: Any, job: Any) -> None:
    f = _job_fields(job)
    _emit(logging.INFO, "job.handed_back", "job %s (%s) handed back to wait" % (f["job_id"], f["job_name"]), **f)
