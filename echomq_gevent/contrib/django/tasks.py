"""A backend for Django's Tasks framework: ``@task`` functions as BullMQ jobs.

::

    TASKS = {
        "default": {
            "BACKEND": "echomq_gevent.contrib.django.tasks.EchoMQBackend",
            "QUEUES": ["default", "emails"],          # queues of settings.ECHOMQ
            "OPTIONS": {"job_options": {"attempts": 3, "backoff": {"type": "exponential", "delay": 1000}}},
        }
    }

``my_task.enqueue(*args, **kwargs)`` adds one job to the queue named by the task's
``queue_name``: its name is the task's import path, its data ``{"args": [...],
"kwargs": {...}}``, its id (the ``TaskResult`` id) 32 random hex digits. Django's
priority (-100 to 100, larger sooner) becomes BullMQ's ``100 - priority`` (0 to 200,
smaller sooner; 0 is BullMQ's plain wait list, which its workers serve first);
``run_after`` becomes a delay. ``python manage.py echomq_worker`` runs the tasks
(``task_worker``). Works with ``django.tasks`` (Django 6) and the ``django-tasks``
backport (``django_tasks``, Django 4.2 to 5.2): see ``task_api``.

OPTIONS (all optional):

* ``job_options``: BullMQ job options every task's job gets (``attempts``, ``backoff``,
  ``removeOnComplete``, ``removeOnFail``...);
* ``queue_job_options``: ``{queue: {options}}``, over ``job_options`` for that queue;
* ``modules``: modules the worker imports besides each installed app's ``tasks``;
* ``enqueue_on_commit``: ``True`` defers an ``enqueue()`` made inside
  ``transaction.atomic()`` to the commit (Django's ``transaction.on_commit``); nothing
  is added on a rollback. The default, ``False``, adds the job at once, as Django
  documents for ``enqueue()``. With ``settings.ECHOMQ['outbox']`` on, an enqueue inside
  a transaction is a row of that transaction either way.
"""
from __future__ import annotations

import re
import uuid
from typing import Any, Dict, List, Mapping, Tuple

from django.core.exceptions import ImproperlyConfigured

from ...errors import ConfigError, InvalidOptionError
from . import task_worker
from .task_worker import BACKEND_PATH
from .task_results import read_result, to_datetime
from .task_api import (BaseTaskBackend, InvalidTask, TaskResult, TaskResultDoesNotExist, TaskResultStatus,
                        normalize_json, task_enqueued)

__all__ = ["EchoMQBackend", "bullmq_priority", "BACKEND_PATH"]

OPTION_KEYS = ("job_options", "queue_job_options", "modules", "enqueue_on_commit")
#: BullMQ job options the backend sets itself (from the task, or per job).
OWN_OPTIONS = ("jobId", "priority", "delay", "repeat", "parent")

_ID = re.compile(r"^[A-Za-z0-9_.:-]{1,200}$")


def bullmq_priority(priority: int) -> int:
    """BullMQ's priority for Django's: ``100 - priority`` (100 -> 0, 0 -> 100, -100 -> 200)."""
    return 100 - int(priority)


def _setting(alias: str, *path: str) -> str:
    return f"settings.TASKS[{alias!r}]" + "".join(f"[{p!r}]" for p in path)


class EchoMQBackend(BaseTaskBackend):
    """Django tasks as BullMQ jobs on the queues of ``settings.ECHOMQ``."""

    supports_defer = True
    supports_priority = True
    supports_get_result = True
    #: tasks run on gevent greenlets: ``async def`` tasks are refused when defined
    supports_async_task = False

    def __init__(self, alias: str, params: Mapping[str, Any]) -> None:
        super().__init__(alias, params)
        from . import integration

        try:
            declared = list(integration().cfg.queues)
        except ConfigError as exc:
            raise ImproperlyConfigured(str(exc)) from None
        if "QUEUES" not in params:
            self.queues = set(declared)  # every queue of settings.ECHOMQ
        self.job_options, self.queue_job_options, self.modules, self.on_commit = self._options(self.options)

    # -- settings ---------------------------------------------------------------------------
    def _options(self, options: Any) -> Tuple[Dict[str, Any], Dict[str, Dict[str, Any]], List[str], bool]:
        from ...protocol.options import validate_job_options

        alias = self.alias
        if not isinstance(options, Mapping):
            raise ImproperlyConfigured(f"{_setting(alias, 'OPTIONS')} must be a dict, got {type(options).__name__}")
        for key in options:
            if key not in OPTION_KEYS:
                raise ImproperlyConfigured(f"{_setting(alias, 'OPTIONS', key)}: unknown option; the options are "
                                           f"{', '.join(OPTION_KEYS)}")

        def job_opts(value: Any, *path: str) -> Dict[str, Any]:
            if not isinstance(value, Mapping):
                raise ImproperlyConfigured(f"{_setting(alias, 'OPTIONS', *path)} must be a dict of BullMQ job "
                                           f"options, got {value!r}")
            own = [k for k in value if k in OWN_OPTIONS]
            if own:
                raise ImproperlyConfigured(f"{_setting(alias, 'OPTIONS', *path, own[0])}: set per task (priority, "
                                           f"run_after) or by the backend (jobId), not here")
            try:
                return validate_job_options(value)
            except InvalidOptionError as exc:
                raise ImproperlyConfigured(f"{_setting(alias, 'OPTIONS', *path)}: {exc}") from None

        defaults = job_opts(options.get("job_options", {}), "job_options")
        per_queue_raw = options.get("queue_job_options", {})
        if not isinstance(per_queue_raw, Mapping):
            raise ImproperlyConfigured(f"{_setting(alias, 'OPTIONS', 'queue_job_options')} must map queue names "
                                       f"to job options, got {per_queue_raw!r}")
        per_queue = {}
        for queue, value in per_queue_raw.items():
            if queue not in self.queues:
                raise ImproperlyConfigured(f"{_setting(alias, 'OPTIONS', 'queue_job_options', queue)}: {queue!r} "
                                           f"is not one of the backend's queues ({', '.join(sorted(self.queues))})")
            per_queue[queue] = job_opts(value, "queue_job_options", queue)
        modules = options.get("modules", [])
        if isinstance(modules, str) or not isinstance(modules, (list, tuple)) or \
                not all(isinstance(m, str) and m for m in modules):
            raise ImproperlyConfigured(f"{_setting(alias, 'OPTIONS', 'modules')} must be a list of module names, "
                                       f"got {modules!r}")
        on_commit = options.get("enqueue_on_commit", False)
        if not isinstance(on_commit, bool):
            raise ImproperlyConfigured(f"{_setting(alias, 'OPTIONS', 'enqueue_on_commit')} must be True or False, "
                                       f"got {on_commit!r}")
        return defaults, per_queue, list(modules), on_commit

    @property
    def declared(self) -> List[str]:
        """The queues of ``settings.ECHOMQ`` (read again after the settings change)."""
        from . import integration

        return list(integration().cfg.queues)

    def undeclared_queues(self) -> List[str]:
        """The backend's queues that ``settings.ECHOMQ`` does not declare."""
        return sorted(q for q in self.queues if q not in self.declared)

    def check(self, **kwargs: Any) -> List[Any]:
        from django.core import checks

        errors = []
        for queue in self.undeclared_queues():
            errors.append(checks.Error(
                f"{_setting(self.alias, 'QUEUES')} names the queue {queue!r}, which settings.ECHOMQ['queues'] "
                f"does not declare (declared: {', '.join(self.declared)})",
                hint="declare it in settings.ECHOMQ['queues'] or remove it from the backend's QUEUES",
                id="echomq_gevent.E001"))
        return errors

    def validate_task(self, task: Any) -> None:
        from inspect import iscoroutinefunction

        if iscoroutinefunction(task.func):
            raise InvalidTask(f"{task.func.__module__}.{task.func.__qualname__} is an async def task: "
                              f"echomq-gevent runs tasks on gevent greenlets; define it with def")
        super().validate_task(task)
        if task.queue_name not in self.declared:
            raise InvalidTask(f"the task {task.module_path} uses the queue {task.queue_name!r}, which "
                              f"settings.ECHOMQ['queues'] does not declare (declared: {', '.join(self.declared)})")
        task_worker.register(task)

    # -- enqueueing ---------------------------------------------------------------------------
    def job_options_for(self, task: Any) -> Dict[str, Any]:
        """The BullMQ options of a job of ``task`` (without its id)."""
        from django.utils import timezone

        opts = dict(self.job_options)
        opts.update(self.queue_job_options.get(task.queue_name, {}))
        priority = bullmq_priority(task.priority)
        if priority:
            opts["priority"] = priority
        if task.run_after is not None:
            delay_ms = int((task.run_after - timezone.now()).total_seconds() * 1000)
            if delay_ms > 0:
                opts["delay"] = delay_ms
        return opts

    def enqueue(self, task: Any, args: Any, kwargs: Any) -> Any:
        """Add the task's job (or its outbox row, or defer it to the commit); returns the
        ``TaskResult`` (status READY, id the job id)."""
        from django.db import transaction
        from django.utils import timezone

        from . import enqueue_on_commit, integration, outbox

        self.validate_task(task)
        args = normalize_json(list(args))  # Django's own error for what JSON cannot hold
        kwargs = normalize_json(dict(kwargs))
        data = {"args": args, "kwargs": kwargs}
        opts = self.job_options_for(task)
        opts["jobId"] = uuid.uuid4().hex
        state = integration()
        box = outbox()
        alias = (box.settings.database or "default") if box is not None else "default"
        in_atomic = transaction.get_connection(alias).in_atomic_block
        enqueued_at = timezone.now()
        if box is not None and in_atomic:
            job_id = enqueue_on_commit(task.queue_name, task.module_path, data, opts)
        elif self.on_commit and in_atomic:
            transaction.on_commit(state.deferred(task.queue_name, task.module_path, data, opts), using=alias)
            job_id = opts["jobId"]
        else:
            job = state.enqueue(task.queue_name, task.module_path, data, opts)
            job_id = job.id
            enqueued_at = to_datetime(job.timestamp) or enqueued_at
        result = TaskResult(task=task, id=str(job_id), status=TaskResultStatus.READY, enqueued_at=enqueued_at,
                            started_at=None, finished_at=None, last_attempted_at=None, args=args, kwargs=kwargs,
                            backend=self.alias, errors=[], worker_ids=[])
        task_enqueued.send(type(self), task_result=result)
        return result

    # -- results ------------------------------------------------------------------------------
    def get_result(self, result_id: Any) -> Any:
        """The task result of the job ``result_id`` on one of the backend's queues.
        Raises ``TaskResultDoesNotExist`` when no queue holds a job of a task by that id
        (never added, or removed: ``removeOnComplete``/``removeOnFail``, ``obliterate``)."""
        from . import integration

        if not isinstance(result_id, str) or not _ID.match(result_id):
            raise TaskResultDoesNotExist(f"{result_id!r} is not a job id")
        state = integration()
        for name in sorted(self.queues):
            if name not in self.declared:
                continue
            queue = state.queue(name)
            job = queue.get_job(result_id)
            if job is None:
                continue
            task = task_worker.registered(job.name, import_modules=True)
            if task is None:
                continue  # a job by that id that is not a task's (another producer's)
            return read_result(task, job, queue.get_job_state(result_id), self.alias)
        raise TaskResultDoesNotExist(f"no job {result_id!r} of a task on the queues {', '.join(sorted(self.queues))}")
