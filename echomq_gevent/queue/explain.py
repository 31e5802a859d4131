"""The message of a job call that a script refused: which job, what was tried, and why.

:class:`~echomq_gevent.queue.job.Job`'s admin calls (``retry``, ``promote``, ``remove``...),
its parts (:mod:`.children`, :mod:`.control`) and the worker's manual settling
(:mod:`echomq_gevent.worker.manual`) raise what :func:`explain` makes of the script's
typed error. Kept apart from ``job.py`` so that the parts of ``Job`` need nothing of it but
the job they were made for.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from ..errors import JobNotExist, JobNotInState, ScriptError, error_for_code

if TYPE_CHECKING:  # pragma: no cover
    from .job import Job

__all__ = ["explain"]


def explain(job: "Job", exc: ScriptError, action: str, expected: Optional[str] = None) -> ScriptError:
    """``exc`` again, with a message that names ``job``, what was tried (``action``, as in
    "cannot <action>") and why it failed; for JobNotInState with ``expected``, the state
    the job is in now (one more call, on the greenlet that called)."""
    where = f"job {job.id} of queue {job.queue_qualified_name!r}"
    if isinstance(exc, JobNotExist):
        detail = f"cannot {action}: {where} does not exist (removed, cleaned or never added)"
    elif isinstance(exc, JobNotInState) and expected:
        try:
            now = job.get_state()
        except Exception:  # noqa: BLE001 - the state only decorates the message
            now = "in another state"
        detail = f"cannot {action}: {where} is {now}, not {expected}"
    else:
        detail = f"cannot {action}: {where}"
    return error_for_code(exc.code, exc.script, exc.job_id, detail)
