"""The dashboard's actions: what each one says it will do, and doing it.

An action arrives as the POST of a confirmation page (see
:func:`~echomq_gevent.contrib.dashboard.pages.confirm`); :func:`perform` runs after the
dashboard has checked that actions are enabled and the CSRF token matches.
"""
from __future__ import annotations

from typing import Any, Dict, Tuple

from .web import Refused, Request, int_arg

#: States a queue can be cleaned of from the page.
CLEAN_STATES = ("completed", "failed", "delayed", "waiting", "prioritized")
#: Actions on one job (they need its id).
JOB_ACTIONS = ("retry", "promote", "remove", "cancel")
#: States whose jobs the page offers to cancel (Queue.cancel_job).
CANCEL_STATES = ("active", "waiting", "delayed", "prioritized", "waiting-children")


def describe(action: str, queue: str, job_id: str, state: str) -> str:
    """The sentence the confirmation page asks; 400 for an unknown action or a job action
    without a job id."""
    texts = {
        "retry": f"Retry job {job_id} of queue {queue}",
        "promote": f"Promote delayed job {job_id} of queue {queue} to run now",
        "remove": f"Remove job {job_id} of queue {queue} (and its children)",
        "cancel": (f"Cancel job {job_id} of queue {queue}: if it waits it fails now and never runs; if it "
                   f"runs, the worker running it stops it and it fails"),
        "pause": f"Pause queue {queue} for every worker",
        "resume": f"Resume queue {queue}",
        "clean": f"Delete the {state} jobs of queue {queue}",
        "retry-all": f"Retry every failed job of queue {queue}",
        "promote-all": f"Promote every delayed job of queue {queue}",
    }
    if action not in texts:
        raise Refused("400 Bad Request", f"unknown action {action!r}; use one of {', '.join(texts)}")
    if action in JOB_ACTIONS and not job_id:
        raise Refused("400 Bad Request", f"action {action!r} needs a job id")
    return texts[action]


def perform(req: Request, q: Any, form: Dict[str, str]) -> Tuple[str, str]:
    """Do the posted action on queue ``q``; returns the note for the next page and the
    address to go to. A refusal of the queue or the job (the job is locked, gone...) is
    a 409 naming the action."""
    from ...errors import EchoMQError

    action = form.get("action", "")
    job_id = form.get("job", "")
    try:
        return _act(req, q, action, job_id, form)
    except (EchoMQError, ValueError) as exc:
        raise Refused("409 Conflict", f"{describe(action, q.name, job_id, form.get('state', ''))} failed: {exc}")


def _act(req: Request, q: Any, action: str, job_id: str, form: Dict[str, str]) -> Tuple[str, str]:
    name = q.name
    to_queue = req.url("/queue", name=name)
    if action in JOB_ACTIONS:
        job = q.get_job(job_id) if job_id else None
        if job is None:
            raise ValueError(f"no job with id {job_id!r}")
        if action == "retry":
            job.retry(form.get("state") if form.get("state") in ("completed", "failed") else "failed")
            return f"job {job_id} retried", req.url("/job", queue=name, id=job_id)
        if action == "promote":
            job.promote()
            return f"job {job_id} promoted", req.url("/job", queue=name, id=job_id)
        if action == "cancel":
            out = q.cancel_job(job_id, form.get("reason") or "from the dashboard")
            return out.describe(), req.url("/job", queue=name, id=job_id)
        if q.remove_job(job_id) != 1:
            raise ValueError(f"job {job_id} is locked by a worker; try again when it has finished")
        return f"job {job_id} removed", to_queue
    if action == "pause":
        q.pause()
        return f"queue {name} paused", to_queue
    if action == "resume":
        q.resume()
        return f"queue {name} resumed", to_queue
    if action == "clean":
        state = form.get("state", "")
        if state not in CLEAN_STATES:
            raise ValueError(f"cannot clean state {state!r}; use one of {', '.join(CLEAN_STATES)}")
        grace = int_arg(form.get("grace", "0") or "0", "grace", 0)
        removed = q.clean(grace, 0, state)
        return f"{len(removed)} {state} job(s) removed", req.url("/queue", name=name, state=state)
    if action == "retry-all":
        q.retry_jobs(state="failed")
        return "failed jobs retried", req.url("/queue", name=name, state="failed")
    if action == "promote-all":
        q.promote_jobs()
        return "delayed jobs promoted", req.url("/queue", name=name, state="delayed")
    raise ValueError(f"unknown action {action!r}")
