"""Reading a task's job as Django's ``TaskResult``: what the backend's ``get_result``
returns and what a running task's ``TaskContext`` holds.

BullMQ states map to Django's statuses: ``waiting``, ``delayed``, ``prioritized`` and
``waiting-children`` are READY, ``active`` RUNNING, ``completed`` SUCCESSFUL and
``failed`` FAILED. ``errors`` are the job's ``stacktrace`` entries (one per failed
attempt it keeps, oldest first), the exception class read from each trace's last line.
"""
from __future__ import annotations

import datetime as _dt
import re
from typing import Any, Dict, List, Optional, Tuple

from .task_api import TaskError, TaskResult, TaskResultStatus

__all__ = ["read_result", "to_datetime", "exception_class_path", "task_errors", "worker_ids", "task_call"]

_STATUS = {"completed": TaskResultStatus.SUCCESSFUL, "failed": TaskResultStatus.FAILED,
           "active": TaskResultStatus.RUNNING}


def to_datetime(ms: Optional[int]) -> Optional[_dt.datetime]:
    """A BullMQ timestamp (ms since the epoch) as Django gives times: aware in UTC with
    ``USE_TZ``, naive local time without."""
    if not ms:
        return None
    from django.conf import settings
    from django.utils import timezone

    value = _dt.datetime.fromtimestamp(ms / 1000.0, tz=_dt.timezone.utc)
    return value if settings.USE_TZ else timezone.make_naive(value)


def exception_class_path(trace: str) -> str:
    """The exception class path of a stored stack trace: ``myapp.errors.Declined`` for
    a Python traceback ending ``myapp.errors.Declined: ...``, ``builtins.ValueError`` for
    ``ValueError: ...``; ``builtins.Exception`` for anything else (a Node stack)."""
    lines = [ln for ln in trace.splitlines() if ln.strip()]
    if not lines or any(ln.startswith("    at ") for ln in lines):
        return "builtins.Exception"
    frames = [i for i, ln in enumerate(lines) if ln.startswith(" ")]
    candidate = lines[frames[-1] + 1] if frames and frames[-1] + 1 < len(lines) else lines[0]
    match = re.match(r"^([A-Za-z_][\w.]*)(?::|$)", candidate)
    if not match or match.group(1) == "Traceback":
        return "builtins.Exception"
    path = match.group(1)
    return path if "." in path else f"builtins.{path}"


def task_errors(job: Any) -> List[Any]:
    """One ``TaskError`` per failed attempt the job keeps (its ``stacktrace``, oldest
    first); its ``failedReason`` alone when it kept no trace."""
    traces = [t for t in (job.stacktrace or []) if isinstance(t, str) and t]
    if not traces and job.failed_reason:
        traces = [str(job.failed_reason)]
    return [TaskError(exception_class_path=exception_class_path(t), traceback=t) for t in traces]


def worker_ids(job: Any, attempts: int, current: Optional[str] = None) -> List[str]:
    """One entry per attempt: BullMQ keeps only the last taker's name (``pb``, set when the
    worker has a ``name``), so the earlier ones are ``""``."""
    if attempts <= 0:
        return []
    last = current if current is not None else (job.processed_by or "")
    return [""] * (attempts - 1) + [last]


def task_call(job: Any) -> Tuple[List[Any], Dict[str, Any]]:
    """The ``args`` and ``kwargs`` of a task's job; ValueError naming what is wrong."""
    data = job.data
    if not isinstance(data, dict) or not set(data) <= {"args", "kwargs"}:
        raise ValueError(f"its data must be {{\"args\": [...], \"kwargs\": {{...}}}}, got {_short(data)}")
    args, kwargs = data.get("args", []), data.get("kwargs", {})
    if not isinstance(args, list):
        raise ValueError(f"its data's args must be a list, got {_short(args)}")
    if not isinstance(kwargs, dict):
        raise ValueError(f"its data's kwargs must be an object, got {_short(kwargs)}")
    return args, kwargs


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


def read_result(task: Any, job: Any, state: str, backend: str) -> Any:
    """The ``TaskResult`` of a job read from Redis, in BullMQ state ``state``."""
    status = _STATUS.get(state, TaskResultStatus.READY)
    try:
        args, kwargs = task_call(job)
    except ValueError:
        args, kwargs = [], {}
    attempts = job.attempts_made + (1 if status == TaskResultStatus.RUNNING else 0)
    finished = status in (TaskResultStatus.SUCCESSFUL, TaskResultStatus.FAILED)
    errors = task_errors(job)
    result = TaskResult(task=task, id=str(job.id), status=status, enqueued_at=to_datetime(job.timestamp),
                        started_at=to_datetime(job.processed_on), last_attempted_at=to_datetime(job.processed_on),
                        finished_at=to_datetime(job.finished_on) if finished else None,
                        args=args, kwargs=kwargs, backend=backend,
                        errors=errors,
                        worker_ids=worker_ids(job, attempts))
    if status == TaskResultStatus.SUCCESSFUL:
        object.__setattr__(result, "_return_value", job.returnvalue)
    return result
