"""Cancel jobs from Django's admin: an action for the admin of a model that keeps the id
of a job it started (an export, an import, a report).

.. code-block:: python

    from django.contrib import admin
    from echomq_gevent.contrib.django.admin_actions import cancel_jobs_action

    @admin.register(Export)
    class ExportAdmin(admin.ModelAdmin):
        actions = [cancel_jobs_action("exports", job_id="job_id", reason="stopped in the admin")]

Each selected object's job is cancelled wherever it is (``Queue.cancel_job``: a waiting
or delayed job ends failed and never runs, a running one is stopped by the worker that
runs it, on any host), and the admin shows one message per object saying what happened.
An object without a job id, or a Redis that cannot be reached, is a message too, never
an error page. The action needs the ``change`` permission on the model.
"""
from __future__ import annotations

from typing import Any, Callable, Optional, Union

from ...queue.admin import check_cancel_reason

__all__ = ["cancel_jobs_action"]


def cancel_jobs_action(queue_name: str, job_id: Union[str, Callable[[Any], Any]] = "job_id",
                       reason: Optional[str] = None, description: Optional[str] = None) -> Callable[..., None]:
    """An admin action cancelling the jobs of queue ``queue_name`` (a queue of
    ``settings.ECHOMQ``) that the selected objects name: ``job_id`` is the attribute
    holding the id, or a function of the object returning it. ``reason`` (text of at most
    1,000 characters, checked now) becomes the job's ``job cancelled: <reason>``."""
    reason = check_cancel_reason(reason)
    if not (isinstance(job_id, str) and job_id) and not callable(job_id):
        raise TypeError(f"cancel_jobs_action: job_id must be an attribute name or a function, got {job_id!r}")
    read = job_id if callable(job_id) else (lambda obj: getattr(obj, job_id))

    def cancel_jobs(modeladmin: Any, request: Any, queryset: Any) -> None:
        from django.contrib import messages

        from . import queue

        try:
            q = queue(queue_name)
        except Exception as exc:  # a queue the settings do not declare, a bad setting
            modeladmin.message_user(request, f"cannot cancel on queue {queue_name!r}: {exc}", messages.ERROR)
            return
        for obj in queryset:
            value = read(obj)
            if value in (None, ""):
                modeladmin.message_user(request, f"{obj}: no job to cancel", messages.WARNING)
                continue
            try:
                outcome = q.cancel_job(str(value), reason)
            except Exception as exc:  # Redis away: said, not a 500 page
                modeladmin.message_user(request, f"{obj}: job {value} could not be cancelled: {exc}", messages.ERROR)
                continue
            level = messages.SUCCESS if outcome.changed else messages.INFO
            modeladmin.message_user(request, f"{obj}: {outcome.describe()}", level)

    cancel_jobs.short_description = description or f"Cancel their jobs (queue {queue_name})"  # type: ignore[attr-defined]
    cancel_jobs.allowed_permissions = ("change",)  # type: ignore[attr-defined]
    cancel_jobs.__name__ = f"cancel_{queue_name.replace('-', '_')}_jobs"
    return cancel_jobs
