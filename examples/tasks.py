"""Job processors of the example app (named in ``examples/worker.yaml``).

They run on job greenlets inside the gunicorn worker processes, beside the request
greenlets, so they must be cooperative: ``time.sleep``, sockets and Redis calls are
patched by gevent and yield to the hub; pure-Python loops that run for long do not
(see "time budgets" in ``docs/gunicorn.md``).
"""
from __future__ import annotations

import os
import time
from typing import Any, Callable, Dict

from echomq_gevent.errors import UnrecoverableError


def send_welcome(job: Any) -> Dict[str, Any]:
    """Pretend to send a welcome mail: one slow network call (50 ms)."""
    data = job.data or {}
    if not data.get("email"):
        raise UnrecoverableError(f"job {job.id}: data has no 'email'; nothing to send")
    time.sleep(0.05)  # patched by gevent: only this greenlet waits
    return {"sent_to": data["email"], "pid": os.getpid()}


def sleep(job: Any) -> Dict[str, Any]:
    """Wait ``data.ms`` milliseconds cooperatively (an I/O-bound job), then answer the pid
    of the gunicorn worker that ran it. With ``data.report`` it first stores that pid
    in the job's progress, so an operator sees where a running job is."""
    data = job.data or {}
    if data.get("report"):
        job.update_progress({"pid": os.getpid()})
    time.sleep(float(data.get("ms", 10)) / 1000.0)
    return {"pid": os.getpid(), "ms": data.get("ms", 10)}


def spin(job: Any) -> Dict[str, Any]:
    """What NOT to do beside a web app: pure-Python CPU work for ``data.seconds`` that
    never yields, so requests (and gunicorn's heartbeat) wait for it. Kept to show what
    ``timeout`` and ``worker_abort`` do with such a job (docs/gunicorn.md)."""
    end = time.monotonic() + float((job.data or {}).get("seconds", 1))
    n = 0
    while time.monotonic() < end:
        n += 1
    return {"pid": os.getpid(), "loops": n}


ROUTES: Dict[str, Callable[[Any], Any]] = {
    "welcome": send_welcome,
    "sleep": sleep,
    "spin": spin,
}


def dispatch(job: Any) -> Any:
    """The queue's processor: route by job name (Node producers use the same names)."""
    fn = ROUTES.get(job.name)
    if fn is None:
        raise UnrecoverableError(
            f"job {job.id}: no processor for job name {job.name!r} on queue {job.queue_name!r}; "
            f"known names: {', '.join(sorted(ROUTES))}")
    return fn(job)
