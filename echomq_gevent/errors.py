"""Exceptions raised by echomq-gevent.

Script failures carry BullMQ's numeric error codes (docs/protocol.md, "Keys and conventions") and name the job
and the script, so a log line says what went wrong and where.
"""
from __future__ import annotations

from typing import Dict, Iterable, List, Optional, Type

__all__ = [
    "EchoMQError", "ScriptError", "JobNotExist", "JobLockNotExist", "JobNotInState",
    "JobPendingChildren", "ParentJobNotExist", "JobLockMismatch", "ParentJobCannotBeReplaced",
    "JobBelongsToJobScheduler", "JobHasFailedChildren", "SchedulerJobIdCollision",
    "SchedulerJobSlotsBusy", "InvalidOptionError", "InvalidJobIdError", "InvalidJobDataError",
    "UnrecoverableError", "DelayedError", "RateLimitError", "WaitingChildrenError",
    "ConfigError", "JobCancelled", "JobLockedError", "WorkerStateError", "error_for_code",
]


class EchoMQError(Exception):
    """Base class of every error this package raises on purpose."""


class ScriptError(EchoMQError):
    """A Lua script answered with one of BullMQ's negative error codes."""

    code: int = 0
    reason: str = "script error"

    def __init__(self, script: str, job_id: Optional[str] = None, detail: str = "") -> None:
        self.script = script
        self.job_id = job_id
        where = f"job {job_id!r}" if job_id is not None else "the queue"
        msg = f"{script}: {self.reason} ({where}, code {self.code})"
        if detail:
            msg += f": {detail}"
        super().__init__(msg)


class JobNotExist(ScriptError):
    code, reason = -1, "job does not exist"


class JobLockNotExist(ScriptError):
    code, reason = -2, "job lock does not exist (the lock expired or the job was taken back)"


class JobNotInState(ScriptError):
    code, reason = -3, "job is not in the expected state"


class JobPendingChildren(ScriptError):
    code, reason = -4, "job has pending children"


class ParentJobNotExist(ScriptError):
    code, reason = -5, "parent job does not exist"


class JobLockMismatch(ScriptError):
    code, reason = -6, "job lock is owned by another worker"


class ParentJobCannotBeReplaced(ScriptError):
    code, reason = -7, "job already belongs to another parent"


class JobBelongsToJobScheduler(ScriptError):
    code, reason = -8, "job belongs to a job scheduler"


class JobHasFailedChildren(ScriptError):
    code, reason = -9, "job has failed children"


class SchedulerJobIdCollision(ScriptError):
    code, reason = -10, "job scheduler id collision"


class SchedulerJobSlotsBusy(ScriptError):
    code, reason = -11, "job scheduler slots busy"


_BY_CODE: Dict[int, Type[ScriptError]] = {
    cls.code: cls
    for cls in (
        JobNotExist, JobLockNotExist, JobNotInState, JobPendingChildren, ParentJobNotExist,
        JobLockMismatch, ParentJobCannotBeReplaced, JobBelongsToJobScheduler,
        JobHasFailedChildren, SchedulerJobIdCollision, SchedulerJobSlotsBusy,
    )
}


def error_for_code(code: int, script: str, job_id: Optional[str] = None, detail: str = "") -> ScriptError:
    """Build the typed exception for a negative script return code."""
    cls = _BY_CODE.get(code)
    if cls is None:
        err = ScriptError(script, job_id, detail or f"unknown error code {code}")
        err.code = code
        return err
    return cls(script, job_id, detail)


class InvalidOptionError(EchoMQError, ValueError):
    """A job or worker option is unknown or malformed. Nothing was written."""


class InvalidJobIdError(InvalidOptionError):
    """A custom job id breaks BullMQ's id rules. Nothing was written."""


class InvalidJobDataError(EchoMQError, ValueError):
    """Job data (or a return value) cannot be encoded as JSON, or stored JSON is invalid."""


class UnrecoverableError(EchoMQError):
    """Raise from a processor to fail the job at once, without further attempts."""


class DelayedError(EchoMQError):
    """Raise from a processor after moving the job to delayed yourself (``job.move_to_delayed``).

    The worker then leaves the job alone and fetches the next one.
    """


class WaitingChildrenError(EchoMQError):
    """Raise from a processor after moving the job to waiting-children yourself."""


class RateLimitError(EchoMQError):
    """Raise from a processor (usually after ``worker.rate_limit(ms)``) to put the job back
    at the front of the queue without counting an attempt."""

    def __init__(self, message: str = "bullmq:rateLimitExceeded") -> None:
        super().__init__(message)


class JobTimeoutError(EchoMQError):
    """A processor ran longer than the worker's ``job_timeout``; the attempt failed
    (retries apply). Exported as ``echomq_gevent.JobTimeoutError`` (and from
    ``echomq_gevent.worker.runtime``, where it was defined before ``offload: process``)."""


class JobCancelled(EchoMQError):
    """The job was cancelled while its processor ran (``Worker.cancel_job``,
    ``cancel_all_jobs``, or its lock was lost). Raised inside a greenlet processor at its
    next cooperative switch; a thread-offloaded processor sees ``job.cancelled`` and may
    raise it with ``job.check_cancelled()``. ``reason`` is the text given, if any."""

    def __init__(self, reason: Optional[str] = None) -> None:
        self.reason = reason
        super().__init__(f"job cancelled: {reason}" if reason else "job cancelled")


class JobLockedError(EchoMQError, RuntimeError):
    """The job is active: a worker holds its lock, so it cannot be removed now."""


class WorkerStateError(EchoMQError, RuntimeError):
    """A worker (or runner) was asked for something its state does not allow: run it
    twice, run a closed one, take jobs by hand while its own loop runs."""


class ConfigError(EchoMQError, ValueError):
    """The YAML configuration (or a worker option) is invalid; the message names file, line and key."""


def close_matches(word: str, choices: Iterable[str]) -> List[str]:
    """The choice nearest ``word`` (a list of at most one), for "did you mean ...?" in an
    error message. ``difflib`` is imported here, when a message needs it, not by every
    process that imports the package."""
    import difflib

    return difflib.get_close_matches(word, list(choices), n=1)
