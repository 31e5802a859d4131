"""Django's Tasks API, wherever this Django keeps it.

Django 6.0 and later ship it as ``django.tasks``; on Django 4.2 to 5.2 the
``django-tasks`` package backports it as ``django_tasks`` (with two exceptions named
``...Error``). The backend and the worker side import the names from here, so one
class serves both. On Django 6 the backport is never used, even when it is installed:
``@task`` must come from the same module as the backend's base class.
"""
from __future__ import annotations

import django

__all__ = ["API", "BaseTaskBackend", "InvalidTask", "Task", "TaskContext", "TaskError", "TaskResult",
           "TaskResultDoesNotExist", "TaskResultStatus", "normalize_json", "task", "task_enqueued",
           "task_finished", "task_started"]

if django.VERSION >= (6, 0):
    from django.tasks import Task, TaskContext, TaskResult, TaskResultStatus, task
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import TaskError
    from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued, task_finished, task_started
    from django.utils.json import normalize_json

    #: the module users import ``task`` from
    API = "django.tasks"
else:
    try:
        from django_tasks import TaskContext, TaskResult, TaskResultStatus, task
        from django_tasks.backends.base import BaseTaskBackend
        from django_tasks.base import Task, TaskError
        from django_tasks.exceptions import InvalidTaskError as InvalidTask
        from django_tasks.exceptions import TaskResultDoesNotExist
        from django_tasks.signals import task_enqueued, task_finished, task_started
        from django_tasks.utils import normalize_json
    except ImportError as exc:
        raise ImportError(
            f"Django {django.get_version()} has no Tasks framework (django.tasks came in Django 6.0): "
            f"install its backport, 'pip install django-tasks' (Django 4.2 to 5.2, Python 3.10+), and add "
            f"'django_tasks' to INSTALLED_APPS ({exc})") from exc
    API = "django_tasks"
