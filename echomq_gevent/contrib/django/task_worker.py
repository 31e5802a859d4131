"""The worker side of the Tasks backend: which tasks this process knows, and running one.

A task is known when its module was imported: every ``@task`` of an
``EchoMQBackend`` goes through the backend's ``validate_task`` when it is defined,
which records it here by its import path. The worker imports, before it starts, the
``tasks`` module of every installed app and the backends' ``OPTIONS['modules']``
(:func:`discover`). A job is run by the task its name names **only** if that task is
known: a job cannot make the worker import a module, so a producer writing to Redis
does not choose what code runs. A job naming anything else fails once, with a reason
naming the name.
"""
from __future__ import annotations

import importlib
import inspect
import logging
import os
import socket
import threading
from typing import Any, Callable, Dict, List, Optional, Sequence, Set

from ...errors import ConfigError, UnrecoverableError
from ...plugins.hookspecs import hookimpl

__all__ = ["register", "registered", "discover", "TaskProcessors", "aliases", "backends", "worker_plugins",
           "atomic_aliases"]

log = logging.getLogger("echomq_gevent.django.tasks")

#: The BACKEND value of the backend in ``settings.TASKS`` (compared as text, so a Django
#: without the Tasks framework never imports it).
BACKEND_PATH = "echomq_gevent.contrib.django.tasks.EchoMQBackend"

_known: Dict[str, Any] = {}
_lock = threading.Lock()
_discovered = False


def register(task: Any) -> None:
    """Record a task (by its import path) as one this process may run."""
    path = task.module_path
    current = _known.get(path)
    if current is None or current.func is not task.func:
        with _lock:
            _known[path] = task


def registered(path: str, import_modules: bool = False) -> Optional[Any]:
    """The task whose import path is ``path``, if this process knows it. With
    ``import_modules``, the apps' task modules are imported first (once a process)."""
    task = _known.get(path)
    if task is None and import_modules and not _discovered:
        try:
            discover()
        except ConfigError as exc:
            log.error("%s", exc)
        task = _known.get(path)
    return task


def aliases() -> List[str]:
    """The aliases of ``settings.TASKS`` whose backend is ``EchoMQBackend``."""
    from django.conf import settings

    return [alias for alias, params in (getattr(settings, "TASKS", None) or {}).items()
            if isinstance(params, dict) and params.get("BACKEND") == BACKEND_PATH]


def backends() -> List[Any]:
    """The ``EchoMQBackend`` instances of ``settings.TASKS`` (none without the setting)."""
    names = aliases()
    if not names:
        return []
    from .task_api import API

    handler = importlib.import_module(API).task_backends
    return [handler[alias] for alias in names]


def discover(extra: Sequence[str] = ()) -> List[Any]:
    """Import the ``tasks`` module of every installed app that has one, the backends'
    ``OPTIONS['modules']`` and ``extra``; returns the modules. A module that fails to
    import raises ConfigError naming it."""
    global _discovered
    from django.apps import apps
    from django.utils.module_loading import module_has_submodule

    names = [f"{app.name}.tasks" for app in apps.get_app_configs()
             if app.name != __package__ and module_has_submodule(app.module, "tasks")]  # ours: the backend
    for backend in backends():
        names += [m for m in backend.modules if m not in names]
    names += [m for m in extra if m not in names]
    found = []
    for name in names:
        try:
            found.append(importlib.import_module(name))
        except Exception as exc:
            raise ConfigError(f"settings.TASKS: the task module {name} cannot be imported: "
                              f"{type(exc).__name__}: {exc}") from exc
    _discovered = True
    return found


def worker_plugins(declared: Sequence[str]) -> List[Any]:
    """The plugins a worker needs for ``settings.TASKS``: none without an
    ``EchoMQBackend``; else the task modules imported and one :class:`TaskProcessors`.
    Raises ConfigError when a backend names a queue ``settings.ECHOMQ`` lacks."""
    from django.core.exceptions import ImproperlyConfigured

    try:
        found = backends()
    except ImproperlyConfigured as exc:
        raise ConfigError(str(exc)) from None
    if not found:
        return []
    queues: Set[str] = set()
    for backend in found:
        missing = backend.undeclared_queues()
        if missing:
            raise ConfigError(f"settings.TASKS[{backend.alias!r}]['QUEUES'] names the queue {missing[0]!r}, which "
                              f"settings.ECHOMQ['queues'] does not declare (declared: {', '.join(declared)})")
        queues |= backend.queues
    discover()
    log.info("Django tasks known to this worker: %s", ", ".join(sorted(_known)) or "none")
    plugin = TaskProcessors(queues)
    _check_atomic(plugin)
    return [plugin]


def _atomic_tasks(queues: Set[str]) -> List[Any]:
    from .ledger import atomic_of

    return [t for path, t in sorted(_known.items()) if t.queue_name in queues and atomic_of(t.func) is not None]


def _check_atomic(plugin: "TaskProcessors") -> None:
    """Refuse at start an ``@atomic_task`` whose ledger database is not configured or
    not migrated (ConfigError naming the task and the setting)."""
    from .ledger import atomic_of, check_alias, ledger_alias

    for task in _atomic_tasks(plugin.queues):
        alias = atomic_of(task.func)[0]
        setting = f"@atomic_task(using={alias!r})" if alias else "settings.ECHOMQ['ledger']['database']"
        check_alias(ledger_alias(alias), f"the task {task.module_path}", setting)


def atomic_aliases(plugins: Sequence[Any]) -> List[Optional[str]]:
    """The ledger aliases (``None``: the settings' database) of the atomic tasks the
    :class:`TaskProcessors` among ``plugins`` serve."""
    from .ledger import atomic_of

    out: List[Optional[str]] = []
    for plugin in plugins:
        if isinstance(plugin, TaskProcessors):
            out += [atomic_of(t.func)[0] for t in _atomic_tasks(plugin.queues)]
    return out


class TaskProcessors:
    """Plugin: on the backends' queues, a job named by a known task's path runs that
    task; any other name (on those queues, with no processor of its own) fails once."""

    __name__ = "echomq_gevent.contrib.django.tasks"

    def __init__(self, queues: Set[str]) -> None:
        self.queues = set(queues)

    @hookimpl
    def echomq_get_processor(self, queue: str, job_name: str) -> Optional[Callable[..., Any]]:
        if queue not in self.queues:
            return None
        task = _known.get(job_name)
        if task is None:
            return _unknown
        return TaskRun(task)


def _unknown(job: Any) -> Any:
    known = sorted(_known)
    listed = ", ".join(known[:10]) + (f" and {len(known) - 10} more" if len(known) > 10 else "")
    raise UnrecoverableError(
        f"job {job.id} names {job.name!r}, which is not a Django task this worker knows: tasks are found in "
        f"each installed app's tasks module and settings.TASKS OPTIONS['modules'] (known: {listed or 'none'})")


class TaskRun:
    """The processor of one task's jobs."""

    def __init__(self, task: Any) -> None:
        self.task = task
        # what the worker's logs and traces name the processor by
        self.__name__ = self.__qualname__ = task.func.__qualname__
        self.__module__ = task.func.__module__

    def __call__(self, job: Any) -> Any:
        from .ledger import DjangoLedgerDb, atomic_of, ledger_alias

        atomic = atomic_of(self.task.func)
        if atomic is None:
            return self._run(job)
        from ..ledger.core import run_once

        # @atomic_task: the task's effects and its job's ledger row commit together
        return run_once(DjangoLedgerDb(ledger_alias(atomic[0])), self._run, job)

    def _run(self, job: Any) -> Any:
        from .task_api import TaskContext, TaskResultStatus, normalize_json, task_finished, task_started
        from .task_results import read_result, task_call, worker_ids

        task = self.task
        try:
            args, kwargs = task_call(job)
        except ValueError as exc:
            raise UnrecoverableError(f"job {job.id} of the task {task.module_path}: {exc}") from None
        signature = inspect.signature(task.func)
        try:
            signature.bind(*(([None] if task.takes_context else []) + list(args)), **kwargs)
        except TypeError as exc:
            raise UnrecoverableError(f"job {job.id} of the task {task.module_path}: its arguments do not fit "
                                     f"{task.func.__name__}{signature}: {exc}") from None
        result = read_result(task, job, "active", task.backend)
        # this attempt's worker: the host and process (a fork has its own pid)
        object.__setattr__(result, "worker_ids", worker_ids(job, job.attempts_made + 1,
                                                            f"{socket.gethostname()}:{os.getpid()}"))
        sender = type(task.get_backend())  # the signals' sender: the backend class, as Django's
        task_started.send(sender=sender, task_result=result)
        try:
            if task.takes_context:
                value = task.func(TaskContext(task_result=result), *args, **kwargs)
            else:
                value = task.func(*args, **kwargs)
            try:
                value = normalize_json(value)
            except (TypeError, ValueError) as exc:
                raise UnrecoverableError(f"the task {task.module_path} returned a value JSON cannot hold: "
                                         f"{exc}") from None
        except BaseException:
            object.__setattr__(result, "status", TaskResultStatus.FAILED)
            _finished(task_finished, sender, result)
            raise
        object.__setattr__(result, "status", TaskResultStatus.SUCCESSFUL)
        object.__setattr__(result, "_return_value", value)
        _finished(task_finished, sender, result)
        return value


def _finished(signal: Any, sender: Any, result: Any) -> None:
    from django.utils import timezone

    object.__setattr__(result, "finished_at", timezone.now())
    try:
        signal.send(sender=sender, task_result=result)
    except Exception:  # a receiver's error must not change the job's outcome
        log.exception("a task_finished receiver raised for the task %s", result.task.module_path)
